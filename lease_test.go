package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestLeasePolicy pins WithLease's validation and what a leased policy
// keeps: its terms, through With too, and counters apart from the plain
// policy's (its ID differs, its text does not), the same whatever its
// terms.
func TestLeasePolicy(t *testing.T) {
	tb := ratelimit.WithAlgorithm(ratelimit.TokenBucket)
	cases := []struct {
		policy string
		opts   []ratelimit.PolicyOption
		err    string
	}{
		{"100/s", []ratelimit.PolicyOption{ratelimit.WithLease(10, 50*time.Millisecond)}, ""},
		{"10/s", []ratelimit.PolicyOption{ratelimit.WithLease(0, 10*time.Millisecond)}, "chunk must be at least 1"},
		{"10/s", []ratelimit.PolicyOption{ratelimit.WithLease(1, 0)}, "whole number of milliseconds"},
		{"10/s", []ratelimit.PolicyOption{ratelimit.WithLease(1, 1500*time.Microsecond)}, "whole number of milliseconds"},
		{"10/100ms", []ratelimit.PolicyOption{ratelimit.WithLease(1, 200*time.Millisecond)}, "longer than limit 1's period 100ms"},
		{"10/s, 5 concurrent", []ratelimit.PolicyOption{ratelimit.WithLease(1, 10*time.Millisecond)}, "requests in flight, which cannot be leased"},
		{"10/s", []ratelimit.PolicyOption{tb, ratelimit.WithLease(2, 900*time.Millisecond)}, "burst 10 less the hold's 9 tokens leaves 1, less than the chunk"},
		{"10/s", []ratelimit.PolicyOption{tb, ratelimit.WithLease(2, 50*time.Millisecond)}, ""},
		{"10/s", []ratelimit.PolicyOption{ratelimit.WithLease(11, 10*time.Millisecond)}, "chunk is above the policy's capacity 10"},
		{"10/s, 100/h", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.FixedWindow), ratelimit.WithLease(5, time.Second)}, ""},
	}
	for i, c := range cases {
		p, err := ratelimit.ParsePolicy(c.policy, c.opts...)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("step %d (%q): error %v, want one containing %q", i, c.policy, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d (%q): %v", i, c.policy, err)
		}
		plain := ratelimit.MustParsePolicy(c.policy, c.opts[:len(c.opts)-1]...)
		if chunk, hold := p.Lease(); chunk == 0 || hold == 0 {
			t.Errorf("step %d: Lease() = %d, %v: want the terms", i, chunk, hold)
		}
		if p.ID() == plain.ID() || p.String() != plain.String() {
			t.Errorf("step %d: leased %s %q, plain %s %q: want counters apart, the same text", i, p.ID(), p, plain.ID(), plain)
		}
		named, err := p.With(ratelimit.Named("other"))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := named.Lease(); a == 0 || b == 0 {
			t.Errorf("step %d: With(Named) dropped the lease", i)
		}
		off, err := p.With(ratelimit.WithLease(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := off.Lease(); a != 0 || b != 0 || off.ID() != plain.ID() {
			t.Errorf("step %d: With(WithLease(0, 0)) kept the lease: %d, %v, ID %s (plain %s)", i, a, b, off.ID(), plain.ID())
		}
	}
	p := ratelimit.MustParsePolicy("10/s", ratelimit.WithLease(5, 10*time.Millisecond))
	if _, err := ratelimit.New(storeFunc(allowAllFunc), p); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "leased") {
		t.Errorf("New with a store that cannot lease: %v", err)
	}
}

// leaseRig is a leased policy, a memory store on a controlled clock and
// a Limiter counting the store calls that decide.
type leaseRig struct {
	clk   *testClock
	store ratelimit.Store
	calls *decisionCalls
}

func newLeaseRig() *leaseRig {
	clk := newTestClock()
	return &leaseRig{clk: clk, store: store.NewMemory(store.WithClock(clk.Now)), calls: &decisionCalls{}}
}

func leaseRigOn(s ratelimit.Store, clk *testClock) *leaseRig {
	return &leaseRig{clk: clk, store: s, calls: &decisionCalls{}}
}

// process is a Limiter of p on the rig's store and clock: one process of a fleet.
func (r *leaseRig) process(t *testing.T, p *ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	l := newLimiter(t, r.store, p, append(opts, ratelimit.WithObserver(r.calls), patient)...)
	ratelimit.SetLogClock(l, r.clk.Now)
	return l
}

// remaining peeks at what the store has left for key.
func remaining(t *testing.T, l *ratelimit.Limiter, key string) int64 {
	t.Helper()
	d, err := l.AllowN(context.Background(), 0, key)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestLeaseServesFromGrants: requests are admitted from grants whose size
// doubles with the traffic up to chunk, in a few store calls; what a
// grant did not spend goes back when its hold is over. On memory,
// miniredis, a real Redis and a Cluster.
func TestLeaseServesFromGrants(t *testing.T) {
	for name, backend := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			r := leaseRigOn(backend(t))
			p := ratelimit.MustParsePolicy("1000/s", ratelimit.WithLease(64, 50*time.Millisecond))
			a, b := r.process(t, p), r.process(t, p)
			ctx := context.Background()
			for i := range 200 {
				if d, err := a.Allow(ctx, "k"); err != nil || !d.Allowed {
					t.Fatalf("step %d: denied (%v)", i, err)
				}
			}
			// Grants of 1, 2, 4, 8, 16, 32, 64, 64, 64: 255 units in 9 calls.
			if n := r.calls.count(); n != 9 {
				t.Errorf("200 requests in %d store calls, want 9", n)
			}
			if got := remaining(t, b, "k"); got != 1000-255 {
				t.Errorf("the store has %d left, want %d (the grants counted whole)", got, 1000-255)
			}
			r.clk.Advance(50 * time.Millisecond)
			if d, err := a.Allow(ctx, "k"); err != nil || !d.Allowed {
				t.Fatalf("after the hold: denied (%v)", err)
			}
			// The last grant spent 9 of 64: 55 went back, and the next
			// grant is of 18 (twice what the last spent).
			if got := remaining(t, b, "k"); got != 1000-200-18 {
				t.Errorf("after the hold the store has %d left, want %d", got, 1000-200-18)
			}
		})
	}
}

// TestLeaseFleetAtOneInstant: processes racing for one key at one instant
// are admitted no more than the limit, and no less than the limit less
// the grants they hold unspent; most requests make no store call.
func TestLeaseFleetAtOneInstant(t *testing.T) {
	for name, backend := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			r := leaseRigOn(backend(t))
			const chunk = 4
			p := ratelimit.MustParsePolicy("40/s", ratelimit.WithLease(chunk, 30*time.Millisecond))
			procs := []*ratelimit.Limiter{r.process(t, p), r.process(t, p), r.process(t, p)}
			var requests sync.WaitGroup
			var mu sync.Mutex
			n := 0
			for g := range 12 {
				requests.Add(1)
				go func() {
					defer requests.Done()
					for range 10 {
						d, err := procs[g%len(procs)].Allow(context.Background(), "k")
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							mu.Lock()
							n++
							mu.Unlock()
						}
					}
				}()
			}
			requests.Wait()
			if n > 40 || n < 40-len(procs)*chunk {
				t.Errorf("%d admitted, want %d to 40", n, 40-len(procs)*chunk)
			}
			if c := r.calls.count(); c >= 120/2 {
				t.Errorf("120 requests made %d store calls", c)
			}
			t.Logf("%d admitted in %d store calls", n, r.calls.count())
		})
	}
}

// TestLeaseDeniesLocally: once the store denies a key, the process denies
// it without a store call until the store's Retry-After, with that wait
// counted down.
func TestLeaseDeniesLocally(t *testing.T) {
	r := newLeaseRig()
	p := ratelimit.MustParsePolicy("5/s", ratelimit.WithLease(5, 20*time.Millisecond))
	a := r.process(t, p)
	ctx := context.Background()
	if d, err := a.AllowN(ctx, 5, "k"); err != nil || !d.Allowed {
		t.Fatalf("the first 5: denied (%v)", err)
	}
	first, err := a.Allow(ctx, "k")
	if err != nil || first.Allowed || first.RetryAfter <= 0 {
		t.Fatalf("the sixth: %+v (%v), want a denial with a wait", first, err)
	}
	calls := r.calls.count()
	r.clk.Advance(first.RetryAfter / 2)
	for i := range 10 {
		d, err := a.Allow(ctx, "k")
		if err != nil || d.Allowed || d.RetryAfter != first.RetryAfter-first.RetryAfter/2 {
			t.Fatalf("step %d: %+v (%v), want a denial with %v to wait", i, d, err, first.RetryAfter-first.RetryAfter/2)
		}
	}
	if n := r.calls.count(); n != calls {
		t.Errorf("the local denials made %d store calls", n-calls)
	}
	r.clk.Advance(first.RetryAfter - first.RetryAfter/2)
	if d, err := a.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("at Retry-After: %+v (%v), want admitted", d, err)
	}
	// 5/s leased for 20ms is counted over 1.02s: the wait says so.
	if first.RetryAfter != 1020*time.Millisecond {
		t.Errorf("Retry-After %v, want 1.02s", first.RetryAfter)
	}
}

// TestLeaseRefundSettleReset: a refund or a settle below the charge goes
// back into the running grant; a debt beyond what the grant holds is
// charged to the store at once; Reset drops the process's grants with the
// store's counters.
func TestLeaseRefundSettleReset(t *testing.T) {
	r := newLeaseRig()
	p := ratelimit.MustParsePolicy("20/s", ratelimit.WithLease(5, 50*time.Millisecond))
	a, b := r.process(t, p), r.process(t, p)
	ctx := context.Background()
	d, err := a.AllowN(ctx, 4, "k") // a grant of 4
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	if err := a.Refund(ctx, d); err != nil {
		t.Fatal(err)
	}
	calls := r.calls.count()
	d2, err := a.AllowN(ctx, 4, "k")
	if err != nil || !d2.Allowed || r.calls.count() != calls {
		t.Fatalf("after the refund: %+v (%v) in %d calls, want admitted from the grant", d2, err, r.calls.count()-calls)
	}
	if err := a.Settle(ctx, d2, 1); err != nil { // 3 back into the grant
		t.Fatal(err)
	}
	d3, err := a.AllowN(ctx, 3, "k")
	if err != nil || !d3.Allowed || r.calls.count() != calls {
		t.Fatalf("after the settle: %+v (%v), want admitted from the grant", d3, err)
	}
	if err := a.Settle(ctx, d3, 5); err != nil { // a debt of 2
		t.Fatal(err)
	}
	if err := a.Settle(ctx, d3, 5); !errors.Is(err, ratelimit.ErrSettled) {
		t.Errorf("a second settle: %v, want ErrSettled", err)
	}
	// The grant had 4 and has spent 6: the 2 beyond it are charged now.
	if got := remaining(t, b, "k"); got != 14 {
		t.Errorf("before the grant closes the store has %d left, want 14 (the debt beyond the grant charged at once)", got)
	}
	r.clk.Advance(50 * time.Millisecond)
	if _, err := a.AllowN(ctx, 1, "k"); err != nil { // closes the grant: 1 + 5 spent of 4
		t.Fatal(err)
	}
	// The grant settled at 6 (a debt of 2 over its 4), and the next is of
	// 5 (twice 6, at most chunk).
	if got := remaining(t, b, "k"); got != 20-6-5 {
		t.Errorf("after the grant closed the store has %d left, want %d", got, 20-6-5)
	}
	if err := a.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, b, "k"); got != 20 {
		t.Errorf("after Reset the store has %d left, want 20", got)
	}
	if d, err := a.AllowN(ctx, 20, "k"); err != nil || !d.Allowed {
		t.Errorf("after Reset: %+v (%v), want the whole limit", d, err)
	}
}

// TestLeaseHeadersAndFallback: a Handler of a leased policy writes the
// policy's own RateLimit-Policy, a RateLimit that counts the grant the
// process holds, a 429 with Retry-After; and a store that fails leaves
// the grants to the fallback store.
func TestLeaseHeadersAndFallback(t *testing.T) {
	r := newLeaseRig()
	p := ratelimit.MustParsePolicy("3/s", ratelimit.Named("hot"), ratelimit.WithLease(3, 10*time.Millisecond))
	h := r.process(t, p).Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	want := []struct {
		code          int
		limit, policy string
	}{
		{200, `"hot-1s";r=2;t=1`, `"hot-1s";q=3;w=1`},
		{200, `"hot-1s";r=1;t=1`, `"hot-1s";q=3;w=1`},
		{200, `"hot-1s";r=0;t=1`, `"hot-1s";q=3;w=1`},
		{429, `"hot-1s";r=0;t=1`, `"hot-1s";q=3;w=1`},
	}
	for i, w := range want {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, getFrom("192.0.2.1:1"))
		if got := withoutPK([]string{rec.Header().Get("RateLimit"), rec.Header().Get("RateLimit-Policy")}); rec.Code != w.code || got[0] != w.limit || got[1] != w.policy {
			t.Errorf("step %d: %d %q %q, want %d %q %q", i, rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("RateLimit-Policy"), w.code, w.limit, w.policy)
		}
		if ra := rec.Header().Get("Retry-After"); (w.code == 429) != (ra == "2") { // 1.01s, rounded up
			t.Errorf("step %d: Retry-After %q", i, ra)
		}
	}
	var mu sync.Mutex
	fails := 0
	failing := storeFunc(func(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
		mu.Lock()
		fails++
		mu.Unlock()
		return ratelimit.Decision{}, errors.New("down")
	})
	l := newLimiter(t, granting{failing}, p, ratelimit.WithFallback(store.NewMemory()))
	for i := range 3 {
		if d, err := l.Allow(context.Background(), "k"); err != nil || !d.Allowed {
			t.Fatalf("step %d: the fallback's grant: %+v (%v)", i, d, err)
		}
	}
	if d, _ := l.Allow(context.Background(), "k"); d.Allowed {
		t.Error("the fallback's grants admitted more than its limit")
	}
}

// granting is a Store that is a Granter and a Leaser, failing as its
// Take does.
type granting struct{ storeFunc }

func (g granting) TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return g.Take(ctx, req)
}

func (g granting) Lease(ctx context.Context, req ratelimit.Request, _ time.Duration) (ratelimit.Decision, error) {
	return g.Take(ctx, req)
}

func allowAllFunc(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return allowAll(req), nil
}

// TestLeaseForgetsIdleKeys: a process keeps no state for a key whose
// grant closed or whose denial ran out: a leased policy per client does
// not grow the process. Grants close on timers of the real clock, so this
// test runs on it: with a hold of 5ms and denials of at most 55ms, it
// waits (at most 5s) for them.
func TestLeaseForgetsIdleKeys(t *testing.T) {
	p := ratelimit.MustParsePolicy("3/50ms", ratelimit.WithLease(3, 5*time.Millisecond))
	l := newLimiter(t, store.NewMemory(), p)
	ctx := context.Background()
	denied := 0
	for i := range 300 {
		key := fmt.Sprintf("client-%d", i)
		n := 1
		if i%2 == 0 {
			n = 4 // past the limit: a denial to repeat
		}
		for range n {
			d, err := l.Allow(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				denied++
			}
		}
	}
	if n := ratelimit.LeaseSlots(l); n == 0 || denied == 0 {
		t.Fatalf("%d keys kept, %d denied: the test did not reach its case", n, denied)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ratelimit.LeaseSlots(l) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ratelimit.LeaseSlots(l); n != 0 {
		t.Errorf("%d keys kept after every grant and denial ended", n)
	}
}
