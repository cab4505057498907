package redisproc

import (
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel kill the child if this program dies first,
// so a crashed or killed benchmark leaves no redis-server behind.
func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
