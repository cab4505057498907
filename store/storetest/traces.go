package storetest

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
)

// algorithms are the algorithms every check runs.
var algorithms = []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow, ratelimit.TokenBucket,
	ratelimit.SlidingLog, ratelimit.SlidingWindowApprox}

// t0 is the first instant of every trace: a realistic epoch time, not
// aligned to any window, so traces cross window edges.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// clock is a controlled clock shared by a trace's stores; hook, when set,
// hears of every move.
type clock struct {
	mu   sync.Mutex
	t    time.Time
	hook func(time.Time)
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
	if c.hook != nil {
		c.hook(t)
	}
}

// Operations a trace step may run.
const (
	opTake    = iota // Take (cost 0 peeks)
	opUpTo           // TakeUpTo
	opReserve        // Reserve
	opRefund         // Refund an earlier step's receipt
	opReset          // Reset
	opSettle         // Settle an earlier step's receipt to cost units
	opRelease        // Release an earlier step's slots
	opRenew          // Renew an earlier step's slots (its receipt is replaced)
	opLease          // Lease, recorded hold ahead
)

// step is one request of a trace.
type step struct {
	at       time.Duration // since t0
	keys     []string
	cost     int64
	op       int
	maxDelay time.Duration // opReserve
	hold     time.Duration // opLease
	ref      int           // opRefund, opSettle: the step whose receipt is refunded or settled
	id       string        // Request.ID
	rerated  bool          // under the trace's policy of other rates (see rerated)
}

// randomPolicy draws a small policy: rates low enough that traces hit the
// limits often (and, for the sliding window, some above ExactRateMax, so
// both of its counters run, a few of them over a year), periods from
// sub-second to an hour, random precision and burst, and sometimes a
// penalty.
func randomPolicy(rng *rand.Rand, alg ratelimit.Algorithm) *ratelimit.Policy {
	periods := []time.Duration{250 * time.Millisecond, time.Second, 2 * time.Second, 10 * time.Second, time.Minute, time.Hour}
	rng.Shuffle(len(periods), func(i, j int) { periods[i], periods[j] = periods[j], periods[i] })
	n := 1 + rng.IntN(3)
	limits := make([]ratelimit.Limit, n)
	yearLong := false
	for i := range limits {
		l := ratelimit.Limit{Rate: int64(1 + rng.IntN(8)), Period: periods[i]}
		switch alg {
		case ratelimit.SlidingWindow:
			l.Precision = []int{0, 0, 0, 1, 2, 5, 10}[rng.IntN(7)]
			if rng.IntN(3) == 0 {
				l.Rate = ratelimit.ExactRateMax + 1 + int64(rng.IntN(12)) // sub-buckets
				if rng.IntN(4) == 0 && !yearLong {
					// A year in one or two sub-buckets (one limit a
					// policy: periods differ): a settle's debt takes one's
					// cost times its width past 2^53 µs.
					l.Period, l.Precision, yearLong = ratelimit.MaxPeriod, 1+rng.IntN(2), true
				}
			}
		case ratelimit.SlidingLog:
			l.Rate = int64(1 + rng.IntN(12))
			if rng.IntN(4) == 0 {
				l.Rate = 40 + int64(rng.IntN(30)) // a log of several chunk fields
			}
		case ratelimit.TokenBucket:
			l.Burst = int64(rng.IntN(6)) // 0 = Rate
		}
		limits[i] = l
	}
	p, err := ratelimit.NewPolicy("p"+strconv.Itoa(rng.IntN(3)), alg, limits...)
	if err != nil {
		panic(err)
	}
	if rng.IntN(5) == 0 {
		if p, err = p.With(ratelimit.BlockFor((periods[rng.IntN(len(periods))] / time.Duration(1+rng.IntN(4))).Truncate(time.Microsecond))); err != nil {
			panic(err)
		}
	}
	return p
}

// withSlots returns p with a Concurrent limit of 1 to 4 slots added, its
// lease a whole number of seconds around p's periods.
func withSlots(rng *rand.Rand, p *ratelimit.Policy) *ratelimit.Policy {
	limits := p.Limits()
	l := ratelimit.Concurrent(int64(1 + rng.IntN(4)))
	l.Period = time.Duration(1+rng.IntN(60)) * time.Second
	limits = append(limits[:min(len(limits), ratelimit.MaxLimits-1)], l)
	for i := range limits {
		limits[i].Name = "" // named anew
	}
	return like(p, limits)
}

// like returns a policy of p's name, algorithm and penalty with limits.
func like(p *ratelimit.Policy, limits []ratelimit.Limit) *ratelimit.Policy {
	q, err := ratelimit.NewPolicy(p.Name(), p.Algorithm(), limits...)
	if err == nil && p.BlockFor() > 0 {
		q, err = q.With(ratelimit.BlockFor(p.BlockFor()))
	}
	if err != nil {
		panic(err)
	}
	return q
}

// slotted reports whether p has a Concurrent limit.
func slotted(p *ratelimit.Policy) bool {
	for _, l := range p.Limits() {
		if l.Concurrent {
			return true
		}
	}
	return false
}

// rerated returns a policy of p's name, algorithm, periods, precisions
// and penalty, with other rates (and bursts), as a plan change or a
// rolling deploy makes: of one ID with p, unless a sliding window's rate
// crossed ExactRateMax (then of another).
func rerated(rng *rand.Rand, p *ratelimit.Policy) *ratelimit.Policy {
	limits := p.Limits()
	for i := range limits {
		l := &limits[i]
		if l.Concurrent {
			l.Rate = int64(1 + rng.IntN(4))
			continue
		}
		if l.Rate > ratelimit.ExactRateMax {
			l.Rate = ratelimit.ExactRateMax + 1 + int64(rng.IntN(40))
		} else {
			l.Rate = int64(1 + rng.IntN(8))
		}
		if p.Algorithm() == ratelimit.TokenBucket && rng.IntN(2) == 0 {
			l.Burst = 0 // the new rate
		}
	}
	return like(p, limits)
}

// randomTrace draws steps whose clock advances by amounts around the
// policy's periods and sub-buckets: zero, a microsecond, a bucket edge, a
// whole period, a period and a sub-bucket (a ring lapsed, as an identity
// called now and then finds it), or random; with every operation mixed in.
func randomTrace(rng *rand.Rand, p *ratelimit.Policy, steps int) []step {
	periodUS, widthUS := spans(p)
	keys := []string{"ip:192.0.2.1", "user:{42}", "key:a\nb"}
	var at time.Duration
	out := make([]step, steps)
	for i := range out {
		i2 := rng.IntN(len(periodUS))
		switch rng.IntN(7) {
		case 0: // same instant
		case 1:
			at += time.Microsecond
		case 2:
			at += time.Duration(widthUS[i2]) * time.Microsecond
		case 3:
			at += time.Duration(periodUS[i2]) * time.Microsecond
		case 4:
			at += time.Duration(periodUS[i2]+widthUS[i2]) * time.Microsecond
		default:
			at += time.Duration(rng.Int64N(periodUS[i2]/2+1)) * time.Microsecond
		}
		perm := rng.Perm(len(keys))[:1+rng.IntN(len(keys))]
		ks := make([]string, len(perm))
		for j, k := range perm {
			ks[j] = keys[k]
		}
		s := step{at: at, keys: ks, cost: int64(rng.IntN(5))} // 0 peeks
		switch r := rng.IntN(20); {
		case r < 2:
			s.op, s.cost = opUpTo, 1+int64(rng.IntN(6))
		case r < 5:
			s.op, s.cost = opReserve, 1+int64(rng.IntN(3))
			s.maxDelay = time.Duration(rng.Int64N(periodUS[i2]+1)) * time.Microsecond
		case r < 7 && i > 0:
			s.op, s.ref = opRefund, rng.IntN(i)
		case r < 8:
			s.op = opReset
		case r < 10 && i > 0:
			s.op, s.ref, s.cost = opSettle, rng.IntN(i), settleCost(rng)
		case r < 12 && i > 0 && slotted(p):
			s.op, s.ref = opRelease, rng.IntN(i)
		case r < 13 && i > 0 && slotted(p):
			s.op, s.ref = opRenew, rng.IntN(i)
		case r < 15 && leasable(p):
			s.op, s.cost, s.hold = opLease, 1+int64(rng.IntN(6)), randomHold(rng, p)
		}
		if rng.IntN(4) == 0 {
			s.id = []string{"req-a", "req-b"}[rng.IntN(2)]
		}
		out[i] = s
	}
	return withRepeats(rng, widthUS, out)
}

// withRepeats follows some plain takes of trace with the same take again,
// one to three times, each a moment later (within a quarter of a
// sub-bucket or interval of widthUS): a flood's next calls, which a store
// may answer from the denial it kept. The steps after them come later by
// as much, and refer to the same steps as before.
func withRepeats(rng *rand.Rand, widthUS []int64, trace []step) []step {
	out := make([]step, 0, len(trace)*3/2)
	moved := make([]int, len(trace)) // a step's index in out
	var later time.Duration
	for i, s := range trace {
		s.at += later
		if s.op == opRefund || s.op == opSettle || s.op == opRelease || s.op == opRenew {
			s.ref = moved[s.ref]
		}
		moved[i] = len(out)
		out = append(out, s)
		if s.op != opTake || s.id != "" || rng.IntN(4) != 0 {
			continue
		}
		at := s.at
		for range 1 + rng.IntN(3) {
			d := time.Duration(rng.Int64N(widthUS[rng.IntN(len(widthUS))]/4+1)) * time.Microsecond
			at, later = at+d, later+d
			out = append(out, step{at: at, keys: s.keys, cost: s.cost})
		}
	}
	return out
}

// settleCost draws what a settle sets a charge to: nothing, a little, or
// well past the limits (a debt), now and then far past any capacity.
func settleCost(rng *rand.Rand) int64 {
	if rng.IntN(8) == 0 {
		return 1000 + rng.Int64N(1000)
	}
	return rng.Int64N(13)
}

// event is a request's outcome on one key: time (µs since t0) and cost;
// seq is the trace step that made it, and debt marks a settle's charge
// above a request's cost (not an admission: it may pass the limits).
type event struct {
	at, cost int64
	seq      int
	debt     bool
	// spent, for a lease (storekit.Leaser), is when its caller spends
	// it: any time from its grant to at, the time the store records it
	// at. The guarantee holds for spending; the store decides by at.
	spent int64
	lease bool
}

// spending returns ev with each lease at the time it is spent: what the
// guarantee is about.
func spending(ev []event) []event {
	out := slices.Clone(ev)
	for i := range out {
		if out[i].lease {
			out[i].at = out[i].spent
		}
	}
	return out
}

// edgeTrace hammers window and sub-bucket edges: bursts just before, at and
// just after every boundary, the adversarial case for window algorithms.
func edgeTrace(rng *rand.Rand, p *ratelimit.Policy, steps int) []step {
	_, widthUS := spans(p)
	w := widthUS[rng.IntN(len(widthUS))]
	base := (t0.UnixMicro()/w + 1) * w // the first edge after t0
	out := make([]step, steps)
	for i := range out {
		edge := base + int64(i/4)*w
		at := edge + []int64{-1, 0, 0, 1}[rng.IntN(4)] - t0.UnixMicro()
		if i > 0 && time.Duration(at)*time.Microsecond < out[i-1].at {
			at = int64(out[i-1].at / time.Microsecond)
		}
		out[i] = step{at: time.Duration(at) * time.Microsecond, keys: []string{"k"}, cost: int64(1 + rng.IntN(3))}
	}
	return out
}

// lineTrace crowds a few keys with requests that wait in line: many
// reservations on one to three keys (so a key with room waits for one
// without), costs of 1 to 3, partial grants and refunds of earlier steps
// (reservations still in line among them), with the clock moving by
// fractions of the shortest period so that the limits are hit often.
func lineTrace(rng *rand.Rand, p *ratelimit.Policy, steps int) []step {
	periodUS, _ := spans(p)
	short := slices.Min(periodUS)
	keys := []string{"a", "b", "c"}
	var at time.Duration
	out := make([]step, steps)
	for i := range out {
		at += time.Duration(rng.Int64N(short/3+1)) * time.Microsecond
		ks := slices.Clone(keys[:1+rng.IntN(len(keys))])
		rng.Shuffle(len(ks), func(a, b int) { ks[a], ks[b] = ks[b], ks[a] })
		if rng.IntN(3) == 0 {
			ks = ks[len(ks)-1:]
		}
		s := step{at: at, keys: ks, cost: 1 + int64(rng.IntN(3))}
		switch r := rng.IntN(10); {
		case r < 4:
			s.op = opReserve
			s.maxDelay = time.Duration(rng.Int64N(2*slices.Max(periodUS)+1)) * time.Microsecond
		case r < 6:
			s.op = opUpTo
		case r < 7 && i > 0:
			s.op, s.ref = opRefund, rng.IntN(i)
		case r < 8 && i > 0:
			s.op, s.ref, s.cost = opSettle, rng.IntN(i), settleCost(rng)
		case r < 9 && i > 0 && slotted(p):
			s.op, s.ref = []int{opRelease, opRenew}[rng.IntN(2)], rng.IntN(i)
		case r < 9 && leasable(p):
			s.op, s.hold = opLease, randomHold(rng, p)
		}
		out[i] = s
	}
	return out
}

// leasable reports whether p's counters can record a lease ahead
// (storekit.Leaser): they keep places in line (a policy that reserves,
// or a leased policy's counters) and count no requests in flight.
func leasable(p *ratelimit.Policy) bool {
	return plan.Layout(p).Pending && !slotted(p)
}

// leaseCounters returns p leased (ratelimit.WithLease), whose counters
// keep its leases ahead of now, a fixed window or an approximation's as a
// sliding window's (sub-buckets included); nil when p cannot be leased.
func leaseCounters(p *ratelimit.Policy) *ratelimit.Policy {
	q, err := p.With(ratelimit.WithLease(1, time.Millisecond))
	if err != nil {
		return nil
	}
	return q
}

// randomHold draws a lease's hold: none, a microsecond, a sub-bucket or
// an emission interval, or up to the shortest period, as processes of one
// policy leasing with different holds would.
func randomHold(rng *rand.Rand, p *ratelimit.Policy) time.Duration {
	periodUS, widthUS := spans(p)
	short := slices.Min(periodUS)
	switch rng.IntN(5) {
	case 0:
		return 0
	case 1:
		return time.Microsecond
	case 2:
		return time.Duration(widthUS[rng.IntN(len(widthUS))]) * time.Microsecond
	}
	return time.Duration(1+rng.Int64N(short)) * time.Microsecond
}

// spans returns each limit's period and width (a sub-bucket, the emission
// interval, or the period) in µs: the steps traces move the clock by.
func spans(p *ratelimit.Policy) (periodUS, widthUS []int64) {
	for _, l := range plan.Layout(p).Limits {
		periodUS, widthUS = append(periodUS, l.Period), append(widthUS, l.Width)
	}
	return periodUS, widthUS
}

// ttlOf is how long a store keeps p's counters after their last write.
func ttlOf(p *ratelimit.Policy) time.Duration {
	return time.Duration(plan.Layout(p).TTLMS) * time.Millisecond
}
