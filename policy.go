package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// Policy is a named set of limits counted with one Algorithm. A request is
// admitted only if every limit has room for its cost. Build one with
// NewPolicy or ParsePolicy; a Policy is immutable and safe for concurrent
// use, so build it once and share it; With copies it under another name
// or penalty.
type Policy struct {
	name      string
	algorithm Algorithm
	limits    []Limit       // with defaults filled in
	given     []Limit       // as given to buildPolicy, for With
	block     time.Duration // BlockFor; 0: none
	// id identifies the policy's counters in a store: its name and a
	// fingerprint of what lays them out (layout.Names), so that a changed
	// rate keeps the counters where their layout allows and a changed
	// layout never reads counters laid out for another.
	id string
	// def is the name and a fingerprint of the whole definition, rates
	// and lease terms included: what the grants of a leased policy are
	// kept under (lease_grants.go).
	def string
	// layout is how the stores count the policy (internal/layout, which
	// the stores derive for themselves from what p exports).
	layout  *layout.Policy
	minRate int64 // smallest capacity of any limit (Rate, or Burst for TokenBucket)
	// lease is how a Limiter leases the policy's quota (WithLease); nil
	// when it asks the store for every request.
	lease *leasing
	// header is the RateLimit-Policy value, built at its first use
	// (headers.go).
	header atomic.Pointer[string]
}

// NewPolicy validates limits and returns a Policy. name labels the policy in
// headers and store keys: 1 to 64 characters from [A-Za-z0-9_.-]; empty
// means DefaultPolicyName. Errors say which limit is wrong and why. For a
// penalty after a denial, use p.With(BlockFor(d)).
func NewPolicy(name string, alg Algorithm, limits ...Limit) (*Policy, error) {
	p, err := buildPolicy(name, alg, limits, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return p, nil
}

// buildPolicy validates a policy, fills in its defaults and lays out its
// counters; lease, when set, are the terms it is leased on (WithLease).
func buildPolicy(name string, alg Algorithm, limits []Limit, block time.Duration, lease *leaseTerms) (*Policy, error) {
	if name == "" {
		name = DefaultPolicyName
	}
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("policy name %q: %w", name, err)
	}
	if alg > SlidingWindowApprox {
		return nil, fmt.Errorf("policy %q: unknown algorithm %d", name, alg)
	}
	if len(limits) == 0 {
		return nil, fmt.Errorf("policy %q: no limits", name)
	}
	if len(limits) > MaxLimits {
		return nil, fmt.Errorf("policy %q: %d limits, at most %d allowed", name, len(limits), MaxLimits)
	}
	if block < 0 || block > MaxSpan || block%time.Microsecond != 0 {
		return nil, fmt.Errorf("policy %q: BlockFor(%s): want a whole number of microseconds from 0 to %s", name, block, MaxSpan)
	}
	p := &Policy{name: name, algorithm: alg, limits: make([]Limit, len(limits)), block: block}
	copy(p.limits, limits)
	p.given = append([]Limit(nil), limits...)
	seen := make(map[time.Duration]int, len(limits))
	names := make(map[string]int, len(limits))
	specs := make([]layout.Spec, len(limits))
	for i := range p.limits {
		l := &p.limits[i]
		var where string
		var err error
		if l.Concurrent {
			where = fmt.Sprintf("policy %q: limit %d (%d concurrent)", name, i+1, l.Rate)
			err = checkSlots(p.limits[:i], l, where)
		} else {
			where = fmt.Sprintf("policy %q: limit %d (%d/%s)", name, i+1, l.Rate, l.Period)
			err = checkRate(alg, l, seen, i, where)
		}
		if err == nil {
			err = limitName(l, names, i, name, where)
		}
		if err != nil {
			return nil, err
		}
		capacity := l.Rate
		if alg == TokenBucket && !l.Concurrent {
			capacity = l.Burst
		}
		if !l.Concurrent && (p.minRate == 0 || capacity < p.minRate) {
			p.minRate = capacity
		}
		specs[i] = layout.Spec{Rate: l.Rate, Burst: l.Burst, Period: l.Period.Microseconds(), Precision: int64(l.Precision), Concurrent: l.Concurrent}
	}
	if p.minRate == 0 {
		p.minRate = MaxRate // only Concurrent limits: they count requests, not cost
	}
	var chunk, hold int64
	if lease != nil {
		ls, err := checkLease(fmt.Sprintf("policy %q: WithLease(%d, %s)", name, lease.chunk, lease.hold), alg, p.limits, *lease)
		if err != nil {
			return nil, err
		}
		p.lease, chunk, hold = ls, lease.chunk, lease.hold.Microseconds()
	}
	counting := countingOf[alg]
	p.layout = layout.Derive(counting, specs, block.Microseconds(), lease != nil)
	p.id, p.def = layout.Names(name, counting, specs, block.Microseconds(), chunk, hold)
	return p, nil
}

// countingOf names each Algorithm as package layout counts it.
var countingOf = [...]layout.Algorithm{
	SlidingWindow:       layout.SlidingWindow,
	FixedWindow:         layout.FixedWindow,
	TokenBucket:         layout.TokenBucket,
	SlidingLog:          layout.SlidingLog,
	SlidingWindowApprox: layout.SlidingWindowApprox,
}

// checkRate validates l, limit i of a policy counted by alg, and fills in
// its defaults (Precision, Burst); seen holds the periods of the limits
// before it.
func checkRate(alg Algorithm, l *Limit, seen map[time.Duration]int, i int, where string) error {
	if l.Rate < 1 || l.Rate > MaxRate {
		return fmt.Errorf("%s: rate must be between 1 and %d", where, MaxRate)
	}
	if l.Period < MinPeriod || l.Period > MaxPeriod {
		return fmt.Errorf("%s: period must be between %s and %s", where, MinPeriod, MaxPeriod)
	}
	if l.Period%time.Microsecond != 0 {
		return fmt.Errorf("%s: period must be a whole number of microseconds", where)
	}
	if l.Period > time.Second && l.Period%time.Second != 0 {
		k := int64(time.Second) / gcd(int64(l.Period), int64(time.Second))
		return fmt.Errorf("%s: a period above one second must be a whole number of seconds, as Retry-After and the RateLimit headers count whole seconds (a client would wait up to a second too long each time); use %d/%s for the same rate", where, k*l.Rate, FormatPeriod(time.Duration(k)*l.Period))
	}
	if j, dup := seen[l.Period]; dup {
		return fmt.Errorf("%s: duplicate period, limit %d has it too", where, j+1)
	}
	seen[l.Period] = i
	if alg != TokenBucket && l.Burst != 0 {
		return fmt.Errorf("%s: burst applies to the token bucket only", where)
	}
	if alg != SlidingWindow && l.Precision != 0 {
		return fmt.Errorf("%s: precision applies to the sliding window only", where)
	}
	period := l.Period.Microseconds()
	switch alg {
	case SlidingWindow:
		n := int64(l.Precision)
		if n < 0 || n > MaxPrecision {
			return fmt.Errorf("%s: precision %d must be between 1 and %d (0 for the default)", where, n, MaxPrecision)
		}
		if n == 0 && l.Rate <= ExactRateMax {
			return nil // a log
		}
		if n == 0 {
			n = layout.BucketsOf(period)
		}
		if period%n != 0 {
			return fmt.Errorf("%s: precision %d does not divide the period into whole microseconds", where, n)
		}
		if period/n < 1000 {
			return fmt.Errorf("%s: precision %d makes sub-buckets shorter than 1ms", where, n)
		}
		l.Precision = int(n)
	case SlidingLog:
		if l.Rate > MaxLogRate {
			return fmt.Errorf("%s: the sliding log keeps one time per unit of rate, so its rate must be at most %d (use SlidingWindow above that)", where, MaxLogRate)
		}
	case TokenBucket:
		if l.Burst < 0 || l.Burst > MaxRate {
			return fmt.Errorf("%s: burst must be between 1 and %d (0 means the rate)", where, MaxRate)
		}
		if l.Burst == 0 {
			l.Burst = l.Rate
		}
		// The emission interval, rounded up so the rate is never exceeded.
		interval := (period + l.Rate - 1) / l.Rate
		if l.Burst > MaxSpan.Microseconds()/interval {
			return fmt.Errorf("%s: burst %d × emission interval %dµs is longer than %s (%.0f years), past which stored times would lose precision",
				where, l.Burst, interval, MaxSpan, MaxSpan.Hours()/24/365.25)
		}
	}
	return nil
}

// checkSlots validates l, a Concurrent limit after the limits before, and
// fills in its lease (DefaultLease when 0).
func checkSlots(before []Limit, l *Limit, where string) error {
	if l.Rate < 1 || l.Rate > MaxRate {
		return fmt.Errorf("%s: the requests in flight must be between 1 and %d", where, MaxRate)
	}
	if l.Period == 0 {
		l.Period = DefaultLease
	}
	if l.Period < time.Second || l.Period > MaxPeriod || l.Period%time.Second != 0 {
		return fmt.Errorf("%s: lease %s: want a whole number of seconds from 1s to %s", where, l.Period, MaxPeriod)
	}
	if l.Precision != 0 || l.Burst != 0 {
		return fmt.Errorf("%s: precision and burst do not apply to a concurrent limit", where)
	}
	for j := range before {
		if before[j].Concurrent {
			return fmt.Errorf("%s: limit %d is concurrent too; a policy has at most one", where, j+1)
		}
	}
	return nil
}

// limitName fills in l's default name and checks it against the names of
// the limits before it (names, by index).
func limitName(l *Limit, names map[string]int, i int, policy, where string) error {
	if l.Name == "" {
		l.Name = policy + "-" + FormatPeriod(l.Period)
		if l.Concurrent {
			l.Name = policy + "-concurrent"
		}
	}
	if err := validName(l.Name); err != nil {
		return fmt.Errorf("%s: name %q: %w", where, l.Name, err)
	}
	if j, dup := names[l.Name]; dup {
		return fmt.Errorf("%s: duplicate name %q, limit %d has it too", where, l.Name, j+1)
	}
	names[l.Name] = i
	return nil
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

// Algorithm returns the policy's algorithm.
func (p *Policy) Algorithm() Algorithm { return p.algorithm }

// Limits returns a copy of the policy's limits, with defaults filled in
// (Precision, Burst, a Concurrent limit's lease and Name as used).
func (p *Policy) Limits() []Limit {
	out := make([]Limit, len(p.limits))
	copy(out, p.limits)
	return out
}

// ID returns the identity of the policy's counters in a store: the name
// and a fingerprint of how they are laid out. Two policies with the same
// ID share counters, each checking them against its own limits. A policy
// that differs from another of its name only in the Rate of its limits
// (and a TokenBucket's Burst, a Concurrent limit's slots) shares its ID,
// so changing a rate (a plan change, a rolling deploy) keeps what was
// used: the new rate applies to it, up or down. (A token bucket's debt
// drains at the rate of the policy that last charged it.) Any other
// change starts the new policy with fresh counters: an algorithm, a
// period, a precision, a penalty, a SlidingWindow's rate across
// ExactRateMax (a log up to it, sub-buckets above), or leasing turned on
// or off (WithLease; its chunk and hold are not in the ID).
func (p *Policy) ID() string { return p.id }

// MaxCost returns the largest cost a single request can ever be admitted
// with: the smallest Rate (Burst for the token bucket) of the policy; of
// a leased token bucket, its Burst less the hold's tokens (WithLease).
func (p *Policy) MaxCost() int64 {
	if p.lease != nil {
		return p.lease.maxCost
	}
	return p.minRate
}

// BlockFor returns the policy's penalty: how long a key stays denied once
// a request for it was denied (0: none). See the BlockFor option.
func (p *Policy) BlockFor() time.Duration { return p.block }

// Lease returns the policy's WithLease terms: 0 and 0 when it is not
// leased.
func (p *Policy) Lease() (chunk int64, hold time.Duration) {
	if p.lease == nil {
		return 0, 0
	}
	return p.lease.terms.chunk, p.lease.terms.hold
}

// String returns the policy in ParsePolicy syntax, e.g. "10/s, 120/m".
func (p *Policy) String() string {
	var b strings.Builder
	for i, l := range p.limits {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(l.Rate, 10))
		if l.Concurrent {
			b.WriteString(" concurrent")
			if l.Period != DefaultLease {
				b.WriteString(" lease " + FormatPeriod(l.Period))
			}
			continue
		}
		b.WriteByte('/')
		b.WriteString(FormatPeriod(l.Period))
	}
	return b.String()
}

// gcd is the greatest common divisor of two positive numbers.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
