//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: Pdeathsig is Linux-only, so elsewhere only the
// t.Cleanup hooks stop the servers.
func sysProcAttr() *syscall.SysProcAttr { return nil }
