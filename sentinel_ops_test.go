package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

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
