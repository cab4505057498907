package storetest

import (
	"cmp"
	"math"
	"slices"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
)

// The brute-force checks Guarantees runs over the events a trace admitted:
// every window against each algorithm's guarantee (checkAdmissions), and
// each denial against what the events left room for (justified).

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
		l, m := &limits[i], q.Limits()[i]
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
// time at, by the events admitted on it (see checkDenial). With lp, the
// counters may hold leases (storekit.Leaser): the stores' rule for
// leases ahead under lp, the request's own policy (leaseJustified),
// justifies it too; hold is the request's, a lease's.
func deniedByAKey(p *ratelimit.Policy, admitted map[string][]event, keys []string, at, cost int64, lp *ratelimit.Policy, hold int64) bool {
	for _, k := range keys {
		if justified(p, admitted[k], at, cost) || lp != nil && leaseJustified(lp, admitted[k], at, cost, hold) {
			return true
		}
	}
	return false
}

// leaseJustified reports whether some limit had no room for cost at time
// at by the stores' rule for counters that hold leases recorded ahead
// (storekit.Leaser), which is conservative where they lie ahead: a
// window counts every unit recorded after at − Period, ahead of at too (a
// sub-bucket's up to its latest admission + Period), and a token bucket
// charges the units in order of the time they are recorded at, the
// request at at + hold.
func leaseJustified(p *ratelimit.Policy, ev []event, at, cost, hold int64) bool {
	periodUS, widthUS := spans(p)
	for li := range periodUS {
		l, lay := p.Limits()[li], plan.Layout(p).Limits[li]
		switch lay.Kind {
		case layout.Log:
			if sumIn(ev, at-periodUS[li]+1, math.MaxInt64)+cost > l.Rate {
				return true
			}
		case layout.Buckets:
			if sumIn(ev, at-periodUS[li]-widthUS[li]+2, math.MaxInt64)+cost > l.Rate {
				return true
			}
		case layout.Token:
			T := widthUS[li]
			sorted := slices.SortedStableFunc(slices.Values(ev), func(a, b event) int { return cmp.Compare(a.at, b.at) })
			tat := int64(math.MinInt64)
			for _, e := range sorted {
				tat = max(tat, e.at) + e.cost*T
			}
			if (max(tat, at, at+hold)+cost*T)-at > l.Burst*T {
				return true
			}
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
	for _, l := range plan.Layout(p).Limits {
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
		l := p.Limits()[li]
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
	if plan.Layout(p).Reserves {
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
		l := p.Limits()[li]
		switch p.Algorithm() {
		case ratelimit.SlidingLog:
			if exactExceeds(periodUS[li], l.Rate) {
				return true
			}
		case ratelimit.SlidingWindow:
			if plan.Layout(p).Limits[li].Kind == layout.Log {
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
