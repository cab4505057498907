package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

// simClock is a simulated clock with timers for many goroutines: a
// goroutine that sleeps blocks until every running goroutine sleeps or has
// finished; then the clock jumps to the earliest wake-up and wakes those
// due. Time never passes on its own, so tests are exact and quick.
type simClock struct {
	mu      sync.Mutex
	now     time.Time
	running int
	waiters []simWaiter
	idle    chan struct{} // signalled when running drops to 0
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Go runs f as one of the clock's goroutines.
func (c *simClock) Go(wg *sync.WaitGroup, f func()) {
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.done()
		f()
	}()
}

func (c *simClock) done() {
	c.mu.Lock()
	c.running--
	if c.running == 0 {
		select {
		case c.idle <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
}

// Sleep is the Limiter's sleep on this clock.
func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	w := simWaiter{wake: make(chan struct{}), ctx: ctx}
	c.mu.Lock()
	w.at = c.now.Add(d)
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	c.done()
	select {
	case <-w.wake:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		for i, o := range c.waiters {
			if o.wake == w.wake {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				c.running++
				break
			}
		}
		c.mu.Unlock()
		select {
		case <-w.wake: // woken meanwhile: running was counted by the waker
		default:
		}
		return ctx.Err()
	}
}

// Run advances the clock from wake-up to wake-up until every goroutine has
// finished (or limit passes), and returns the final time.
func (c *simClock) Run(t *testing.T, wg *sync.WaitGroup, limit time.Duration) {
	t.Helper()
	start := c.Now()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for {
		c.mu.Lock()
		if c.running > 0 || len(c.waiters) == 0 {
			c.mu.Unlock()
			select {
			case <-finished:
				return
			case <-c.idle:
			case <-time.After(10 * time.Second):
				t.Fatal("simClock: goroutines neither finish nor sleep (hang guard)")
			}
			continue
		}
		// Wake the earliest waiter, the first to sleep among equals, alone:
		// wake-ups at one instant happen in the order their timers were set.
		sort.SliceStable(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
		c.now = c.waiters[0].at
		if c.now.Sub(start) > limit {
			c.mu.Unlock()
			t.Fatalf("simClock: still waiting after %s of simulated time", limit)
		}
		c.running++
		close(c.waiters[0].wake)
		c.waiters = c.waiters[1:]
		c.mu.Unlock()
	}
}

type simWaiter struct {
	at   time.Time
	wake chan struct{}
	ctx  context.Context
}

func newSimClock(start time.Time) *simClock {
	return &simClock{now: start, idle: make(chan struct{}, 1)}
}

// checkWindows fails if more than rate release times fall in one window
// [s, s+period).
func checkWindows(t *testing.T, times []time.Time, period time.Duration, rate int) {
	t.Helper()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := range times {
		n := 0
		for j := i; j < len(times) && times[j].Sub(times[i]) < period; j++ {
			n++
		}
		if n > rate {
			t.Fatalf("%d released within %s from %s, limit %d", n, period, times[i].Sub(times[0]), rate)
		}
	}
}

// TestWaitInLine: 50 concurrent Wait callers on "10/s" are released within
// the algorithm's guarantee and all by 5s of simulated time: the exact
// default (≤ 10 in any second, in order of arrival, by reserving in the
// store call), the token bucket (≤ Burst + d/T in any span d), and a
// policy that cannot reserve (sub-buckets: waits RetryAfter, then asks
// again).
func TestWaitInLine(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy *ratelimit.Policy
		window time.Duration
		rate   int
		by     time.Duration
	}{
		{"exact", ratelimit.MustParsePolicy("10/s"), time.Second, 10, 5 * time.Second},
		{"token bucket", ratelimit.MustParsePolicy("10/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket)), time.Second, 20, 5 * time.Second},
		{"sub-buckets", ratelimit.MustParsePolicy("10/s", ratelimit.WithPrecision(10)), time.Second, 10, 6 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newSimClock(clockStart)
			lim := newLimiter(t, store.NewMemory(store.WithClock(clk.Now)), c.policy)
			ratelimit.SetLogClock(lim, clk.Now)
			ratelimit.SetSleep(lim, clk.Sleep)
			var mu sync.Mutex
			var released []time.Time
			var wg sync.WaitGroup
			for i := 0; i < 50; i++ {
				clk.Go(&wg, func() {
					d, err := lim.Wait(context.Background(), "tenant:acme")
					if err != nil || !d.Allowed {
						t.Errorf("Wait: %+v, %v", d, err)
						return
					}
					mu.Lock()
					released = append(released, clk.Now())
					mu.Unlock()
				})
			}
			clk.Run(t, &wg, time.Minute)
			if len(released) != 50 {
				t.Fatalf("%d of 50 released", len(released))
			}
			checkWindows(t, released, c.window, c.rate)
			if c.name == "token bucket" {
				// Burst 10, then one every 100ms: ≤ 10 + d/100ms in any span d.
				for i := range released {
					for j := i; j < len(released); j++ {
						if span := released[j].Sub(released[i]); j-i+1 > 10+int(span/(100*time.Millisecond)) {
							t.Fatalf("token bucket: %d released in %s", j-i+1, span)
						}
					}
				}
			}
			last := released[len(released)-1].Sub(clockStart)
			t.Logf("%s: 50 waiters released by %s of simulated time", c.name, last)
			if last > c.by {
				t.Fatalf("the last waiter was released at %s, want by %s", last, c.by)
			}
		})
	}
}

// TestWaitCancelGivesPlaceBack: a waiter whose ctx ends while it waits
// returns an error, charged nothing: the counters are as if it never came.
func TestWaitCancelGivesPlaceBack(t *testing.T) {
	clk := newSimClock(clockStart)
	mem := store.NewMemory(store.WithClock(clk.Now))
	p := ratelimit.MustParsePolicy("10/s")
	lim := newLimiter(t, mem, p)
	ratelimit.SetSleep(lim, clk.Sleep)
	for i := 0; i < 10; i++ {
		lim.Allow(context.Background(), "k")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var err error
	clk.Go(&wg, func() { _, err = lim.Wait(ctx, "k") })
	<-clk.idle // the waiter sleeps: its place at +1s is reserved
	if d, _ := lim.AllowN(context.Background(), 0, "k"); d.Allowed {
		t.Fatal("a peek while the place is reserved says there is room")
	}
	cancel()
	wg.Wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait returned %v, want context.Canceled", err)
	}
	clk.mu.Lock()
	clk.now = clk.now.Add(time.Second)
	clk.mu.Unlock()
	for i := 0; i < 10; i++ { // all ten slots free again at +1s: the canceled place was given back
		if d, _ := lim.Allow(context.Background(), "k"); !d.Allowed {
			t.Fatalf("request %d at +1s denied: the canceled waiter kept its place", i)
		}
	}
}

// TestWaitDeadlineTooClose: a wait past the ctx's deadline returns at
// once, charged nothing, with an error wrapping DeadlineExceeded; a cost
// above the capacity is an error at once.
func TestWaitDeadlineTooClose(t *testing.T) {
	clk := newTestClock()
	mem := store.NewMemory(store.WithClock(clk.Now))
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("1/m"))
	ratelimit.SetLogClock(lim, clk.Now)
	ratelimit.SetSleep(lim, func(context.Context, time.Duration) error { t.Fatal("slept"); return nil })
	lim.Allow(context.Background(), "k")
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(10*time.Second))
	defer cancel()
	if _, err := lim.Wait(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with 10s left for a 60s wait: %v", err)
	}
	clk.Advance(time.Minute)
	if d, _ := lim.Allow(context.Background(), "k"); !d.Allowed {
		t.Fatal("the refused waiter was charged")
	}
	if _, err := lim.WaitN(context.Background(), 2, "k"); err == nil {
		t.Fatal("WaitN of a cost above the capacity did not fail")
	}
}

// TestRealWaitInLine: 20 Wait callers on "5/s" against a real Redis, in
// real time, are all released, in about 3s (4 windows of 5), and no window
// shorter than a second by a generous 200ms holds more than 5 (releases
// are measured on this process's clock, after Redis's). The connections
// and the script are ready before the waiters start: a first window whose
// replies waited on dials and a script load would be measured late, next
// to the second, on a busy machine.
func TestRealWaitInLine(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	lim := newLimiter(t, mustRedis(t, c), ratelimit.MustParsePolicy("5/s", ratelimit.Named("realwait")), patient)
	var warm sync.WaitGroup
	for i := range 20 {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if _, err := lim.Allow(context.Background(), "job:warm"+strconv.Itoa(i)); err != nil {
				t.Errorf("warming up: %v", err)
			}
		}()
	}
	warm.Wait()
	start := time.Now()
	var mu sync.Mutex
	var released []time.Time
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if d, err := lim.Wait(ctx, "job:realwait"); err != nil || !d.Allowed {
				t.Errorf("Wait: %+v %v", d, err)
				return
			}
			mu.Lock()
			released = append(released, time.Now())
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("20 waiters on 5/s released in %s", took)
	if len(released) != 20 || took < 2500*time.Millisecond || took > 8*time.Second {
		t.Fatalf("%d released in %s, want 20 in about 3s", len(released), took)
	}
	checkWindows(t, released, 800*time.Millisecond, 5)
}

// TestMaxDelayHolds: with WithMaxDelay, requests that fit within the delay
// are held and served in order, never more than the limit at the time each
// is served; beyond the delay the answer is 429; a client that leaves while
// held gives its place back, to the next request that comes.
func TestMaxDelayHolds(t *testing.T) {
	clk := newSimClock(clockStart)
	mem := store.NewMemory(store.WithClock(clk.Now))
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("2/s"), ratelimit.WithMaxDelay(time.Second))
	ratelimit.SetLogClock(lim, clk.Now)
	ratelimit.SetSleep(lim, clk.Sleep)
	var mu sync.Mutex
	var order []int
	var servedAt []time.Time
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.Context().Value(seqKey{}).(int))
		servedAt = append(servedAt, clk.Now())
		mu.Unlock()
		if res, _ := ratelimit.FromContext(r.Context()); w.Header().Get("RateLimit") == "" || !res.Decision.Allowed {
			t.Errorf("request served without its headers or decision: %+v", res)
		}
		io.WriteString(w, "ok")
	}))
	codes := make([]int, 7)
	var wg sync.WaitGroup
	ctx3, leave3 := context.WithCancel(context.Background())
	arrive := func(i int, ctx context.Context) {
		ctx = context.WithValue(ctx, seqKey{}, i)
		clk.Go(&wg, func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, getFrom(ipA).WithContext(ctx))
			if w.Body.Len() > 0 { // a recorder says 200 even when nothing was written
				codes[i] = w.Code
			}
		})
		<-clk.idle // request i is held or answered before the next one comes
	}
	for i := 0; i < 6; i++ { // all at t=0
		ctx := context.Background()
		if i == 3 {
			ctx = ctx3
		}
		arrive(i, ctx)
	}
	leave3() // request 3 leaves while held (its turn was at +1s)
	<-clk.idle
	arrive(6, context.Background()) // still t=0: it takes 3's place
	clk.Run(t, &wg, time.Minute)
	// 0 and 1 at once, 2 and 3 held until +1s; 4 and 5 would wait 2s: 429.
	want := []int{200, 200, 200, 0, 429, 429, 200}
	for i, c := range want {
		if codes[i] != c {
			t.Fatalf("statuses %v, want %v (3 left)", codes, want)
		}
	}
	if len(order) != 4 || order[0] != 0 || order[1] != 1 || order[2] != 2 || order[3] != 6 {
		t.Fatalf("served %v, want [0 1 2 6]: in arrival order, 6 in 3's place", order)
	}
	if got := servedAt[3].Sub(clockStart); got != time.Second {
		t.Fatalf("request 6 served at +%s, want +1s (3's place)", got)
	}
	checkWindows(t, servedAt, time.Second, 2)
}

type seqKey struct{}

// TestHeldRequestLeftRefundsOuter: a request held by an inner Limiter
// (WithMaxDelay) whose client leaves is never served, so the Limiter
// outside it, which charged it, gives its charge back.
func TestHeldRequestLeftRefundsOuter(t *testing.T) {
	clk := newSimClock(clockStart)
	mem := store.NewMemory(store.WithClock(clk.Now))
	outer := newLimiter(t, mem, ratelimit.MustParsePolicy("5/m", ratelimit.Named("outer")))
	inner := newLimiter(t, mem, ratelimit.MustParsePolicy("1/m", ratelimit.Named("inner")), ratelimit.WithMaxDelay(time.Hour))
	for _, l := range []*ratelimit.Limiter{outer, inner} {
		ratelimit.SetLogClock(l, clk.Now)
		ratelimit.SetSleep(l, clk.Sleep)
	}
	served := 0
	h := outer.Handler(inner.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ })))
	var wg sync.WaitGroup
	clk.Go(&wg, func() { h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) })
	<-clk.idle
	ctx, leave := context.WithCancel(context.Background())
	clk.Go(&wg, func() { h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA).WithContext(ctx)) })
	<-clk.idle // held by inner until +1m
	leave()
	wg.Wait()
	if served != 1 {
		t.Fatalf("served %d, want 1 (the second left while held)", served)
	}
	d, err := outer.AllowN(context.Background(), 0, "ip:203.0.113.7")
	if err != nil || d.Remaining != 4 {
		t.Fatalf("outer: %d left, %v; want 4: the request that left while held stays charged", d.Remaining, err)
	}
}
