package ratelimit

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Algorithm selects how a Policy counts. The zero value is SlidingWindow.
type Algorithm uint8

const (
	// SlidingWindow divides each limit's Period into Precision sub-buckets and
	// admits a request only if the cost already admitted in the current
	// sub-bucket and the Precision sub-buckets before it, plus the request's
	// cost, fits in Rate. Guarantee: in ANY interval of length Period the
	// admitted cost is at most Rate; it never over-admits. It may
	// under-admit: the counted span is up to one sub-bucket (Period/Precision)
	// longer than Period, so a client may wait up to one sub-bucket longer than
	// an exact sliding log would make it wait.
	SlidingWindow Algorithm = iota

	// FixedWindow counts cost per aligned window [n·Period, (n+1)·Period).
	// Guarantee: at most Rate per aligned window. Known edge: a client can
	// spend Rate at the end of one window and Rate again at the start of the
	// next, so an unaligned interval of length Period may see up to 2·Rate.
	// It is the cheapest algorithm (one counter per limit).
	FixedWindow

	// TokenBucket is the generic cell rate algorithm (GCRA): tokens refill
	// one every Period/Rate (the emission interval, rounded up to the
	// microsecond), up to Burst tokens. Guarantee: in any interval of length
	// d the admitted cost is at most Burst + d/(emission interval); over a
	// long run the rate is exactly Rate per Period (never more). With the
	// default Burst = Rate, a full bucket may spend Rate at once and then
	// refills smoothly, so an interval of length Period may see up to 2·Rate.
	TokenBucket
)

// String returns the algorithm's name as used by ParsePolicy options and logs.
func (a Algorithm) String() string {
	switch a {
	case SlidingWindow:
		return "sliding-window"
	case FixedWindow:
		return "fixed-window"
	case TokenBucket:
		return "token-bucket"
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Bounds enforced by NewPolicy and ParsePolicy. They keep every number the
// stores compute (in microseconds) exactly representable in the 53-bit
// integers of Redis Lua, and every policy small enough for one Redis hash.
const (
	// MaxRate is the largest Rate (and Burst) a Limit may have.
	MaxRate = 1_000_000_000
	// MinPeriod is the shortest Period a Limit may have.
	MinPeriod = time.Millisecond
	// MaxPeriod is the longest Period a Limit may have (366 days).
	MaxPeriod = 366 * 24 * time.Hour
	// MaxPrecision is the largest number of sliding-window sub-buckets per limit.
	MaxPrecision = 120
	// MaxLimits is the largest number of limits in one Policy.
	MaxLimits = 8
	// DefaultPrecision is the number of sliding-window sub-buckets per limit
	// when Limit.Precision is 0. Ten sub-buckets bound the under-admission to
	// a tenth of the period while the three-limit policy "10/s, 120/m, 240/h"
	// costs well under 1 KB of Redis memory per identity (see README).
	DefaultPrecision = 10
)

// Limit is one rule of a Policy: at most Rate units of cost per Period.
type Limit struct {
	// Rate is the cost admitted per Period. It must be in [1, MaxRate].
	Rate int64
	// Period is the length of the window. It must be in [MinPeriod,
	// MaxPeriod] and a whole number of microseconds.
	Period time.Duration
	// Precision is the number of sub-buckets of the sliding window (ignored
	// by the other algorithms). 0 means DefaultPrecision. Period must divide
	// into Precision sub-buckets of a whole number of microseconds, each at
	// least 1ms long; when the default does not fit a short period, the
	// largest precision ≤ DefaultPrecision that fits is used.
	Precision int
	// Burst is the token bucket's capacity (ignored by the other
	// algorithms). 0 means Burst = Rate.
	Burst int64
	// Name labels the limit in the RateLimit headers. Empty means the
	// policy's name and the period, e.g. "default-1m".
	Name string
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
// use, so build it once and share it.
type Policy struct {
	name      string
	algorithm Algorithm
	limits    []Limit
	// id identifies the policy's counters in a store: its name and a
	// fingerprint of its algorithm and limits, so that a changed definition
	// never reads counters laid out for another.
	id string
	// Precomputed per-limit figures in microseconds, used by the stores.
	periodUS []int64 // Period
	bucketUS []int64 // sliding: Period/Precision; fixed: Period; token: emission interval
	buckets  []int64 // sliding: Precision; others: 1
	burst    []int64 // token bucket capacity
	ttlMS    int64   // how long counters must outlive their last write
	header   string  // the RateLimit-Policy value, built once
	minRate  int64   // smallest capacity of any limit (Rate, or Burst for TokenBucket)
}

// maxExact is 2^53: the stores' numbers (µs) must stay below it, where the
// doubles of Redis Lua are exact.
const maxExact = 1 << 53

// storeLayout is the version of the stores' counter layout (see
// store/algorithm.go); it is part of every policy's ID.
const storeLayout = 2

// DefaultPolicyName is the name of a policy built without a name.
const DefaultPolicyName = "default"

// NewPolicy validates limits and returns a Policy. name labels the policy in
// headers and store keys: 1 to 64 characters from [A-Za-z0-9_.-]; empty
// means DefaultPolicyName. Errors say which limit is wrong and why.
func NewPolicy(name string, alg Algorithm, limits ...Limit) (*Policy, error) {
	p, err := newPolicy(name, alg, limits)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return p, nil
}

func newPolicy(name string, alg Algorithm, limits []Limit) (*Policy, error) {
	if name == "" {
		name = DefaultPolicyName
	}
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("policy name %q: %w", name, err)
	}
	if alg > TokenBucket {
		return nil, fmt.Errorf("policy %q: unknown algorithm %d", name, alg)
	}
	if len(limits) == 0 {
		return nil, fmt.Errorf("policy %q: no limits", name)
	}
	if len(limits) > MaxLimits {
		return nil, fmt.Errorf("policy %q: %d limits, at most %d allowed", name, len(limits), MaxLimits)
	}
	p := &Policy{name: name, algorithm: alg, limits: make([]Limit, len(limits))}
	copy(p.limits, limits)
	seen := make(map[time.Duration]int, len(limits))
	names := make(map[string]int, len(limits))
	fp := fnv.New64a()
	// The layout version changes whenever the stores lay counters out
	// differently, so an upgraded library never reads an older layout.
	fmt.Fprintf(fp, "layout%d|%d", storeLayout, alg)
	for i := range p.limits {
		l := &p.limits[i]
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
		if j, dup := seen[l.Period]; dup {
			return nil, fmt.Errorf("%s: duplicate period, limit %d has it too", where, j+1)
		}
		seen[l.Period] = i
		period := l.Period.Microseconds()
		burst, buckets, width := int64(0), int64(1), period
		switch alg {
		case SlidingWindow:
			if l.Burst != 0 {
				return nil, fmt.Errorf("%s: burst applies to the token bucket only", where)
			}
			n := int64(l.Precision)
			if n < 0 || n > MaxPrecision {
				return nil, fmt.Errorf("%s: precision %d must be between 1 and %d (0 for the default)", where, n, MaxPrecision)
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
			buckets, width = n, period/n
		case FixedWindow, TokenBucket:
			if l.Precision != 0 {
				return nil, fmt.Errorf("%s: precision applies to the sliding window only", where)
			}
			if alg == FixedWindow {
				if l.Burst != 0 {
					return nil, fmt.Errorf("%s: burst applies to the token bucket only", where)
				}
				break
			}
			if l.Burst < 0 || l.Burst > MaxRate {
				return nil, fmt.Errorf("%s: burst must be between 1 and %d (0 means the rate)", where, MaxRate)
			}
			if l.Burst == 0 {
				l.Burst = l.Rate
			}
			burst = l.Burst
			// Emission interval, rounded up so the rate is never exceeded.
			width = (period + l.Rate - 1) / l.Rate
			if burst > maxExact/width {
				return nil, fmt.Errorf("%s: burst %d × emission interval %dµs is too long (over 285 years)", where, burst, width)
			}
		}
		if l.Name == "" {
			l.Name = name + "-" + FormatPeriod(l.Period)
		}
		if err := validName(l.Name); err != nil {
			return nil, fmt.Errorf("%s: name %q: %w", where, l.Name, err)
		}
		if j, dup := names[l.Name]; dup {
			return nil, fmt.Errorf("%s: duplicate name %q, limit %d has it too", where, l.Name, j+1)
		}
		names[l.Name] = i
		capacity := l.Rate
		if alg == TokenBucket {
			capacity = burst
		}
		if p.minRate == 0 || capacity < p.minRate {
			p.minRate = capacity
		}
		p.periodUS = append(p.periodUS, period)
		p.bucketUS = append(p.bucketUS, width)
		p.buckets = append(p.buckets, buckets)
		p.burst = append(p.burst, burst)
		ttl := period + width // sliding window: the extra sub-bucket
		switch alg {
		case FixedWindow:
			ttl = period // a window's count matters until the window ends
		case TokenBucket:
			ttl = width * burst
		}
		if ms := (ttl + 999) / 1000; ms > p.ttlMS {
			p.ttlMS = ms
		}
		fmt.Fprintf(fp, "|%d/%d/%d/%d", l.Rate, period, buckets, burst)
	}
	h := fp.Sum64()
	p.id = fmt.Sprintf("%s:%08x", name, uint32(h^h>>32))
	p.header = string(appendPolicyHeader(nil, p.limits, alg == TokenBucket))
	return p, nil
}

// validName reports why s cannot be a policy or limit name, or nil.
func validName(s string) error {
	if len(s) == 0 || len(s) > 64 {
		return errors.New("must be 1 to 64 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("character %q at offset %d is not one of [A-Za-z0-9_.-]", c, i)
		}
	}
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
// and a fingerprint of the algorithm and limits. Two policies with the same
// ID share counters; changing a policy's limits changes its ID.
func (p *Policy) ID() string { return p.id }

// MaxCost returns the largest cost a single request can ever be admitted
// with: the smallest Rate (Burst for the token bucket) of the policy.
func (p *Policy) MaxCost() int64 { return p.minRate }

// String returns the policy in ParsePolicy syntax, e.g. "10/s, 120/m".
func (p *Policy) String() string {
	var b strings.Builder
	for i, l := range p.limits {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatInt(l.Rate, 10))
		b.WriteByte('/')
		b.WriteString(FormatPeriod(l.Period))
	}
	return b.String()
}

// Compiled returns per-limit figures the stores need, in microseconds:
// the period, the sub-bucket width (sliding window), window (fixed window)
// or emission interval (token bucket), the number of sub-buckets, and the
// token bucket's burst. Store implementations use it; the slices must not
// be modified.
func (p *Policy) Compiled() (periodUS, widthUS, buckets, burst []int64) {
	return p.periodUS, p.bucketUS, p.buckets, p.burst
}

// TTL returns how long a store must keep an identity's counters after its
// last charge: after that, every limit has forgotten it.
func (p *Policy) TTL() time.Duration { return time.Duration(p.ttlMS) * time.Millisecond }

// FormatPeriod writes d compactly: "1s", "1m", "1h", "1d", "500ms", "90s".
func FormatPeriod(d time.Duration) string {
	units := []struct {
		d      time.Duration
		suffix string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}}
	for _, u := range units {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.suffix
		}
	}
	return d.String()
}

// PolicyOption adjusts a policy built by ParsePolicy.
type PolicyOption func(*policyConfig)

type policyConfig struct {
	name      string
	algorithm Algorithm
	precision int
	burst     int64
}

// Named sets the policy's name (default DefaultPolicyName).
func Named(name string) PolicyOption { return func(c *policyConfig) { c.name = name } }

// WithAlgorithm sets the policy's algorithm (default SlidingWindow).
func WithAlgorithm(a Algorithm) PolicyOption { return func(c *policyConfig) { c.algorithm = a } }

// WithPrecision sets the sliding-window sub-buckets of every limit
// (default DefaultPrecision).
func WithPrecision(n int) PolicyOption { return func(c *policyConfig) { c.precision = n } }

// WithBurst sets the token-bucket burst of every limit, in tokens (units
// of cost). The default, 0, means each limit's Rate.
func WithBurst(n int64) PolicyOption { return func(c *policyConfig) { c.burst = n } }

// ParsePolicy parses a list of limits such as "10/s, 120/m, 240/h",
// "10/second;120/minute" or "1000/24h". Limits are separated by commas or
// semicolons; each is RATE/PERIOD, where PERIOD is a unit (ms, s, sec,
// second, m, min, minute, h, hr, hour, d, day, each optionally plural) with
// an optional leading count ("15m", "24h"), or a Go duration ("1m30s").
// Errors name the offending limit and its position.
func ParsePolicy(s string, opts ...PolicyOption) (*Policy, error) {
	var c policyConfig
	for _, o := range opts {
		o(&c)
	}
	if len(s) > 4096 {
		return nil, fmt.Errorf("ratelimit: parse policy: %d bytes is too long", len(s))
	}
	var parts []string
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' }) {
		if strings.TrimSpace(part) != "" {
			parts = append(parts, part) // blank parts ("10/s, ") are skipped
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("ratelimit: parse policy %q: no limits", s)
	}
	limits := make([]Limit, 0, len(parts))
	for i, part := range parts {
		l, err := parseLimit(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("ratelimit: parse policy %q: limit %d %q: %w", s, i+1, strings.TrimSpace(part), err)
		}
		if c.algorithm == SlidingWindow {
			l.Precision = c.precision
		}
		if c.algorithm == TokenBucket {
			l.Burst = c.burst
		}
		limits = append(limits, l)
	}
	p, err := newPolicy(c.name, c.algorithm, limits)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: parse policy %q: %w", s, err)
	}
	return p, nil
}

// MustParsePolicy is like ParsePolicy but panics on error. Use it for
// policies written in the program, never for input.
func MustParsePolicy(s string, opts ...PolicyOption) *Policy {
	p, err := ParsePolicy(s, opts...)
	if err != nil {
		panic(err)
	}
	return p
}

var unitNames = map[string]time.Duration{
	"us": time.Microsecond, "µs": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond, "millisecond": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

func parseLimit(s string) (Limit, error) {
	rateText, periodText, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, errors.New(`want RATE/PERIOD, e.g. "10/s"`)
	}
	rateText, periodText = strings.TrimSpace(rateText), strings.TrimSpace(periodText)
	rate, err := strconv.ParseInt(rateText, 10, 64)
	if err != nil || rate < 1 {
		return Limit{}, fmt.Errorf("rate %q is not a positive whole number", rateText)
	}
	if rate > MaxRate {
		return Limit{}, fmt.Errorf("rate %d is above the maximum %d", rate, MaxRate)
	}
	period, err := parsePeriod(periodText)
	if err != nil {
		return Limit{}, err
	}
	return Limit{Rate: rate, Period: period}, nil
}

func parsePeriod(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("missing period")
	}
	// Split a leading count from the unit: "15m", "24h", "2 hours".
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	count := int64(1)
	if i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n < 1 || n > 1_000_000 {
			return 0, fmt.Errorf("period count %q is not a whole number from 1 to 1000000", s[:i])
		}
		count = n
	}
	unit := strings.ToLower(strings.TrimSpace(s[i:]))
	d, ok := unitNames[unit]
	if !ok && len(unit) > 1 && strings.HasSuffix(unit, "s") {
		d, ok = unitNames[strings.TrimSuffix(unit, "s")]
	}
	if ok {
		if count > int64(MaxPeriod/d) {
			return 0, fmt.Errorf("period %q is longer than the maximum %s", s, MaxPeriod)
		}
		return time.Duration(count) * d, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("period %q: unknown unit (want ms, s, m, h, d, or a duration like 1m30s)", s)
}
