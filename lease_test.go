package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestLeaseSpentLateStillCounts pins why a grant is counted past its
// window: a unit granted at 1ms and spent at 19ms must keep another
// process from a full window until 119ms, so the store counts grants of
// "4/100ms" leased for 20ms over 120ms.
func TestLeaseSpentLateStillCounts(t *testing.T) {
	p := ratelimit.MustParsePolicy("4/100ms", ratelimit.WithLease(4, 20*time.Millisecond))
	clk := newTestClock()
	s := store.NewMemory(store.WithClock(clk.Now))
	a, b := newLimiter(t, s, p), newLimiter(t, s, p)
	ratelimit.SetLogClock(a, clk.Now)
	ratelimit.SetLogClock(b, clk.Now)
	ctx := context.Background()
	steps := []struct {
		at      time.Duration
		lim     *ratelimit.Limiter
		cost    int64
		allowed bool
	}{
		{0, a, 2, true},                       // a grant of 2, spent
		{time.Millisecond, a, 1, true},        // a grant of what is left (2), one spent
		{19 * time.Millisecond, a, 1, true},   // the other, late
		{101 * time.Millisecond, b, 1, false}, // [19ms, 119ms) holds 4 already
		{119 * time.Millisecond, b, 1, false},
		{120 * time.Millisecond, b, 2, true}, // the grant of 0ms leaves
		{121 * time.Millisecond, b, 2, true},
	}
	for i, st := range steps {
		clk.Advance(st.at - clk.Now().Sub(clockStart))
		d, err := st.lim.AllowN(ctx, st.cost, "k")
		if err != nil || d.Allowed != st.allowed {
			t.Fatalf("step %d (at %v, cost %d): allowed %v (%v), want %v", i, st.at, st.cost, d.Allowed, err, st.allowed)
		}
	}
}
