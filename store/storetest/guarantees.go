package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// Guarantees replays random and edge traces through h's store, records
// every admission on every key it charged (at its release time, for
// reservations), and checks each algorithm's documented guarantee over
// every window of every key by brute force. The random traces mix
// requests on one to three keys, costs above 1, partial grants,
// reservations, refunds (of reservations still in line too) and settles
// below and above a charge's cost. Usage settled above the limits is
// debt: a window may hold more than its rate, but no request is admitted
// while the debts settled before it fill the window (see counted). Each
// denial is checked too: some key must have had no room for the cost
// within the algorithm's counted span (the exact log: within the window,
// no more), and waiting exactly RetryAfter must be necessary and
// sufficient.
func Guarantees(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg)+11, 3))
			var nAdmitted, nDenied, nReserved, nMulti, nGrants, nClaims, nDebts, nLeases int
			settles, leases := false, false // the store settles, or leases (else the trace's settles are takes, its leases grants)
			defer func() {
				t.Logf("%s: %d admitted (%d reserved, %d on several keys, %d partial grants, %d leases), %d denied, %d debts", alg, nAdmitted, nReserved, nMulti, nGrants, nLeases, nDenied, nDebts)
				if nAdmitted == 0 || nDenied == 0 || nMulti == 0 && !h.OneKey || nGrants == 0 || (alg == ratelimit.TokenBucket || alg == ratelimit.SlidingLog) && nReserved == 0 || nDebts == 0 && settles || nLeases == 0 && leases {
					t.Errorf("%s: the traces missed a kind of step", alg)
				}
			}()
			over := 0.0 // the approximation's most admitted in one Period, × Rate
			for n := range h.traces(t) {
				p := randomPolicy(rng, alg)
				if p.BlockFor() > 0 { // penalties deny without counts: see the block scenarios
					var err error
					if p, err = p.With(ratelimit.BlockFor(0)); err != nil {
						t.Fatal(err)
					}
				}
				// Every fourth trace is of a leased policy's counters:
				// leases of random holds recorded ahead mix with the rest,
				// each spent at a random time within its hold.
				leased := false
				if q := leaseCounters(p); n%4 == 2 && q != nil {
					p, leased = q, true
				}
				var trace []step
				switch {
				case n%3 == 0:
					trace = edgeTrace(rng, p, 40)
				case n%3 == 1:
					trace = lineTrace(rng, p, 40)
				default:
					trace = randomTrace(rng, p, 40)
					for i := range trace {
						trace[i].cost++
						if trace[i].op == opReset {
							trace[i].op = opTake
						}
					}
				}
				// Every other trace changes the definition back and forth:
				// runs of steps go out under a policy of the same name with
				// other rates (rerated) that shares p's counters. Then the
				// guarantee is the larger rates' (upper), and refill claims
				// are not checked (the other rates may admit more within
				// one).
				alt, bound, low, mixed := p, p, p, false
				if n%2 == 1 {
					q := rerated(rng, p)
					if leased {
						q = leaseCounters(q)
					}
					if q != nil && q.ID() == p.ID() {
						alt, bound, low, mixed = q, upper(p, q), lower(p, q), true
						on := false
						for i := range trace {
							if rng.IntN(4) == 0 {
								on = !on
							}
							trace[i].rerated = on
						}
					}
				}
				if mixed && alg == ratelimit.TokenBucket {
					// A token bucket written in one rate's interval and leased
					// in another's decides a lease in the first: the checks
					// below model neither; Equivalence replays such traces.
					for i := range trace {
						if trace[i].op == opLease {
							trace[i].op = opUpTo
						}
					}
				}
				mem, clk := h.start(t)
				settles = capsOf(mem).settle
				leases = leases || leased && capsOf(mem).lease
				trace = capsOf(mem).fit(trace, h.OneKey)
				admitted := map[string][]event{}
				// A refund takes its charge's events out of those checked:
				// what is left must still keep the guarantee. Refunds may
				// give back less than exact, so after one a denial need not
				// be justified by the events any more.
				type mark struct {
					key string
					i   int
				}
				receipts := make([]ratelimit.Receipt, len(trace))
				events := make([][]mark, len(trace))
				refunded := false
				var refills refillClaims
				seq := 0 // the step being replayed
				take := func(at int64, s step) ratelimit.Decision {
					clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
					p := p
					if s.rerated {
						p = alt
					}
					req := ratelimit.Request{Policy: p, Keys: s.keys, Cost: s.cost, ID: s.id}
					var d ratelimit.Decision
					var err error
					switch s.op {
					case opUpTo:
						d, err = mem.(storekit.Granter).TakeUpTo(ctx, req)
					case opLease:
						d, err = mem.(storekit.Leaser).Lease(ctx, req, s.hold)
					case opReserve:
						d, err = mem.(storekit.Reserver).Reserve(ctx, req, s.maxDelay)
					default:
						d, err = mem.Take(ctx, req)
					}
					if err != nil {
						t.Fatal(err)
					}
					for _, l := range append(d.Limits, ratelimit.LimitStatus{Remaining: d.Remaining}) {
						if l.Remaining < 0 {
							t.Fatalf("trace %d step %d: Remaining %d below 0: %+v", n, seq, l.Remaining, d)
						}
					}
					if !d.Repeated && s.id == "" && !mixed {
						defer refills.claim(d, s.keys, at)
					}
					if d.Allowed && !d.Repeated {
						nAdmitted++
						if d.Delay > 0 {
							nReserved++
						}
						if len(s.keys) > 1 {
							nMulti++
						}
						if s.op == opUpTo && d.Granted < s.cost {
							nGrants++
						}
						// The keys charged: those a request ID answered before
						// are not. A lease counts from the time its key
						// recorded it at (its receipt's), and is spent at any
						// time within its hold.
						c := d.Receipt
						for ki, k := range c.Keys {
							ev := event{at: at + d.Delay.Microseconds(), cost: d.Granted, seq: seq}
							if s.op == opLease && s.hold > 0 {
								ev.at, ev.lease = c.Marks[ki*(2+len(p.Limits()))]-t0.UnixMicro(), true
								ev.spent = at + rng.Int64N(s.hold.Microseconds()+1)
								if rng.IntN(3) == 0 {
									ev.spent = []int64{at, at + s.hold.Microseconds()}[rng.IntN(2)]
								}
								nLeases++
							}
							admitted[k] = append(admitted[k], ev)
							refills.admit(k, at+d.Delay.Microseconds(), d.Granted)
						}
						if s.op != opUpTo && s.op != opLease && d.Granted != s.cost {
							t.Fatalf("trace %d: granted %d of cost %d", n, d.Granted, s.cost)
						}
						if d.Delay > s.maxDelay {
							t.Fatalf("trace %d: delay %s beyond the maximum %s", n, d.Delay, s.maxDelay)
						}
					}
					return d
				}
				checkAll := func(i int) {
					for _, ev := range admitted {
						over = max(over, checkAdmissions(t, bound, spending(ev), n, i))
					}
				}
				// The clock never goes back; reserved admissions lie ahead of
				// it until their release, so a refund may cancel a wait.
				clock := int64(0)
				for i, s := range trace {
					at := max(s.at.Microseconds(), clock)
					clock, seq = at, i
					p := p // the step's policy
					if s.rerated {
						p = alt
					}
					if s.op == opRefund {
						clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
						if err := mem.(storekit.Refunder).Refund(ctx, receipts[s.ref]); err != nil {
							t.Fatal(err)
						}
						refills.epoch++ // room given back: earlier claims say nothing of what follows
						for _, m := range events[s.ref] {
							if e := &admitted[m.key][m.i]; e.cost > 0 {
								e.cost = 0 // it no longer counts
								refunded = true
							}
						}
						receipts[s.ref], events[s.ref] = ratelimit.Receipt{}, nil
						continue
					}
					if s.op == opSettle {
						// Below the charge, its events count what was settled
						// (a store may give back less: see refunds); above
						// it, each key charged owes the rest now.
						c := receipts[s.ref]
						if mixed && hasLog(p) && s.cost > c.Cost {
							// A log keeps at most its ring of debt: a policy of
							// the same ID with a larger rate sees no more than
							// the settling one's (Limiter.Settle says so).
							s.cost = c.Cost
						}
						clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
						if err := mem.(storekit.Settler).Settle(ctx, receipts[s.ref], s.cost); err != nil {
							t.Fatal(err)
						}
						if c.Cost > s.cost {
							refills.epoch++
							for _, m := range events[s.ref] {
								admitted[m.key][m.i].cost = s.cost
								refunded = true
							}
						} else if c.Cost < s.cost {
							nDebts++
							for _, k := range c.Keys {
								admitted[k] = append(admitted[k], event{at: at, cost: s.cost - c.Cost, seq: i, debt: true})
							}
						}
						receipts[s.ref], events[s.ref] = ratelimit.Receipt{}, nil
						continue
					}
					d := take(at, s)
					receipts[i] = d.Receipt
					if d.Allowed && !d.Repeated {
						for _, k := range d.Receipt.Keys {
							events[i] = append(events[i], mark{k, len(admitted[k]) - 1})
						}
					}
					if d.Allowed {
						checkAll(i)
						if s.op == opUpTo && d.Granted < s.cost && s.id == "" && !waiting(admitted, s.keys, at) {
							// The grant is all there was: one more unit is denied.
							// (With an ID, keys its record answers are not asked;
							// with reservations in line, a grant is conservative.)
							c := s
							c.op, c.cost, c.id = opTake, 1, "" // under the step's policy (c.rerated)
							if take(at, c).Allowed {
								t.Fatalf("trace %d step %d (%s): granted %d of %d, yet one more fits", n, i, p, d.Granted, s.cost)
							}
						}
						continue
					}
					nDenied++
					if s.op == opUpTo || s.op == opLease {
						s.cost = 1 // a grant of 0 reports the wait for one unit
					}
					// A token bucket drains at the rate of the policy that last
					// charged it: with two rates taking turns, a denial is
					// justified by the smaller rates and bursts (lower).
					justify := p
					if mixed && alg == ratelimit.TokenBucket {
						justify = low
					}
					var lp *ratelimit.Policy // leases ahead: the stores' rule under the step's own policy
					if leasable(p) {
						lp = p
					}
					if !refunded && !deniedByAKey(justify, admitted, s.keys, at, s.cost, lp, s.hold.Microseconds()) {
						t.Fatalf("trace %d step %d: %s denied cost %d on %q at +%dµs though every limit of every key had room; admitted: %v", n, i, p, s.cost, s.keys, at, admitted)
					}
					if d.RetryAfter == ratelimit.Never {
						if s.cost <= p.MaxCost() && s.op != opLease { // a lease's hold takes a token bucket's room too
							t.Fatalf("trace %d step %d: Never for cost %d ≤ max cost %d", n, i, s.cost, p.MaxCost())
						}
						continue
					}
					r := d.RetryAfter.Microseconds()
					if r <= 0 {
						t.Fatalf("trace %d step %d: denied with RetryAfter %s", n, i, d.RetryAfter)
					}
					if s.id != "" {
						continue // keys its ID's records answered were not asked: RetryAfter speaks for the others
					}

					if s.op == opReserve && plan.Layout(p).Reserves && r <= s.maxDelay.Microseconds() && !queueFull(admitted, s.keys, at) {
						t.Fatalf("trace %d step %d (%s): not reserved though it fits in %s, within the maximum %s", n, i, p, d.RetryAfter, s.maxDelay)
					}
					plain := step{keys: s.keys, cost: s.cost, rerated: s.rerated}
					if s.op == opLease {
						// A lease's wait is for a lease of its hold (a token
						// bucket takes it at the hold's end).
						plain.op, plain.hold = opLease, s.hold
					}
					clock = at + r
					if r > 1 && take(at+r-1, plain).Allowed {
						t.Fatalf("trace %d step %d (%s): admitted 1µs before RetryAfter %s", n, i, p, d.RetryAfter)
					}
					// A cached denial of several keys may wait less than the
					// store would (it knows the wait of one key): waiting it
					// need not be enough.
					if !take(at+r, plain).Allowed && !(h.Cached && len(s.keys) > 1) {
						t.Fatalf("trace %d step %d (%s): denied after waiting RetryAfter %s (step %+v; events %v)", n, i, p, d.RetryAfter, s, admitted)
					}
					checkAll(i)
				}
				nClaims += refills.check(t, p, n)
			}
			t.Logf("%s: %d refill claims checked (no more than Remaining admitted within RefillAfter)", alg, nClaims)
			if nClaims == 0 {
				t.Errorf("%s: no refill claim was checked", alg)
			}
			if alg == ratelimit.SlidingWindowApprox {
				t.Logf("%s: most admitted in one window of Period: %.2f × Rate (bound: < 2)", alg, over)
			}
		})
	}
}
