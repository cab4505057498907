//go:build linux

package redistest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const orphanEnv = "REDISTEST_ORPHAN_HELPER"

// TestServerRealOrphan checks that a server does not outlive a test binary
// that exits without running its cleanups: a child test process starts a
// server, prints its pid and calls os.Exit; the server must die with it.
func TestServerRealOrphan(t *testing.T) {
	if os.Getenv(orphanEnv) == "1" {
		s := StartServer(t)
		fmt.Printf("PID %d\n", s.proc.cmd.Process.Pid)
		os.Exit(0) // no cleanups: only Pdeathsig can stop the server
	}
	serverBinary(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerRealOrphan$", "-test.count=1")
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	pid := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PID "); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("helper process printed no PID:\n%s", out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("redis-server pid %d outlived its test process", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie (a reparented child
// may wait a while to be reaped in a container without an init process).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}
