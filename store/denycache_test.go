package store

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// countingStore counts the calls that reach a store.
type countingStore struct {
	ratelimit.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, req)
}

// TestDenyCacheSameDecisions replays random traces against a memory store
// and against the same store behind a DenyCache, on one controlled clock:
// every request must be admitted or denied alike (the cache only ever
// denies, and only what the store would deny), single-key denials must
// carry the same RetryAfter (so Retry-After stays exact), and the cache must spare the store calls.
func TestDenyCacheSameDecisions(t *testing.T) {
	ctx := context.Background()
	var spared, total int64
	for _, alg := range algorithms {
		rng := rand.New(rand.NewPCG(uint64(alg)+21, 5))
		for n := range traceCount(t) / 2 {
			p := randomPolicy(rng, alg)
			trace := randomTrace(rng, p, 30)
			var clk clock
			plain := NewMemory(WithClock(clk.Now))
			inner := &countingStore{Store: NewMemory(WithClock(clk.Now))}
			cached := NewDenyCache(inner, WithDenyCacheClock(clk.Now))
			for i, s := range trace {
				clk.Set(t0.Add(s.at))
				req := ratelimit.Request{Policy: p, Keys: s.keys, Cost: s.cost + 1}
				want, err1 := plain.Take(ctx, req)
				got, err2 := cached.Take(ctx, req)
				if err1 != nil || err2 != nil {
					t.Fatal(err1, err2)
				}
				if got.Allowed != want.Allowed || len(s.keys) == 1 && got.RetryAfter != want.RetryAfter {
					t.Fatalf("%s trace %d step %d (%s, keys %q, cost %d): cached %+v\nplain  %+v\nat %s", alg, n, i, p, s.keys, req.Cost, got, want, s.at)
				}
				total++
			}
			spared += int64(len(trace)) - inner.calls.Load()
		}
	}
	if spared == 0 {
		t.Fatal("the cache never answered")
	}
	t.Logf("the cache answered %d of %d requests without the store", spared, total)
}

// TestDenyCacheFlood: a denied identity's flood never reaches the store
// while the wait lasts; a smaller cost, another policy or a peek still do;
// when the wait is over the store is asked again.
func TestDenyCacheFlood(t *testing.T) {
	ctx := context.Background()
	var clk clock
	clk.Set(t0)
	inner := &countingStore{Store: NewMemory(WithClock(clk.Now))}
	c := NewDenyCache(inner, WithDenyCacheClock(clk.Now))
	p := ratelimit.MustParsePolicy("3/m, 100/h")
	take := func(cost int64, pol *ratelimit.Policy, keys ...string) ratelimit.Decision {
		t.Helper()
		d, err := c.Take(ctx, ratelimit.Request{Policy: pol, Keys: keys, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	take(3, p, "ip:a")
	first := take(2, p, "ip:a")
	if first.Allowed || inner.calls.Load() != 2 {
		t.Fatalf("want a denial from the store, got %+v after %d calls", first, inner.calls.Load())
	}
	clk.Set(t0.Add(time.Second))
	for i := 0; i < 1000; i++ {
		d := take(2, p, "user:b", "ip:a")
		if d.Allowed || d.Key != 1 || d.RetryAfter != first.RetryAfter-time.Second || d.Limits[0].Key != 1 {
			t.Fatalf("flood %d: %+v", i, d)
		}
	}
	if inner.calls.Load() != 2 {
		t.Fatalf("the flood reached the store: %d calls", inner.calls.Load())
	}
	take(1, p, "ip:a") // smaller cost: asks the store
	take(3, p, "ip:a") // larger cost: its wait may be longer, asks the store
	take(0, p, "ip:a") // peek: asks the store
	other := ratelimit.MustParsePolicy("3/m", ratelimit.Named("other"))
	take(2, other, "ip:a") // another policy: asks the store
	if inner.calls.Load() != 6 {
		t.Fatalf("%d store calls, want 6", inner.calls.Load())
	}
	clk.Set(t0.Add(first.RetryAfter))
	if d := take(2, p, "ip:a"); !d.Allowed || inner.calls.Load() != 7 {
		t.Fatalf("after the wait: %+v, %d calls", d, inner.calls.Load())
	}
	small := NewDenyCache(inner, WithDenyCacheClock(clk.Now), WithDenyCacheSize(64))
	for i := 0; i < 5000; i++ {
		k := "ip:" + string(rune('a'+i%26)) + time.Duration(i).String()
		small.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{k}, Cost: 3})
		small.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{k}, Cost: 3})
	}
	if n := small.Len(); n > 64 {
		t.Fatalf("WithDenyCacheSize(64): %d entries", n)
	}
}
