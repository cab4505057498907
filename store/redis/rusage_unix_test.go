//go:build unix

package redis

import "syscall"

// processCPU is this process's CPU time so far, in seconds (user plus
// system), or -1 where it cannot be read.
func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
