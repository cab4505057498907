package ratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestLeaseDebtAfterHold: a debt settled after the grant's hold ended, its
// slot forgotten, is charged to the store at once: under 10/h, one
// request admitted from a grant and settled to 10 after the hold leaves
// no room in that hour, for its process nor another. On memory,
// miniredis, a real Redis and a Cluster.
func TestLeaseDebtAfterHold(t *testing.T) {
	for name, backend := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			r := leaseRigOn(backend(t))
			p := ratelimit.MustParsePolicy("10/h", ratelimit.WithLease(5, 5*time.Millisecond))
			a, b := r.process(t, p), r.process(t, p)
			ctx := context.Background()
			d, err := a.Allow(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("step 0: %+v (%v)", d, err)
			}
			// The hold ends: the grant's timer (real time) closes it and
			// the process forgets the key.
			r.clk.Advance(5 * time.Millisecond)
			deadline := time.Now().Add(5 * time.Second)
			for ratelimit.LeaseSlots(a) > 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := ratelimit.LeaseSlots(a); n != 0 {
				t.Fatalf("step 1: %d keys kept after the hold", n)
			}
			if err := a.Settle(ctx, d, 10); err != nil {
				t.Fatalf("step 2: Settle: %v", err)
			}
			admitted := 0
			for i := range 9 {
				for _, l := range []*ratelimit.Limiter{a, b} {
					d, err := l.Allow(ctx, "k")
					if err != nil {
						t.Fatalf("step %d: %v", 3+i, err)
					}
					if d.Allowed {
						admitted++
					}
				}
			}
			if admitted != 0 {
				t.Errorf("%d admitted in the hour after a request settled to 10 of 10/h, want 0", admitted)
			}
		})
	}
}

// TestLeaseSlotsOfKeysDeniedByAnother: a leased policy over a shared key
// and a key per client keeps no state for a client key whose request a
// spent shared key denied: rotating client keys do not grow the process.
func TestLeaseSlotsOfKeysDeniedByAnother(t *testing.T) {
	r := newLeaseRig()
	p := ratelimit.MustParsePolicy("5/h", ratelimit.WithLease(5, 50*time.Millisecond))
	l := r.process(t, p)
	ctx := context.Background()
	if d, err := l.AllowN(ctx, 5, "global"); err != nil || !d.Allowed {
		t.Fatalf("spending global: %+v (%v)", d, err)
	}
	for i := range 500 {
		d, err := l.Allow(ctx, "global", fmt.Sprintf("client-%d", i))
		if err != nil || d.Allowed {
			t.Fatalf("step %d: %+v (%v), want a denial by global", i, d, err)
		}
	}
	// global's running grant, and nothing of the 500 clients.
	if n := ratelimit.LeaseSlots(l); n > 1 {
		t.Errorf("%d keys kept after 500 client keys denied by global, want at most 1", n)
	}
	// The same once global's grant closed and global is denied by the
	// store (its denial repeated locally).
	r.clk.Advance(50 * time.Millisecond)
	for i := range 500 {
		if d, err := l.Allow(ctx, fmt.Sprintf("client-%d", i), "global"); err != nil || d.Allowed {
			t.Fatalf("step %d after the hold: %+v (%v), want a denial by global", i, d, err)
		}
	}
	if n := ratelimit.LeaseSlots(l); n > 1 {
		t.Errorf("%d keys kept after 500 more client keys denied by global, want at most 1", n)
	}
}

// TestLeaseHoldChangeKeepsCounters: a lease's chunk and hold are how a
// process spends the quota, not the quota: Limiters of one policy leased
// with holds of 1s and 2s and chunks of 5 and 2 (a rolling deploy that
// tunes them) share its counters, and together admit no more than the
// limit. On memory, miniredis, a real Redis and a Cluster.
func TestLeaseHoldChangeKeepsCounters(t *testing.T) {
	for name, backend := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			r := leaseRigOn(backend(t))
			base := ratelimit.MustParsePolicy("10/h", ratelimit.Named("tuned"))
			var procs []*ratelimit.Limiter
			for i, terms := range []ratelimit.PolicyOption{ratelimit.WithLease(5, time.Second), ratelimit.WithLease(2, 2*time.Second), ratelimit.WithLease(5, 2*time.Second)} {
				p, err := base.With(terms)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				procs = append(procs, r.process(t, p))
			}
			ctx := context.Background()
			admitted := 0
			for i := range 60 { // 6 s, 100ms apart
				d, err := procs[i%len(procs)].Allow(ctx, "k")
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed {
					admitted++
				}
				r.clk.Advance(100 * time.Millisecond)
			}
			if admitted > 10 {
				t.Errorf("%d admitted within 6s by Limiters of 10/h leased with other terms, want at most 10", admitted)
			}
			if admitted < 10-2*5 {
				t.Errorf("%d admitted, want at least the limit less two grants (%d)", admitted, 10-2*5)
			}
		})
	}
}
