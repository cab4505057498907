//go:build linux

package redistest

import "syscall"

// sysProcAttr asks the kernel to SIGKILL the server if the test binary dies
// without running its cleanups (crash, os.Exit, -timeout panic, SIGKILL).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pauseSignals are the signals that freeze and thaw a process.
var pauseSignals = [2]syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT}
