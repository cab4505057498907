package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// Bounds enforced by NewPolicy and ParsePolicy keep every number the
// stores compute (in microseconds) exactly representable in the 53-bit
// integers of Redis Lua, and every policy small enough for one Redis hash.

// MaxRate is the largest Rate (and Burst) a Limit may have.
const MaxRate = 1_000_000_000

// MinPeriod is the shortest Period a Limit may have.
const MinPeriod = time.Millisecond

// MaxPeriod is the longest Period a Limit may have (366 days).
const MaxPeriod = 366 * 24 * time.Hour

// MaxPrecision is the largest number of sliding-window sub-buckets per limit.
const MaxPrecision = 120

// MaxLimits is the largest number of limits in one Policy.
const MaxLimits = 8

// DefaultPrecision is the number of sub-buckets of a SlidingWindow limit
// that is not counted exactly (Rate above ExactRateMax) and has no
// Precision set. A sub-bucket's cost leaves the window one Period after
// its latest admission, so a client always at the limit, whose admissions
// spread over each sub-bucket, is admitted at least Precision/(Precision+1)
// of the rate: twenty keep that at 95% or more (ten gave 90.9%), while the
// three-limit policy "10/s, 120/m, 240/h" stays under 1 KB of Redis memory
// per identity with every sub-bucket written (see docs/algorithms.md).
const DefaultPrecision = 20

// ExactRateMax is the largest Rate a SlidingWindow limit with Precision
// 0 counts exactly, by a log of its last Rate units (16 bytes each in
// Redis).
const ExactRateMax = 32

// MaxLogRate is the largest Rate of a SlidingLog limit: its log takes
// about 22 bytes of Redis memory per unit of Rate (22 KB at 1000).
const MaxLogRate = 1000

// MinApproxRate is the smallest Rate of a SlidingWindowApprox limit New
// accepts for a Limiter. The estimate keeps about one unit of the previous
// window counted until the window ends, so a steady client loses about one
// unit per Period: below 30, more than 5% of the rate it was promised.
// SlidingWindow counts such rates exactly at the same cost. (Stores take
// any rate: the bound is the HTTP promise's.)
const MinApproxRate = 30

// MaxSpan bounds how far ahead of now a store may have to remember a
// time: a token bucket's Burst × emission interval, a penalty
// (BlockFor) and a reservation (Limiter.Wait) each stay within it. The
// furthest a store computes ahead of its clock is a reservation of
// MaxSpan on a bucket of MaxSpan, kept a quarter of that longer (2.25 ×
// MaxSpan), so every time the stores compute in microseconds stays below
// 2^53 (exact in the doubles of Redis Lua) while the clock reads before
// 2^53 − 2.25 × 2^50 µs after the Unix epoch: February 2175.
const MaxSpan = time.Duration(layout.MaxSpanUS) * time.Microsecond

// Limit is one rule of a Policy: at most Rate units of cost per Period.
type Limit struct {
	// Rate is the cost admitted per Period. It must be in [1, MaxRate]
	// (MaxLogRate for SlidingLog).
	Rate int64
	// Period is the length of the window. It must be in [MinPeriod,
	// MaxPeriod] and a whole number of microseconds.
	Period time.Duration
	// Precision is the number of sub-buckets of a SlidingWindow limit, at
	// most MaxPrecision; the other algorithms want 0. 0 means: counted
	// exactly when Rate ≤ ExactRateMax (Precision stays 0), else
	// DefaultPrecision. Period must divide into Precision sub-buckets of a
	// whole number of microseconds, each at least 1ms long; when the default
	// does not fit a short period, the largest precision ≤ DefaultPrecision
	// that fits is used.
	Precision int
	// Burst is the token bucket's capacity, at most MaxRate; the other
	// algorithms want 0. 0 means Burst = Rate.
	Burst int64
	// Name labels the limit in the RateLimit headers. Empty means the
	// policy's name and the period, e.g. "default-1m" ("default-concurrent"
	// for a Concurrent limit).
	Name string
	// Concurrent makes the limit one of requests in flight (see
	// Concurrent): at most Rate at once, whatever the algorithm; Period
	// is then the lease of a slot (DefaultLease when 0), and Precision and
	// Burst must be 0.
	Concurrent bool
}

// PerSecond returns a Limit of rate per second.
func PerSecond(rate int64) Limit { return Limit{Rate: rate, Period: time.Second} }

// PerMinute returns a Limit of rate per minute.
func PerMinute(rate int64) Limit { return Limit{Rate: rate, Period: time.Minute} }

// PerHour returns a Limit of rate per hour.
func PerHour(rate int64) Limit { return Limit{Rate: rate, Period: time.Hour} }

// PerDay returns a Limit of rate per 24 hours.
func PerDay(rate int64) Limit { return Limit{Rate: rate, Period: 24 * time.Hour} }

// Policy is a named set of limits counted with one Algorithm. A request is
// admitted only if every limit has room for its cost. Build one with
// NewPolicy or ParsePolicy; a Policy is immutable and safe for concurrent
// use, so build it once and share it; With copies it under another name
// or penalty.
type Policy struct {
	name      string
	algorithm Algorithm
	limits    []Limit       // with defaults filled in
	given     []Limit       // as given to newPolicy, for With
	block     time.Duration // BlockFor; 0: none
	// id identifies the policy's counters in a store: its name and a
	// fingerprint of what lays them out (see newPolicy), so that a changed
	// rate keeps the counters where their layout allows and a changed
	// layout never reads counters laid out for another.
	id string
	// def is the name and a fingerprint of the whole definition, rates
	// included: what a cached answer must match (store/denycache).
	def string
	// layout is how the stores count the policy (internal/layout).
	layout  *layout.Policy
	header  string // the RateLimit-Policy value, built once
	minRate int64  // smallest capacity of any limit (Rate, or Burst for TokenBucket)
	// lease is how a Limiter leases the policy's quota (WithLease); nil
	// when it asks the store for every request.
	lease *leasing
}

// DefaultPolicyName is the name of a policy built without a name.
const DefaultPolicyName = "default"

// NewPolicy validates limits and returns a Policy. name labels the policy in
// headers and store keys: 1 to 64 characters from [A-Za-z0-9_.-]; empty
// means DefaultPolicyName. Errors say which limit is wrong and why. For a
// penalty after a denial, use p.With(BlockFor(d)).
func NewPolicy(name string, alg Algorithm, limits ...Limit) (*Policy, error) {
	p, err := newPolicy(name, alg, limits, 0)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return p, nil
}

func newPolicy(name string, alg Algorithm, limits []Limit, block time.Duration) (*Policy, error) {
	return buildPolicy(name, alg, limits, block, nil)
}

// buildPolicy is newPolicy for a policy's own counters (lease nil) or for
// the counters of its leases (lease.go): those are apart from the
// policy's own (the stores keep places in line ahead for them), but the
// same whatever the lease's terms, which only the definition's
// fingerprint covers: a chunk or a hold changed keeps the counters.
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
	// The ID's fingerprint (fp) covers everything that decides how the
	// counters are laid out and what they mean: the algorithm, the
	// penalty and each limit's period, kind and sub-buckets, and the
	// layout version, which changes whenever the stores lay counters out
	// differently, so an upgraded library never reads an older layout.
	// It leaves out a Rate whose counts mean the same under any rate (a
	// window's or a sub-bucket's cost): policies that differ only there
	// share their counters, and each checks them against its own rates.
	// A log's rate is left out too: its ring holds Rate times, and a
	// policy of another rate lays it out anew for its own (keeping the
	// newest times, which is exact: see internal/layout's LogPointerBase).
	// A token bucket's rate and burst are left out too: its TAT carries
	// the emission interval it was written in, which drains it until a
	// charge rewrites it in the charging policy's (internal/layout's
	// TokenTAT), and each policy checks it against its own burst. The
	// definition's fingerprint (df) covers every number.
	fp, df := sha256.New(), sha256.New()
	fmt.Fprintf(fp, "layout%d|%d|%d", layout.Version, alg, block.Microseconds())
	fmt.Fprintf(df, "layout%d|%d|%d", layout.Version, alg, block.Microseconds())
	if lease != nil {
		fmt.Fprint(fp, "|lease")
		fmt.Fprintf(df, "|lease%d/%d", lease.chunk, lease.hold.Microseconds())
	}
	lay := make([]layout.Limit, len(limits))
	for i := range p.limits {
		l := &p.limits[i]
		if l.Concurrent {
			if err := slotLimit(p, l, i, fp, df, &lay[i]); err != nil {
				return nil, err
			}
			if err := limitName(l, names, i, name, fmt.Sprintf("policy %q: limit %d (%d concurrent)", name, i+1, l.Rate)); err != nil {
				return nil, err
			}
			continue
		}
		where := fmt.Sprintf("policy %q: limit %d (%d/%s)", name, i+1, l.Rate, l.Period)
		if l.Rate < 1 || l.Rate > MaxRate {
			return nil, fmt.Errorf("%s: rate must be between 1 and %d", where, MaxRate)
		}
		if l.Period < MinPeriod || l.Period > MaxPeriod {
			return nil, fmt.Errorf("%s: period must be between %s and %s", where, MinPeriod, MaxPeriod)
		}
		if l.Period%time.Microsecond != 0 {
			return nil, fmt.Errorf("%s: period must be a whole number of microseconds", where)
		}
		if l.Period > time.Second && l.Period%time.Second != 0 {
			k := int64(time.Second) / gcd(int64(l.Period), int64(time.Second))
			return nil, fmt.Errorf("%s: a period above one second must be a whole number of seconds, as Retry-After and the RateLimit headers count whole seconds (a client would wait up to a second too long each time); use %d/%s for the same rate", where, k*l.Rate, FormatPeriod(time.Duration(k)*l.Period))
		}
		if j, dup := seen[l.Period]; dup {
			return nil, fmt.Errorf("%s: duplicate period, limit %d has it too", where, j+1)
		}
		seen[l.Period] = i
		period := l.Period.Microseconds()
		burst, buckets, width := int64(0), int64(1), period
		if alg != TokenBucket && l.Burst != 0 {
			return nil, fmt.Errorf("%s: burst applies to the token bucket only", where)
		}
		if alg != SlidingWindow && l.Precision != 0 {
			return nil, fmt.Errorf("%s: precision applies to the sliding window only", where)
		}
		var counter layout.Kind
		switch alg {
		case SlidingWindow:
			n := int64(l.Precision)
			if n < 0 || n > MaxPrecision {
				return nil, fmt.Errorf("%s: precision %d must be between 1 and %d (0 for the default)", where, n, MaxPrecision)
			}
			if n == 0 && l.Rate <= ExactRateMax {
				counter = layout.Log
				break
			}
			if n == 0 {
				n = DefaultPrecision
				for n > 1 && (period%n != 0 || period/n < 1000) {
					n--
				}
			}
			if period%n != 0 {
				return nil, fmt.Errorf("%s: precision %d does not divide the period into whole microseconds", where, n)
			}
			if period/n < 1000 {
				return nil, fmt.Errorf("%s: precision %d makes sub-buckets shorter than 1ms", where, n)
			}
			l.Precision = int(n)
			counter, buckets, width = layout.Buckets, n, period/n
		case SlidingLog:
			if l.Rate > MaxLogRate {
				return nil, fmt.Errorf("%s: the sliding log keeps one time per unit of rate, so its rate must be at most %d (use SlidingWindow above that)", where, MaxLogRate)
			}
			counter = layout.Log
		case FixedWindow:
			counter = layout.Fixed
		case SlidingWindowApprox:
			counter = layout.Approx
		case TokenBucket:
			if l.Burst < 0 || l.Burst > MaxRate {
				return nil, fmt.Errorf("%s: burst must be between 1 and %d (0 means the rate)", where, MaxRate)
			}
			if l.Burst == 0 {
				l.Burst = l.Rate
			}
			burst = l.Burst
			// Emission interval, rounded up so the rate is never exceeded.
			width = (period + l.Rate - 1) / l.Rate
			if burst > MaxSpan.Microseconds()/width {
				return nil, fmt.Errorf("%s: burst %d × emission interval %dµs is longer than %s (%.0f years), past which stored times would lose precision",
					where, burst, width, MaxSpan, MaxSpan.Hours()/24/365.25)
			}
			counter = layout.Token
		}
		if err := limitName(l, names, i, name, where); err != nil {
			return nil, err
		}
		capacity := l.Rate
		if alg == TokenBucket {
			capacity = burst
		}
		if p.minRate == 0 || capacity < p.minRate {
			p.minRate = capacity
		}
		lay[i] = layout.Limit{Kind: counter, Capacity: capacity, Width: width, N: buckets, Period: period}
		if counter == layout.Log {
			// The largest log a policy of this ID can have: a SlidingWindow
			// keeps a log up to ExactRateMax, a SlidingLog up to MaxLogRate.
			lay[i].MaxCapacity = ExactRateMax
			if alg == SlidingLog {
				lay[i].MaxCapacity = MaxLogRate
			}
		}
		fmt.Fprintf(df, "|%d/%d/%d/%d/%d", l.Rate, period, counter, buckets, burst)
		fmt.Fprintf(fp, "|%d/%d/%d", period, counter, buckets)
	}
	if p.minRate == 0 {
		p.minRate = MaxRate // only Concurrent limits: they count requests, not cost
	}
	p.layout = layout.Compile(lay, block.Microseconds(), ExactRateMax)
	if lease != nil {
		// Leases are places in line never waited for: no reservations.
		p.layout.Reserves, p.layout.Pending = false, true
	}
	p.id = name + ":" + hex.EncodeToString(fp.Sum(nil)[:8])
	p.def = name + ":" + hex.EncodeToString(df.Sum(nil)[:8])
	p.header = string(appendPolicyHeader(nil, p.limits, alg == TokenBucket))
	return p, nil
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
// (Precision, Burst and Name as used).
func (p *Policy) Limits() []Limit {
	out := make([]Limit, len(p.limits))
	copy(out, p.limits)
	return out
}

// NumLimits returns the number of limits in the policy.
func (p *Policy) NumLimits() int { return len(p.limits) }

// Limit returns the i-th limit (0-based), with defaults filled in.
func (p *Policy) Limit(i int) Limit { return p.limits[i] }

// ID returns the identity of the policy's counters in a store: the name
// and a fingerprint of how they are laid out. Two policies with the same
// ID share counters, each checking them against its own limits. A policy
// that differs from another of its name only in the Rate of its limits
// (and a TokenBucket's Burst) shares its ID, so changing a rate (a plan
// change, a rolling deploy) keeps what was used: the new rate applies to
// it, up or down. (A token bucket's debt drains at the rate of the policy
// that last charged it.) Any other change starts the new policy with
// fresh counters: an algorithm, a period, a precision, a penalty, or a
// SlidingWindow's rate across ExactRateMax (a log up to it, sub-buckets
// above).
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

// TTL returns how long a store must keep an identity's counters after its
// last write: after that, every limit has forgotten it and any penalty
// (BlockFor) is over. It is a whole number of milliseconds, rounded up.
func (p *Policy) TTL() time.Duration { return time.Duration(p.layout.TTLMS) * time.Millisecond }

// MaxPeriod returns the longest Period of the policy's limits.
func (p *Policy) MaxPeriod() time.Duration { return time.Duration(p.layout.IDTTL) * time.Microsecond }

// BlockFor returns the policy's penalty: how long a key stays denied once
// a request for it was denied (0: none). See the BlockFor option.
func (p *Policy) BlockFor() time.Duration { return p.block }

// Reserves reports whether stores can reserve a place in line under p
// (Reserver, Limiter.Wait): every limit is counted by an exact log
// (SlidingLog; SlidingWindow limits up to ExactRateMax) or by the token
// bucket, which can record an admission in the future.
func (p *Policy) Reserves() bool { return p.layout.Reserves }

// With returns a copy of p with opts applied, as ParsePolicy applies them:
// Named gives the copy another name (limits named by default take the new
// name: "api-1m" becomes "login-1m"; limits named in their Limit keep
// theirs), BlockFor another penalty, WithLease other lease terms (the
// copy keeps p's otherwise; WithLease(0, 0) turns leasing off). The copy's ID follows its
// definition: it differs from p's, so the two never share counters,
// unless the options give back p's own name and penalty. The options that
// change how the limits are counted (WithAlgorithm, WithPrecision,
// WithBurst) apply only when a policy is built: With returns an error for
// them, as for a nil option or an invalid value.
func (p *Policy) With(opts ...PolicyOption) (*Policy, error) {
	if p == nil {
		return nil, errors.New("ratelimit: Policy.With: nil policy")
	}
	c := policyConfig{name: p.name, block: p.block}
	if err := c.apply("Policy.With", opts); err != nil {
		return nil, err
	}
	for _, o := range [...]struct {
		set  policyFields
		name string
	}{{setAlgorithm, "WithAlgorithm"}, {setPrecision, "WithPrecision"}, {setBurst, "WithBurst"}} {
		if c.set&o.set != 0 {
			return nil, fmt.Errorf("ratelimit: Policy.With: %s changes how the limits are counted: build another policy with NewPolicy or ParsePolicy", o.name)
		}
	}
	q, err := newPolicy(c.name, p.algorithm, p.given, c.block)
	if err == nil && c.set&setLease != 0 {
		err = q.leased(c.lease)
	} else if err == nil && p.lease != nil {
		err = q.leased(p.lease.terms)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return q, nil
}

// gcd is the greatest common divisor of two positive numbers.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
