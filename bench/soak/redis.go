package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisProc is a redis-server this program started for itself: no
// persistence, bound to 127.0.0.1, killed when the program ends (and by the
// kernel if the program dies first, on Linux).
type redisProc struct {
	bin  string
	addr string
	port int
	dir  string

	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts bin on a free 127.0.0.1 port and waits until it
// answers. It tries a few ports in case another process takes the chosen
// one first.
func startRedis(bin string) (*redisProc, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (%w); install it or pass -redis host:port", err)
	}
	dir, err := os.MkdirTemp("", "ratelimit-soak-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		p := &redisProc{bin: path, port: port, addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
		if lastErr = p.start(); lastErr == nil {
			return p, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// start launches the server on p.port and waits, at most 10s, until it
// answers PING.
func (p *redisProc) start() error {
	cmd := exec.Command(p.bin,
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "yes",
		"--daemonize", "no",
		"--dir", p.dir,
		"--loglevel", "warning",
	)
	cmd.Dir = p.dir
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	setPdeathsig(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.bin, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() { _ = cmd.Wait(); close(done) }()

	c := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start: %v\n%s", p.port, err, out.String())
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("redis-server on port %d did not answer within 10s: %w", p.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server with SIGKILL, as a crash would, and waits (at most
// 5s) for it to exit. Its data is gone: it had no persistence.
func (p *redisProc) kill() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// restart starts the server again on the same port after kill, retrying for
// up to 10s in case the port is not free yet.
func (p *redisProc) restart() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.start()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop kills the server and removes its directory. It is safe to call more
// than once.
func (p *redisProc) stop() {
	if p == nil {
		return
	}
	p.kill()
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
