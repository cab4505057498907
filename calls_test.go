package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

func TestAllowN(t *testing.T) {
	clk := newTestClock()
	st := store.NewMemory(store.WithClock(clk.Now))
	var h hookRecorder
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("5/m"), ratelimit.WithDecisionHook(h.onDecision))
	ctx := context.Background()
	steps := []struct {
		advance       time.Duration
		cost          int64
		keys          []string
		wantAllowed   bool
		wantRemaining int64
	}{
		{0, 2, []string{"job:a"}, true, 3},
		{0, 3, []string{"job:a"}, true, 0},
		{0, 1, []string{"job:a"}, false, 0},
		{0, 0, []string{"job:a"}, false, 0}, // peek: a cost of 1 would be denied
		{0, 1, []string{"job:b"}, true, 4},
		{0, 1, []string{"job:b", "job:a"}, false, 0}, // a is spent, so b is not charged
		{0, 1, []string{"job:b", "job:b"}, true, 3},  // a repeated key counts once
		{0, 6, []string{"job:c"}, false, 5},          // above capacity: never
		{2 * time.Minute, 1, []string{"job:a"}, true, 4},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		d, err := lim.AllowN(ctx, s.cost, s.keys...)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != s.wantAllowed || d.Remaining != s.wantRemaining {
			t.Errorf("step %d: allowed %v, remaining %d; want %v, %d", i, d.Allowed, d.Remaining, s.wantAllowed, s.wantRemaining)
		}
		if s.cost > 5 && d.RetryAfter != ratelimit.Never {
			t.Errorf("step %d: RetryAfter %v, want Never", i, d.RetryAfter)
		}
		if res := h.last(); res.Cost != s.cost || res.Decision.Allowed != d.Allowed || res.DryRun {
			t.Errorf("step %d: decision hook saw %+v", i, res)
		}
	}
	if d, err := lim.Allow(ctx, "job:a"); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Errorf("Allow = %+v, %v; want allowed with 3 remaining", d, err)
	}
}

func TestAllowNRejectsArguments(t *testing.T) {
	rec := &recStore{}
	var h hookRecorder
	lim := newLimiter(t, rec, ratelimit.MustParsePolicy("5/m"), h.options()...)
	tests := []struct {
		name string
		cost int64
		keys []string
		want string
	}{
		{"negative cost", -1, []string{"a"}, "negative cost"},
		{"no keys", 1, nil, "no keys"},
		{"empty key", 1, []string{"a", ""}, "key 1 is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := lim.AllowN(context.Background(), tt.cost, tt.keys...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || d.Allowed {
				t.Errorf("AllowN = %+v, %v; want an error with %q", d, err, tt.want)
			}
		})
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("store asked %d times", n)
	}
	if len(h.errors()) != 0 || len(h.results) != 0 {
		t.Errorf("hooks called for invalid arguments")
	}
}

// TestAllowNDedupesBeforeMaxKeys: repeated keys count once against MaxKeys.
func TestAllowNDedupesBeforeMaxKeys(t *testing.T) {
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("5/s"))
	keys := make([]string, 0, 2*ratelimit.MaxKeys)
	for i := 0; i < 2*ratelimit.MaxKeys; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i%ratelimit.MaxKeys))
	}
	if d, err := lim.AllowN(context.Background(), 1, keys...); err != nil || !d.Allowed {
		t.Fatalf("%d keys, %d distinct: %+v %v", len(keys), ratelimit.MaxKeys, d, err)
	}
}

func TestAllowNilContext(t *testing.T) {
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/s"))
	var nilCtx context.Context // a nil context must not panic
	if d, err := lim.Allow(nilCtx, "a"); err != nil || !d.Allowed {
		t.Errorf("Allow(nil ctx) = %+v, %v", d, err)
	}
}

func TestAllowNStoreFailure(t *testing.T) {
	tests := []struct {
		name        string
		store       ratelimit.Store
		opts        []ratelimit.Option
		ctx         func() context.Context
		wantAllowed bool
		wantRetry   time.Duration
		wantErr     error
		wantHooks   int
	}{
		{name: "fail closed by default", store: &failStore{err: errBoom},
			wantRetry: time.Second, wantErr: errBoom, wantHooks: 1},
		{name: "fail open", store: &failStore{err: errBoom}, opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)},
			wantAllowed: true, wantErr: errBoom, wantHooks: 1},
		{name: "fail closed", store: &failStore{err: errBoom}, opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)},
			wantRetry: time.Second, wantErr: errBoom, wantHooks: 1},
		{name: "fallback decides", store: &failStore{err: errBoom}, opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(&recStore{})},
			wantAllowed: true, wantErr: nil, wantHooks: 1},
		{name: "fallback fails too", store: &failStore{err: errBoom}, opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(&failStore{err: io.ErrUnexpectedEOF})},
			wantRetry: time.Second, wantErr: io.ErrUnexpectedEOF, wantHooks: 2},
		{name: "timeout", store: &blockStore{}, opts: []ratelimit.Option{ratelimit.WithTimeout(time.Millisecond), ratelimit.WithFailureMode(ratelimit.FailClosed)},
			wantRetry: time.Second, wantErr: context.DeadlineExceeded, wantHooks: 1},
		// A canceled ctx does not decide: the store gets its own timeout
		// (it times out here), then the fallback decides.
		{name: "caller gone", store: &blockStore{}, opts: []ratelimit.Option{ratelimit.WithFallback(&recStore{}), ratelimit.WithTimeout(20 * time.Millisecond)},
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			wantAllowed: true, wantErr: nil, wantHooks: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h hookRecorder
			lim := newLimiter(t, tt.store, ratelimit.MustParsePolicy("5/m"), append(append(h.options(), ratelimit.WithLogger(discardLogger)), tt.opts...)...)
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			var d ratelimit.Decision
			var err error
			returnsWithin(t, func() { d, err = lim.Allow(ctx, "job:a") })
			if (err == nil) != (tt.wantErr == nil) || !errors.Is(err, tt.wantErr) || d.Allowed != tt.wantAllowed || d.RetryAfter != tt.wantRetry {
				t.Errorf("Allow = %+v, %v; want allowed %v, RetryAfter %v, error %v", d, err, tt.wantAllowed, tt.wantRetry, tt.wantErr)
			}
			errs := h.errors()
			if len(errs) != tt.wantHooks {
				t.Fatalf("error hook calls %d, want %d", len(errs), tt.wantHooks)
			}
			for _, r := range h.errReqs {
				if r != nil {
					t.Error("error hook got a request from AllowN")
				}
			}
			if res := h.last(); !errors.Is(res.Err, tt.wantErr) {
				t.Errorf("decision hook Result.Err %v, want %v", res.Err, tt.wantErr)
			}
		})
	}
}

// TestAllowUpTo grants exactly what is left across three limits and two
// keys, charges it, and grants 0 (a denial with the wait for one unit) once
// nothing is left.
func TestAllowUpTo(t *testing.T) {
	mem, clk := memoryStore()
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("5/s, 8/m, 20/h"))
	ctx := context.Background()
	lim.AllowN(ctx, 3, "a")
	lim.AllowN(ctx, 4, "b")
	clk.Advance(1500 * time.Millisecond) // the per-second limit has room again
	// a: 5 left this minute; b: 4. Both: 4.
	granted, d, err := lim.AllowUpTo(ctx, 10, "a", "b")
	if err != nil || granted != 4 || !d.Allowed || d.Granted != 4 {
		t.Fatalf("AllowUpTo(10): granted %d, %+v, %v; want 4", granted, d, err)
	}
	if g, d, _ := lim.AllowUpTo(ctx, 10, "a", "b"); g != 0 || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("AllowUpTo with nothing left: granted %d, %+v; want 0 and a wait", g, d)
	}
	if g, _, _ := lim.AllowUpTo(ctx, 10, "a"); g != 1 {
		t.Fatalf("a alone: granted %d, want its last unit", g)
	}
	if _, _, err := lim.AllowUpTo(ctx, 0, "a"); err == nil {
		t.Fatal("AllowUpTo(0) accepted")
	}
	bare := newLimiter(t, storeFunc(func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		return ratelimit.Decision{}, nil
	}), ratelimit.MustParsePolicy("5/s"))
	if _, _, err := bare.AllowUpTo(ctx, 3, "a"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("AllowUpTo on a store without it: %v", err)
	}
}

// TestSentinelRealOperations: through a Sentinel client (a master, a
// replica, three sentinels on loopback), every operation beyond Allow
// works as on a single Redis: Wait reserves its place in line, AllowUpTo
// grants what is left, a repeated request ID is charged once, Refund gives
// back, Reset forgets, and a refund of a charge made before the Reset gives
// nothing.
func TestSentinelRealOperations(t *testing.T) {
	topo := redistest.StartSentinel(t)
	opt := topo.FailoverOptions()
	opt.ContextTimeoutEnabled = true
	client := redis.NewFailoverClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	st, err := store.NewRedis(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Wait: a token bucket of 1 per 200ms reserves the second caller's
	// place 200ms on; the long period keeps the test's own speed out of it.
	tb := ratelimit.MustParsePolicy("5/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(1), ratelimit.Named("sen-wait"))
	lw, err := ratelimit.New(st, tb, ratelimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lw.Wait(ctx, "job:1"); err != nil || !d.Allowed {
		t.Fatalf("first Wait: %+v, %v", d, err)
	}
	start := time.Now()
	if d, err := lw.Wait(ctx, "job:1"); err != nil || !d.Allowed {
		t.Fatalf("second Wait: %+v, %v", d, err)
	} else if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("second Wait returned after %s: its place was 200ms on", waited)
	}

	lim, err := ratelimit.New(st, ratelimit.MustParsePolicy("10/h, 12/24h", ratelimit.Named("sen-ops")), ratelimit.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	granted, _, err := lim.AllowUpTo(ctx, 7, "user:1", "ip:1")
	if err != nil || granted != 7 {
		t.Fatalf("AllowUpTo(7): %d, %v", granted, err)
	}
	granted, _, err = lim.AllowUpTo(ctx, 7, "user:1", "ip:1")
	if err != nil || granted != 3 {
		t.Fatalf("AllowUpTo(7) with 3 left: %d, %v", granted, err)
	}

	p := ratelimit.MustParsePolicy("2/h", ratelimit.Named("sen-id"))
	for i := 0; i < 3; i++ {
		d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:2"}, Cost: 1, ID: "req-1"})
		if err != nil || !d.Allowed {
			t.Fatalf("repeat %d of one request ID: %+v, %v", i, d, err)
		}
	}
	second, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:2"}, Cost: 1})
	if err != nil || !second.Allowed || second.Remaining != 0 {
		t.Fatalf("after one ID three times, a new request: %+v, %v (want the second admission of 2)", second, err)
	}
	if err := st.Refund(ctx, second.Receipt); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:2"}, Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("after a refund: %+v, %v", d, err)
	}
	before, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:3"}, Cost: 1})
	if err != nil || !before.Allowed {
		t.Fatalf("user:3: %+v, %v", before, err)
	}
	if err := st.Reset(ctx, p, "user:3"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:3"}, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("after the Reset, request %d: %+v, %v", i+1, d, err)
		}
	}
	if err := st.Refund(ctx, before.Receipt); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:3"}, Cost: 1}); err != nil || d.Allowed {
		t.Fatalf("a refund of a charge made before the Reset let a third request in: %+v, %v", d, err)
	}
}
