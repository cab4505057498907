package redis

import (
	"context"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// algorithms are every algorithm, for tests that run each.
var algorithms = []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow, ratelimit.TokenBucket,
	ratelimit.SlidingLog, ratelimit.SlidingWindowApprox}

// t0 is the first instant of the tests' clocks: a realistic epoch time,
// not aligned to any window.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// clock is a controlled clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// realRedis reports whether tests should start a real redis-server: it is
// on PATH, or RATELIMIT_REQUIRE_REDIS=1 makes its absence a failure.
func realRedis() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil || redistest.Require()
}

// miniStore returns a Redis store with opts on its own client of a fresh
// miniredis, closed when the test ends.
func miniStore(t *testing.T, opts ...Option) (*miniredis.Miniredis, *goredis.Client, *Store) {
	t.Helper()
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { client.Close() })
	s, err := New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mr, client, s
}

func mustTake(t testing.TB, s ratelimit.Store, p *ratelimit.Policy, cost int64, keys ...string) ratelimit.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: keys, Cost: cost})
	if err != nil {
		t.Fatalf("Take(%q, cost %d): %v", keys, cost, err)
	}
	return d
}

// takeBoth takes req from s and from the reference store ref, failing
// the test (at step) when either errs.
func takeBoth(t *testing.T, step int, s, ref ratelimit.Store, req ratelimit.Request) (got, want ratelimit.Decision) {
	t.Helper()
	got, err := s.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	want, err = ref.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("step %d: the reference: %v", step, err)
	}
	return got, want
}

// takeEach sends per calls of cost 1 for each of ids identities
// ("ip:<n>", in turns) from callers goroutines, and returns how many each
// identity got admitted.
func takeEach(t *testing.T, s *Store, p *ratelimit.Policy, ids, per, callers int) []int64 {
	t.Helper()
	admitted := make([]atomic.Int64, ids)
	work := make(chan int, ids*per)
	for i := range ids * per {
		work <- i % ids
	}
	close(work)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:" + strconv.Itoa(id)}, Cost: 1})
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[id].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	out := make([]int64, ids)
	for i := range admitted {
		out[i] = admitted[i].Load()
	}
	return out
}

// callHook records, for every script call, what pick takes of it (a
// script's hash, an operation; "" for other commands is not kept); last
// returns the latest.
type callHook struct {
	pick func(goredis.Cmder) string
	mu   sync.Mutex
	seen []string
}

func (h *callHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *callHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if v := h.pick(cmd); v != "" {
			h.mu.Lock()
			h.seen = append(h.seen, v)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *callHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *callHook) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) == 0 {
		return ""
	}
	return h.seen[len(h.seen)-1]
}
