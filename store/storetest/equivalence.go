package storetest

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// Equivalence replays random traces per algorithm through h's store and
// through the memory store on one clock, and requires identical decisions,
// field by field, at every step (and, with h.Marks, identical receipts).
// The traces settle earlier charges too, below and above their cost; in
// every fourth trace the policy has a Concurrent limit as well, and steps
// release and renew earlier charges' slots.
// In every fourth trace (another one) the policy is a leased policy's
// counters (the leased policy's own ID), and leases recorded ahead of now
// (storekit.Leaser) of random holds mix with every other step.
// Every third trace is one of the guarantee checker's crowded lines of
// reservations, partial grants, refunds and settles on several keys. In every
// other trace the definition changes mid-trace, back and forth: runs of
// steps go out under a policy of the same name with other rates (see
// rerated), which shares the counters or starts its own as Policy.ID
// says.
func Equivalence(t *testing.T, h Harness) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg)+7*14, 7))
			for n := range h.traces(t) {
				p := randomPolicy(rng, alg)
				leased := false
				if n%4 == 3 {
					p = withSlots(rng, p) // requests in flight too
				} else if q := leaseCounters(p); n%4 == 1 && q != nil {
					p, leased = q, true // leases ahead, sub-buckets too
				}
				var trace []step
				if n%3 == 1 {
					trace = lineTrace(rng, p, 24) // places in line crowded on several keys, as Guarantees replays
				} else {
					trace = randomTrace(rng, p, 16)
				}
				alt := p
				if n%2 == 0 {
					alt = rerated(rng, p)
					if leased {
						if alt = leaseCounters(alt); alt == nil {
							alt = p
						}
					}
					on := false
					for i := range trace {
						if rng.IntN(4) == 0 {
							on = !on
						}
						trace[i].rerated = on
					}
				}
				replay(t, h, p, alt, trace, n)
			}
		})
	}
}

// replay runs one trace through a new store of h and the memory store,
// requiring identical decisions at every step (n names the trace in
// failures); its steps marked rerated go out under alt.
func replay(t *testing.T, h Harness, p, alt *ratelimit.Policy, trace []step, n int) {
	t.Helper()
	s, clk := h.start(t)
	trace = capsOf(s).fit(trace, h.OneKey)
	ctx := context.Background()
	mem := reference(clk)
	memR, gotR := make([]ratelimit.Receipt, len(trace)), make([]ratelimit.Receipt, len(trace))
	mixed := alt != p
	for i, st := range trace {
		clk.Set(t0.Add(st.at))
		p := p
		if st.rerated {
			p = alt
		}
		if st.op == opSettle && mixed && hasLog(p) {
			// A log keeps at most its ring of debt, and the stores may
			// hold one identity's ring at different sizes while rates
			// change (the memory store reads a request's keys in one
			// layout): no debt then (Limiter.Settle says so).
			st.cost = min(st.cost, memR[st.ref].Cost)
		}
		want, err := apply(ctx, mem, p, st, memR)
		if err != nil {
			t.Fatal(err)
		}
		got, err := apply(ctx, s, p, st, gotR)
		if err != nil {
			t.Fatalf("trace %d step %d: %v", n, i, err)
		}
		memR[i], gotR[i] = want.Receipt, got.Receipt
		if st.op == opRenew { // the renewal's receipt holds the slots from now on
			memR[st.ref], gotR[st.ref] = want.Receipt, got.Receipt
		}
		if h.Marks && !reflect.DeepEqual(receiptView(got.Receipt), receiptView(want.Receipt)) {
			t.Fatalf("trace %d step %d: receipts differ:\nstore  %+v\nmemory %+v", n, i, receiptView(got.Receipt), receiptView(want.Receipt))
		}
		if (got.Receipt.Policy == nil) != (want.Receipt.Policy == nil) {
			t.Fatalf("trace %d step %d: receipt given %v, the memory store's %v", n, i, got.Receipt.Policy != nil, want.Receipt.Policy != nil)
		}
		got.Receipt, want.Receipt = ratelimit.Receipt{}, ratelimit.Receipt{}
		if h.Cached {
			got, want = cachedView(got, len(st.keys)), cachedView(want, len(st.keys))
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trace %d (%s %s, block %s) step %d at +%s op %d keys %q cost %d id %q:\nstore  %+v\nmemory %+v",
				n, p.Name(), p, p.BlockFor(), i, st.at, st.op, st.keys, st.cost, st.id, got, want)
		}
	}
}

// cachedView is what a store that answers denials from a cache must agree
// on: whether a request is admitted, what it was granted and how long it
// waits, and, for a request of one key, how long until it fits.
func cachedView(d ratelimit.Decision, keys int) ratelimit.Decision {
	v := ratelimit.Decision{Allowed: d.Allowed, Granted: d.Granted, Delay: d.Delay, Repeated: d.Repeated}
	if keys == 1 {
		v.RetryAfter = d.RetryAfter
	}
	return v
}

// apply runs one step against s, refunding and settling from receipts (the
// store's own receipts of earlier steps).
func apply(ctx context.Context, s ratelimit.Store, p *ratelimit.Policy, st step, receipts []ratelimit.Receipt) (ratelimit.Decision, error) {
	req := ratelimit.Request{Policy: p, Keys: st.keys, Cost: st.cost, ID: st.id}
	switch st.op {
	case opUpTo:
		return s.(storekit.Granter).TakeUpTo(ctx, req)
	case opLease:
		return s.(storekit.Leaser).Lease(ctx, req, st.hold)
	case opReserve:
		return s.(storekit.Reserver).Reserve(ctx, req, st.maxDelay)
	case opRefund:
		return ratelimit.Decision{}, s.(storekit.Refunder).Refund(ctx, receipts[st.ref])
	case opReset:
		return ratelimit.Decision{}, s.(storekit.Resetter).Reset(ctx, p, st.keys...)
	case opSettle:
		return ratelimit.Decision{}, s.(storekit.Settler).Settle(ctx, receipts[st.ref], st.cost)
	case opRelease:
		return ratelimit.Decision{}, s.(storekit.Releaser).Release(ctx, receipts[st.ref])
	case opRenew:
		r, err := s.(storekit.Releaser).Renew(ctx, receipts[st.ref])
		return ratelimit.Decision{Receipt: r}, err
	}
	return s.Take(ctx, req)
}

// receiptView is what two stores' receipts of the same charge must agree
// on: the policy, keys, cost, and per key the charge time and the marks.
// The refund count each store keeps per key is left out: the stores count
// from different origins (a Redis key outlives its counters by up to a
// quarter TTL), and only its changes between a charge and its refund
// matter, which the refunds replayed later compare.
func receiptView(r ratelimit.Receipt) any {
	if r.Policy == nil {
		return nil
	}
	c := r
	stride := 2 + len(c.Policy.Limits())
	var marks []int64
	for i, m := range c.Marks {
		if i%stride != 1 {
			marks = append(marks, m)
		}
	}
	return struct {
		Policy string
		Keys   []string
		Cost   int64
		Marks  []int64
	}{c.Policy.ID(), c.Keys, c.Cost, marks}
}
