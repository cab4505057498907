//go:build !linux

package main

import "os/exec"

// setPdeathsig does nothing here: Pdeathsig is Linux-only, so elsewhere the
// server is stopped only when the program ends normally.
func setPdeathsig(*exec.Cmd) {}
