package redis

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestFallbackMadeOnce: the store names one memory store, the same on
// every call, on the store's clock when it has one.
func TestFallbackMadeOnce(t *testing.T) {
	_, _, s := miniStore(t)
	f := s.Fallback()
	if _, ok := f.(*memory.Store); !ok {
		t.Fatalf("Fallback() is a %T, want a *memory.Store", f)
	}
	if s.Fallback() != f {
		t.Error("a second Fallback() returns another store: the counts would not carry over")
	}

	clk := &clock{t: t0}
	_, _, s = miniStore(t, WithClock(clk.Now))
	p := ratelimit.MustParsePolicy("1/h")
	fb := s.Fallback()
	mustTake(t, fb, p, 1, "k")
	clk.Set(t0.Add(time.Hour - time.Second))
	if d := mustTake(t, fb, p, 1, "k"); d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("fallback of a store on a controlled clock: %+v, want denied for 1s more (the store's clock)", d)
	}
}
