package denycache

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/storekit"
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

// countedCache is a cache holding denials up to an hour over a memory
// store that counts its calls, both on one clock set to t0.
func countedCache() (*Cache, *countingStore, *clock) {
	clk := &clock{}
	clk.Set(t0)
	inner := &countingStore{Store: memory.New(memory.WithClock(clk.Now))}
	return New(inner, WithClock(clk.Now), WithMaxHold(time.Hour)), inner, clk
}

// TestDenyCacheFlood: a denied identity's flood never reaches the store
// while the wait lasts; a smaller cost, another policy or a peek still do;
// when the wait is over the store is asked again.
func TestDenyCacheFlood(t *testing.T) {
	ctx := context.Background()
	c, inner, clk := countedCache()
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
	small := New(inner, WithClock(clk.Now), WithSize(64))
	for i := 0; i < 5000; i++ {
		k := "ip:" + string(rune('a'+i%26)) + time.Duration(i).String()
		small.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{k}, Cost: 3})
		small.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{k}, Cost: 3})
	}
	if n := small.Len(); n > 64 {
		t.Fatalf("WithSize(64): %d entries", n)
	}
}

// TestDenyCacheClockStepsBack: the cache measures waits by differences of
// its clock's readings, and drops an entry when the clock reads earlier
// than the entry's arrival, so a wall clock stepped back 10 minutes cannot
// keep a denial alive while the store (on its own clock) admits.
func TestDenyCacheClockStepsBack(t *testing.T) {
	ctx := context.Background()
	var storeClk, appClk clock
	storeClk.Set(t0)
	appClk.Set(t0)
	inner := &countingStore{Store: memory.New(memory.WithClock(storeClk.Now))}
	c := New(inner, WithClock(appClk.Now), WithMaxHold(time.Hour))
	p := ratelimit.MustParsePolicy("1/s", ratelimit.Named("step"))
	req := ratelimit.Request{Policy: p, Keys: []string{"ip:a"}, Cost: 1}
	if d, _ := c.Take(ctx, req); !d.Allowed {
		t.Fatal("first request denied")
	}
	if d, _ := c.Take(ctx, req); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("second request: %+v, want a 1s denial", d)
	}
	// Two seconds pass; the app server's clock steps back 10 minutes.
	storeClk.Set(t0.Add(2 * time.Second))
	appClk.Set(t0.Add(2*time.Second - 10*time.Minute))
	if d, err := c.Take(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("after the wait, with the app clock stepped back: %+v %v; the store admits", d, err)
	}
	if inner.calls.Load() != 3 {
		t.Fatalf("%d store calls, want 3: the stale entry must go to the store", inner.calls.Load())
	}
}

// TestDenyCacheHashesLongKeys: a cached denial keeps a key longer than
// 128 bytes as its 128-bit hash, as the stores do, so an attacker's 64 KiB
// identifiers cost the cache a few dozen bytes each.
func TestDenyCacheHashesLongKeys(t *testing.T) {
	ctx := context.Background()
	c := New(memory.New())
	p := ratelimit.MustParsePolicy("1/h", ratelimit.Named("long"))
	long := "ip:" + strings.Repeat("x", 64<<10)
	for i := 0; i < 2; i++ {
		c.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{long}, Cost: 1})
	}
	if c.Len() != 1 {
		t.Fatalf("%d cached denials, want 1", c.Len())
	}
	for i := range c.shards {
		for k := range c.shards[i].M {
			if len(k.Key) > 128 || !k.Hashed {
				t.Fatalf("cached key of %d bytes (hashed %v), want a hash", len(k.Key), k.Hashed)
			}
		}
	}
	if d, _ := c.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{long}, Cost: 1}); d.Allowed {
		t.Fatal("the hashed entry does not deny")
	}
}

// faultyStore answers with a Decision that has more limit states than the
// policy has limits.
type faultyStore struct{}

func (faultyStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return ratelimit.Decision{RetryAfter: time.Second, Limits: make([]ratelimit.LimitStatus, len(req.Policy.Limits())+3)}, nil
}

// TestDenyCacheFaultyStore: an inner Decision that points outside its
// Request is an error, never a panic.
func TestDenyCacheFaultyStore(t *testing.T) {
	c := New(faultyStore{})
	p := ratelimit.MustParsePolicy("1/s, 2/m")
	for i := 0; i < 3; i++ {
		_, err := c.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1})
		if err == nil || !strings.Contains(err.Error(), "invalid decision") {
			t.Fatalf("call %d: error %v, want an invalid decision error", i, err)
		}
	}
}

// TestDenyCacheMaxHold: a cached denial is held for at most the maximum
// hold, so a Reset made through another process's cache (the same store)
// reaches every cache within it.
func TestDenyCacheMaxHold(t *testing.T) {
	ctx := context.Background()
	var clk clock
	clk.Set(t0)
	shared := memory.New(memory.WithClock(clk.Now))
	a := New(shared, WithClock(clk.Now), WithMaxHold(500*time.Millisecond))
	b := New(shared, WithClock(clk.Now), WithMaxHold(500*time.Millisecond))
	p := ratelimit.MustParsePolicy("1/h", ratelimit.Named("hold"))
	req := ratelimit.Request{Policy: p, Keys: []string{"user:x"}, Cost: 1}
	a.Take(ctx, req)
	if d, _ := a.Take(ctx, req); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("want an hour's denial, got %+v", d)
	}
	if err := b.Reset(ctx, p, "user:x"); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(499 * time.Millisecond))
	if d, _ := a.Take(ctx, req); d.Allowed || d.RetryAfter != time.Hour-499*time.Millisecond {
		t.Fatalf("within the hold: %+v, want the cached denial", d)
	}
	clk.Set(t0.Add(500 * time.Millisecond))
	if d, _ := a.Take(ctx, req); !d.Allowed {
		t.Fatalf("after the hold: %+v, want the store's admission (reset elsewhere)", d)
	}
}

// plainStore has Take only.
type plainStore struct{ ratelimit.Store }

// TestDenyCacheForwards: the cache forwards the optional operations, and
// says ErrUnsupported when the wrapped store lacks one.
func TestDenyCacheForwards(t *testing.T) {
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("2/h", ratelimit.Named("fwd"))
	c := New(memory.New(), WithMaxHold(time.Hour))
	req := ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 2}
	d, _ := c.Take(ctx, req)
	if denied, _ := c.Take(ctx, req); denied.Allowed || c.Len() != 1 {
		t.Fatalf("want a cached denial, got %+v (%d cached)", denied, c.Len())
	}
	if err := c.Refund(ctx, d.Receipt); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 0 {
		t.Fatal("a refund left the key's cached denial")
	}
	if got, _ := c.TakeUpTo(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 5}); got.Granted != 2 {
		t.Fatalf("TakeUpTo after the refund granted %d, want 2", got.Granted)
	}
	if err := c.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Reserve(ctx, req, time.Second); !got.Allowed {
		t.Fatalf("Reserve after the reset: %+v", got)
	}
	bare := New(plainStore{memory.New()})
	for name, err := range map[string]error{
		"Reset":  bare.Reset(ctx, p, "k"),
		"Refund": bare.Refund(ctx, d.Receipt),
	} {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("%s on a store without it: %v, want ErrUnsupported", name, err)
		}
	}
	if _, err := bare.Reserve(ctx, req, time.Second); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Reserve on a store without it: %v", err)
	}
	if _, err := bare.TakeUpTo(ctx, req); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("TakeUpTo on a store without it: %v", err)
	}
}

// t0 is the first instant of the tests' clocks.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// clock is a controlled clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// countingGranter counts the Takes and TakeUpTos that reach a store.
type countingGranter struct{ countingStore }

func (s *countingGranter) TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	return s.Store.(storekit.Granter).TakeUpTo(ctx, req)
}

// TestDenyCachePenaltyStarts: under a policy with a penalty (BlockFor), a
// denial repeated after the last penalty ran out starts a new one in the
// store, so it is never answered from the cache; else a partial grant (or a
// reservation), which the cache forwards, would take what the penalty
// denies.
func TestDenyCachePenaltyStarts(t *testing.T) {
	ctx := context.Background()
	var clk clock
	clk.Set(t0)
	inner := &countingGranter{countingStore{Store: memory.New(memory.WithClock(clk.Now))}}
	c := New(inner, WithClock(clk.Now))
	p := ratelimit.MustParsePolicy("10/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.BlockFor(100*time.Millisecond))
	req := func(cost int64) ratelimit.Request {
		return ratelimit.Request{Policy: p, Keys: []string{"ip:a"}, Cost: cost}
	}
	steps := []struct {
		at      time.Duration
		upTo    bool
		cost    int64
		allowed bool
		granted int64
		calls   int64 // calls that reached the store so far
	}{
		{0, false, 10, true, 10, 1},                     // the bucket emptied
		{time.Millisecond, false, 5, false, 0, 2},       // denied (wait 500ms): a penalty until 101ms
		{200 * time.Millisecond, false, 5, false, 0, 3}, // the penalty ran out: the store starts one until 300ms
		{210 * time.Millisecond, true, 5, false, 0, 4},  // 2 tokens back, but the new penalty denies
		{310 * time.Millisecond, true, 5, true, 3, 5},   // after it, the grant
	}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		var d ratelimit.Decision
		var err error
		if s.upTo {
			d, err = c.TakeUpTo(ctx, req(s.cost))
		} else {
			d, err = c.Take(ctx, req(s.cost))
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if d.Allowed != s.allowed || d.Granted != s.granted || inner.calls.Load() != s.calls {
			t.Fatalf("step %d at %s: allowed %v granted %d after %d store calls; want %v, %d, %d calls: %+v",
				i, s.at, d.Allowed, d.Granted, inner.calls.Load(), s.allowed, s.granted, s.calls, d)
		}
	}
}

// TestDenyCacheRateChange: policies of one name that differ only in a
// rate share their counters (ratelimit.Policy.ID), but a denial under one
// rate is no answer under another: after 100/m is spent and denied (and
// the denial cached), 200/m of the same name is asked of the store and
// admits the 100 it has left; then its own denial is cached. The cache
// keeps one denial a key: rates taking turns on a key each ask the store.
func TestDenyCacheRateChange(t *testing.T) {
	ctx := context.Background()
	c, inner, _ := countedCache()
	low, high := ratelimit.MustParsePolicy("100/m", ratelimit.Named("plan")), ratelimit.MustParsePolicy("200/m", ratelimit.Named("plan"))
	if low.ID() != high.ID() {
		t.Fatalf("100/m and 200/m of one name have the IDs %q and %q, want one", low.ID(), high.ID())
	}
	take := func(p *ratelimit.Policy) ratelimit.Decision {
		t.Helper()
		d, err := c.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"tenant"}, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for i := 0; i < 100; i++ {
		if !take(low).Allowed {
			t.Fatalf("step %d: 100/m denied before its 100th", i)
		}
	}
	for i := 0; i < 3; i++ {
		if take(low).Allowed {
			t.Fatalf("step %d: 100/m admitted its 101st", i)
		}
	}
	calls := inner.calls.Load()
	for i := 0; i < 100; i++ {
		if d := take(high); !d.Allowed {
			t.Fatalf("step %d: 200/m denied (%+v) with %d of its 200 used: the cache answered with 100/m's denial", i, d, 100+i)
		}
	}
	if got := inner.calls.Load() - calls; got != 100 {
		t.Fatalf("200/m's 100 admissions made %d store calls, want 100", got)
	}
	if take(high).Allowed {
		t.Fatal("200/m admitted its 201st")
	}
	calls = inner.calls.Load()
	for i := 0; i < 5; i++ {
		if take(high).Allowed {
			t.Fatalf("step %d: 200/m admitted past its limit", i)
		}
	}
	if got := inner.calls.Load() - calls; got != 0 {
		t.Fatalf("repeated denials under 200/m made %d store calls, want 0 (its denial cached)", got)
	}
	// Two rates taking turns on one identity (a rolling deploy): one
	// cached denial a key, so each asks the store, and both are denied.
	for i := 0; i < 5; i++ {
		if take(low).Allowed || take(high).Allowed {
			t.Fatalf("step %d: admitted past both limits", i)
		}
	}
}
