package storetest

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/bridge"
	"github.com/ratelimitkit/ratelimit/internal/layout"
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
			var nAdmitted, nDenied, nReserved, nMulti, nGrants, nClaims, nDebts int
			settles := false // the store settles (else the trace's settles are takes)
			defer func() {
				t.Logf("%s: %d admitted (%d reserved, %d on several keys, %d partial grants), %d denied, %d debts", alg, nAdmitted, nReserved, nMulti, nGrants, nDenied, nDebts)
				if nAdmitted == 0 || nDenied == 0 || nMulti == 0 && !h.OneKey || nGrants == 0 || (alg == ratelimit.TokenBucket || alg == ratelimit.SlidingLog) && nReserved == 0 || nDebts == 0 && settles {
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
					if q := rerated(rng, p); q.ID() == p.ID() {
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
				mem, clk := h.start(t)
				settles = capsOf(mem).settle
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
						d, err = mem.(ratelimit.Granter).TakeUpTo(ctx, req)
					case opReserve:
						d, err = mem.(ratelimit.Reserver).Reserve(ctx, req, s.maxDelay)
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
						// The keys charged: those a request ID answered before are not.
						for _, k := range storekit.ChargeOf(d.Receipt).Keys {
							admitted[k] = append(admitted[k], event{at: at + d.Delay.Microseconds(), cost: d.Granted, seq: seq})
							refills.admit(k, at+d.Delay.Microseconds(), d.Granted)
						}
						if s.op != opUpTo && d.Granted != s.cost {
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
						over = max(over, checkAdmissions(t, bound, ev, n, i))
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
						if err := mem.(ratelimit.Refunder).Refund(ctx, receipts[s.ref]); err != nil {
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
						c := storekit.ChargeOf(receipts[s.ref])
						if mixed && hasLog(p) && s.cost > c.Cost {
							// A log keeps at most its ring of debt: a policy of
							// the same ID with a larger rate sees no more than
							// the settling one's (Limiter.Settle says so).
							s.cost = c.Cost
						}
						clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
						if err := mem.(ratelimit.Settler).Settle(ctx, receipts[s.ref], s.cost); err != nil {
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
						for _, k := range storekit.ChargeOf(d.Receipt).Keys {
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
					if s.op == opUpTo {
						s.cost = 1 // a grant of 0 reports the wait for one unit
					}
					// A token bucket drains at the rate of the policy that last
					// charged it: with two rates taking turns, a denial is
					// justified by the smaller rates and bursts (lower).
					justify := p
					if mixed && alg == ratelimit.TokenBucket {
						justify = low
					}
					if !refunded && !deniedByAKey(justify, admitted, s.keys, at, s.cost) {
						t.Fatalf("trace %d step %d: %s denied cost %d on %q at +%dµs though every limit of every key had room; admitted: %v", n, i, p, s.cost, s.keys, at, admitted)
					}
					if d.RetryAfter == ratelimit.Never {
						if s.cost <= p.MaxCost() {
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
					if s.op == opReserve && p.Reserves() && r <= s.maxDelay.Microseconds() && !queueFull(admitted, s.keys, at) {
						t.Fatalf("trace %d step %d (%s): not reserved though it fits in %s, within the maximum %s", n, i, p, d.RetryAfter, s.maxDelay)
					}
					plain := step{keys: s.keys, cost: s.cost, rerated: s.rerated}
					clock = at + r
					if r > 1 && take(at+r-1, plain).Allowed {
						t.Fatalf("trace %d step %d (%s): admitted 1µs before RetryAfter %s", n, i, p, d.RetryAfter)
					}
					// A cached denial of several keys may wait less than the
					// store would (it knows the wait of one key): waiting it
					// need not be enough.
					if !take(at+r, plain).Allowed && !(h.Cached && len(s.keys) > 1) {
						t.Fatalf("trace %d step %d (%s): denied after waiting RetryAfter %s", n, i, p, d.RetryAfter)
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

// lower is the policy of each limit's smaller rate and burst: a token
// bucket two policies of one ID take turns on denies no more than it would
// (its debt drains at the rate of the one that last charged it).
func lower(p, q *ratelimit.Policy) *ratelimit.Policy {
	return combined(p, q, func(a, b int64) int64 { return min(a, b) })
}

// upper is the policy whose guarantee two policies of one ID keep together
// when they take turns on the same counters: each limit's larger rate
// (and a token bucket's larger burst).
func upper(p, q *ratelimit.Policy) *ratelimit.Policy {
	return combined(p, q, func(a, b int64) int64 { return max(a, b) })
}

// combined is p with each limit's rate (and a token bucket's burst) the
// pick of p's and q's.
func combined(p, q *ratelimit.Policy, pick func(a, b int64) int64) *ratelimit.Policy {
	limits := p.Limits()
	for i := range limits {
		l, m := &limits[i], q.Limit(i)
		if p.Algorithm() == ratelimit.TokenBucket {
			l.Burst = pick(l.Burst, m.Burst)
		}
		l.Rate = pick(l.Rate, m.Rate)
	}
	u, err := ratelimit.NewPolicy(p.Name(), p.Algorithm(), limits...)
	if err != nil {
		panic(err)
	}
	return u
}

// waiting reports whether one of keys has a reservation still in line at
// time at.
func waiting(admitted map[string][]event, keys []string, at int64) bool {
	for _, k := range keys {
		for _, e := range admitted[k] {
			if e.at > at && e.cost > 0 {
				return true
			}
		}
	}
	return false
}

// queueFull reports whether one of keys holds as many places in line
// (reservations pending at time at, by distinct release time) as a store
// keeps: a request is then not reserved, though it would fit.
func queueFull(admitted map[string][]event, keys []string, at int64) bool {
	for _, k := range keys {
		releases := map[int64]bool{}
		for _, e := range admitted[k] {
			if e.at > at && e.cost > 0 {
				releases[e.at] = true
			}
		}
		if len(releases) >= layout.MaxPending {
			return true
		}
	}
	return false
}

// deniedByAKey reports whether some key of keys had no room for cost at
// time at, by the events admitted on it (see checkDenial).
func deniedByAKey(p *ratelimit.Policy, admitted map[string][]event, keys []string, at, cost int64) bool {
	for _, k := range keys {
		if justified(p, admitted[k], at, cost) {
			return true
		}
	}
	return false
}

// windowMax is the largest cost counted (see counted) in one half-open
// window [s, s+period) of the events (the maximum is reached with s at an
// event: counted grows with the events a window holds).
func windowMax(ev []event, period int64) int64 {
	best := int64(0)
	for _, a := range ev {
		best = max(best, counted(ev, a.at, a.at+period-1))
	}
	return best
}

// hasLog reports whether p counts a limit in a log.
func hasLog(p *ratelimit.Policy) bool {
	for _, l := range bridge.Layout(p).Limits {
		if l.Kind == layout.Log {
			return true
		}
	}
	return false
}

// admissions returns the events that are not debts: the approximation's
// bound (< 2 × Rate in any window) is on what it admits, as it weighs the
// previous window's count evenly over it, wherever its debt lies.
func admissions(ev []event) []event {
	return slices.DeleteFunc(slices.Clone(ev), func(e event) bool { return e.debt })
}

// counted is the cost of the events in [from, to] a store had counted when
// it admitted the last of them (in trace order): every admission, and the
// debts settled before that one. A debt settled after it may pass the
// limit; an admission may not.
func counted(ev []event, from, to int64) int64 {
	last, sum := -1, int64(0)
	for _, e := range ev {
		if e.at >= from && e.at <= to {
			if e.debt {
				continue
			}
			last = max(last, e.seq)
			sum += e.cost
		}
	}
	for _, e := range ev {
		if e.debt && e.at >= from && e.at <= to && e.seq < last {
			sum += e.cost
		}
	}
	return sum
}

// checkAdmissions verifies every window against the algorithm's guarantee,
// and returns the most admitted in one window of a Period as a multiple of
// Rate, for the approximation (its documented overshoot), else 0.
func checkAdmissions(t *testing.T, p *ratelimit.Policy, ev []event, n, i int) (over float64) {
	t.Helper()
	periodUS, widthUS := spans(p)
	for li := range periodUS {
		l := p.Limit(li)
		switch p.Algorithm() {
		case ratelimit.SlidingWindow, ratelimit.SlidingLog:
			if m := windowMax(ev, periodUS[li]); m > l.Rate {
				t.Fatalf("trace %d step %d: %s: %d admitted within one window of %s, rate %d: %+v", n, i, p, m, l.Period, l.Rate, ev)
			}
		case ratelimit.FixedWindow, ratelimit.SlidingWindowApprox:
			for _, e := range ev {
				start := e.at + t0.UnixMicro()
				start -= start % periodUS[li]
				if sum := counted(ev, start-t0.UnixMicro(), start-t0.UnixMicro()+periodUS[li]-1); sum > l.Rate {
					t.Fatalf("trace %d step %d: %s: %d admitted in one aligned window, rate %d", n, i, p, sum, l.Rate)
				}
			}
			if p.Algorithm() == ratelimit.SlidingWindowApprox {
				m := windowMax(admissions(ev), periodUS[li])
				if m >= 2*l.Rate {
					t.Fatalf("trace %d step %d: %s: %d admitted within one window, the bound is < 2 × %d", n, i, p, m, l.Rate)
				}
				over = max(over, float64(m)/float64(l.Rate))
			}
		case ratelimit.TokenBucket:
			// For every pair s ≤ t: counted in [s, t] · T ≤ Burst · T + (t − s),
			// over the events in order of time (a reservation is admitted
			// before events that come earlier than its release). Counted:
			// the admissions, and the debts settled before the last of them
			// (see counted), kept apart to add up as the pair widens.
			T := widthUS[li]
			ev := slices.SortedStableFunc(slices.Values(ev), func(a, b event) int { return cmp.Compare(a.at, b.at) })
			for a := range ev {
				sum, last := int64(0), -1
				var debts []event
				for b := a; b < len(ev); b++ {
					if ev[b].debt {
						debts = append(debts, ev[b])
					} else {
						sum, last = sum+ev[b].cost, max(last, ev[b].seq)
					}
					total := sum
					for _, d := range debts {
						if d.seq < last {
							total += d.cost
						}
					}
					if span := ev[b].at - ev[a].at; span >= 0 && total*T > l.Burst*T+span {
						t.Fatalf("trace %d step %d: %s: %d counted in %dµs, burst %d, interval %dµs", n, i, p, total, span, l.Burst, T)
					}
				}
			}
		}
	}
	return over
}

// justified reports whether some limit really had no room for cost at
// time at, given the events admitted on one key.
func justified(p *ratelimit.Policy, ev []event, at, cost int64) bool {
	periodUS, widthUS := spans(p)
	// Reservations are served in order: while one is pending (an event
	// ahead of at), a request that does not wait is denied.
	if p.Reserves() {
		for _, e := range ev {
			if e.at > at && e.cost > 0 {
				return true
			}
		}
	}
	// exactExceeds reports whether cost at time at would put more than rate
	// in a window [s, s+period) holding at, counting the admissions
	// reserved ahead of at too. The count changes only where an event
	// enters or leaves the window, so those starts are enough.
	exactExceeds := func(period, rate int64) bool {
		starts := []int64{at - period + 1, at}
		for _, e := range ev {
			if e.at > at-period && e.at < at {
				starts = append(starts, e.at, e.at+1)
			}
			if e.at > at && e.at < at+period {
				starts = append(starts, e.at-period+1)
			}
		}
		for _, s := range starts {
			if s > at-period && s <= at && sumIn(ev, s, s+period-1)+cost > rate {
				return true
			}
		}
		return false
	}
	for li := range periodUS {
		l := p.Limit(li)
		switch p.Algorithm() {
		case ratelimit.SlidingLog:
			if exactExceeds(periodUS[li], l.Rate) {
				return true
			}
		case ratelimit.SlidingWindow:
			if bridge.Layout(p).Limits[li].Kind == layout.Log {
				if exactExceeds(periodUS[li], l.Rate) {
					return true
				}
				break
			}
			// A sub-bucket counts until its latest admission + Period.
			if sumIn(ev, at-periodUS[li]-widthUS[li]+2, at)+cost > l.Rate {
				return true
			}
		case ratelimit.FixedWindow:
			start := at + t0.UnixMicro()
			start -= start % periodUS[li]
			if sumIn(ev, start-t0.UnixMicro(), at)+cost > l.Rate {
				return true
			}
		case ratelimit.SlidingWindowApprox:
			P := periodUS[li]
			abs := at + t0.UnixMicro()
			start := abs - abs%P - t0.UnixMicro()
			cur, prev := sumIn(ev, start, at), sumIn(ev, start-P, start-1)
			e := abs % P
			est := float64(float64(prev)*float64(P-e)) / float64(P)
			if math.Floor(float64(l.Rate-cur)-est) < float64(cost) {
				return true
			}
		case ratelimit.TokenBucket:
			// Some interval [a, b] holding at, reserved admissions ahead
			// of it included, would exceed Burst + (b−a)/T.
			T := widthUS[li]
			if cost > l.Burst {
				return true
			}
			times := []int64{at}
			for _, e := range ev {
				times = append(times, e.at)
			}
			for _, a := range times {
				for _, b := range times {
					if a <= at && b >= at && (sumIn(ev, a, b)+cost)*T > l.Burst*T+(b-a) {
						return true
					}
				}
			}
		}
	}
	return false
}

func sumIn(ev []event, from, to int64) int64 {
	sum := int64(0)
	for _, e := range ev {
		if e.at >= from && e.at <= to {
			sum += e.cost
		}
	}
	return sum
}
