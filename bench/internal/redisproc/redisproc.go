// Package redisproc starts a private redis-server for the benchmark
// programs.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proc is a redis-server a program started for itself, so that the INFO
// counters it reads see no traffic but its own.
type Proc struct {
	// Addr is the server's address, 127.0.0.1:<port>.
	Addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// Start starts bin on a free 127.0.0.1 port, without persistence, and
// waits until it answers PING (at most 10s). It tries a few ports in case
// another process takes the chosen one first. On Linux the kernel kills the
// server if the program dies without calling Stop.
func Start(bin string) (*Proc, error) { return StartOnCore(bin, -1) }

// StartOnCore is Start with the server pinned to CPU core (taskset -c), as
// Redis runs in production on a machine of its own; core < 0 pins nothing.
func StartOnCore(bin string, core int) (*Proc, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (%w); install it or pass -redis host:port", err)
	}
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p, err := startOn(path, port, core)
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startOn(path string, port, core int) (*Proc, error) {
	dir, err := os.MkdirTemp("", "ratelimit-bench-redis-")
	if err != nil {
		return nil, err
	}
	args := []string{path}
	if core >= 0 {
		taskset, err := exec.LookPath("taskset")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pinning redis-server to core %d: %w", core, err)
		}
		args = []string{taskset, "-c", strconv.Itoa(core), path}
	}
	cmd := exec.Command(args[0], append(args[1:],
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "yes",
		"--daemonize", "no",
		"--dir", dir,
		"--loglevel", "warning",
	)...)
	cmd.Dir = dir
	setPdeathsig(cmd)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	p := &Proc{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()

	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			p.Stop()
			return nil, fmt.Errorf("redis-server on port %d exited at start: %w", port, err)
		default:
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer within 10s: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (it holds nothing worth a clean shutdown) and
// removes its directory. It is safe to call more than once, and on a nil
// *Proc.
func (p *Proc) Stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	os.RemoveAll(p.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("free port: not a TCP address")
	}
	return addr.Port, nil
}
