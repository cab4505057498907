package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// The soak runs the server under test (the Handler, its Limiter, the Redis
// store and its go-redis client, and an HTTP server) in a child process of
// its own: the heap and goroutines it reports are the server's alone, not
// mixed with the load generator's connections and the bookkeeping of the
// over-admission check, whose size follows the load.

// serveStatsPath answers the server process's heap and goroutines.
const serveStatsPath = "/_soak/stats"

// serverStats is the server process's answer on serveStatsPath.
type serverStats struct {
	HeapAlloc  uint64 `json:"heap_alloc"` // bytes right after runtime.GC, the least of heapReadings
	Goroutines int    `json:"goroutines"` // the fewest seen over statsWindow
}

// statsWindow is how long the server process watches its goroutines and
// heap before answering the lowest readings: requests in flight add a
// goroutine or two and their buffers each, so the lowest is the standing
// level, where a leak shows, rather than the load of one instant.
const statsWindow = 200 * time.Millisecond

// heapReadings is how many times, spread over statsWindow, the server
// process runs a GC and reads its heap.
const heapReadings = 4

// readEvery is the time between two goroutine counts.
const readEvery = 5 * time.Millisecond

// newLimiterHandler builds the handler under test: policy over a Redis
// store on addr, one identity per X-API-Key header. With prefill, the
// go-redis pool opens all its connections at once and never exceeds them,
// so that its buffers (64 KiB per connection) are all in the heap before
// the soak's baseline sample: a pool growing to its bound is not a leak.
// Without, the client has go-redis's defaults, as most users' would.
func newLimiterHandler(addr, prefix string, policy *ratelimit.Policy, timeout time.Duration, prefill bool) (http.Handler, func(), error) {
	opt := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
	if prefill {
		opt.PoolSize = 10 * runtime.GOMAXPROCS(0) // go-redis's default
		opt.MinIdleConns, opt.MaxActiveConns = opt.PoolSize, opt.PoolSize
	}
	rdb := redis.NewClient(opt)
	st, err := store.NewRedis(rdb, store.WithPrefix(prefix))
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	byKey := ratelimit.ByHeader("X-API-Key")
	opts := []ratelimit.Option{
		ratelimit.WithIdentifiers(byKey),
		// FailOpen, so that a request Redis did not answer in time shows
		// as served without headers (failedOpen) rather than decided by
		// the Redis store's per-process fallback: the soak counts them.
		ratelimit.WithFailureMode(ratelimit.FailOpen),
		ratelimit.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	if timeout > 0 {
		opts = append(opts, ratelimit.WithTimeout(timeout))
	}
	lim, err := ratelimit.New(st, policy, opts...)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return lim.Handler(okHandler), func() { _ = rdb.Close() }, nil
}

// serveMain is the child process: it serves the handler on a free
// 127.0.0.1 port, prints "LISTEN <url>" on stdout, and exits when its
// standard input closes (the parent ended).
func serveMain(cfg config) error {
	policy, err := ratelimit.ParsePolicy(cfg.policy, ratelimit.Named("soak"))
	if err != nil {
		return err
	}
	h, closeStore, err := newLimiterHandler(cfg.redisAddr, cfg.prefix, policy, cfg.timeout, true)
	if err != nil {
		return err
	}
	defer closeStore()
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.Handle("/warm", warmHandler(cfg.workers))
	mux.Handle("/debug/pprof/heap", httppprof.Handler("heap")) // to look into a leak the soak reports
	mux.HandleFunc(serveStatsPath, func(w http.ResponseWriter, _ *http.Request) {
		st := serverStats{HeapAlloc: math.MaxUint64, Goroutines: math.MaxInt}
		start := time.Now()
		for i := 0; time.Since(start) < statsWindow; i++ {
			st.Goroutines = min(st.Goroutines, runtime.NumGoroutine())
			if i%(int(statsWindow/readEvery)/heapReadings) == 0 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				st.HeapAlloc = min(st.HeapAlloc, ms.HeapAlloc)
			}
			time.Sleep(readEvery)
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	fmt.Printf("LISTEN http://%s\n", l.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it or dies
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

// serverProc is the child process serving the handler under test.
type serverProc struct {
	url   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
}

// startServerProc starts this program again in server mode and waits (at
// most 30s) for its URL.
func startServerProc(cfg config, redisAddr, prefix string) (*serverProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-serve", "-redis", redisAddr, "-prefix", prefix, "-policy", cfg.policy,
		"-workers", fmt.Sprint(cfg.workers), "-timeout", cfg.timeout.String()}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	setPdeathsig(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the server process: %w", err)
	}
	p := &serverProc{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				urls <- u
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.url = <-urls:
		return p, nil
	case <-p.done:
		return nil, errors.New("the server process exited before listening")
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, errors.New("the server process did not listen within 30s")
	}
}

// stats asks the server process for its heap and goroutines.
func (p *serverProc) stats(client *http.Client) (serverStats, error) {
	var s serverStats
	resp, err := client.Get(p.url + serveStatsPath)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("%s: status %d", serveStatsPath, resp.StatusCode)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// stop ends the server process: closing its input asks it to shut down;
// after 10s it is killed.
func (p *serverProc) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
