//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: Pdeathsig is Linux-only, so elsewhere only the
// t.Cleanup hooks stop the servers.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// pauseSignals: freezing a process is not supported here; Pause fails the
// test with a message.
var pauseSignals = [2]syscall.Signal{}
