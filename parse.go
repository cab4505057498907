package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PolicyOption adjusts a policy built by ParsePolicy. Named and BlockFor
// also adjust a copy of a built policy (Policy.With).
type PolicyOption func(*policyConfig)

type policyConfig struct {
	name      string
	algorithm Algorithm
	precision int
	burst     int64
	block     time.Duration
	lease     leaseTerms
	set       policyFields // the options given
}

// policyFields names the fields of a policyConfig an option sets.
type policyFields uint8

const (
	setName policyFields = 1 << iota
	setBlock
	setAlgorithm
	setPrecision
	setBurst
	setLease
)

// applyAll applies opts in order; a nil option is an error.
func (c *policyConfig) applyAll(fn string, opts []PolicyOption) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("ratelimit: %s: option %d is nil", fn, i)
		}
		o(c)
	}
	return nil
}

// Named sets the policy's name (default DefaultPolicyName).
func Named(name string) PolicyOption {
	return func(c *policyConfig) { c.name, c.set = name, c.set|setName }
}

// BlockFor sets a penalty: once a request for a key is denied because a
// limit has no room (not because its cost can never fit), the key stays
// denied for d, under every limit of the policy: Retry-After and the
// RateLimit header's t say so. The block is decided in the same store call
// as the denial and lives with the key's counters, so it expires by itself;
// a Reset of the key lifts it. A blocked request charges nothing. d must be
// a whole number of microseconds up to MaxSpan; 0 (the default) means no
// penalty. A block changes the policy's ID: the same limits with and
// without a block never share counters. For a policy built with
// NewPolicy, use p.With(BlockFor(d)).
func BlockFor(d time.Duration) PolicyOption {
	return func(c *policyConfig) { c.block, c.set = d, c.set|setBlock }
}

// WithAlgorithm sets the policy's algorithm (default SlidingWindow).
func WithAlgorithm(a Algorithm) PolicyOption {
	return func(c *policyConfig) { c.algorithm, c.set = a, c.set|setAlgorithm }
}

// WithPrecision sets the sliding-window sub-buckets of every limit
// (default: exact up to ExactRateMax, else DefaultPrecision).
func WithPrecision(n int) PolicyOption {
	return func(c *policyConfig) { c.precision, c.set = n, c.set|setPrecision }
}

// WithBurst sets the token-bucket burst of every limit, in tokens (units
// of cost). The default, 0, means each limit's Rate.
func WithBurst(n int64) PolicyOption {
	return func(c *policyConfig) { c.burst, c.set = n, c.set|setBurst }
}

// WithLease makes a Limiter take a policy's quota from the store in
// grants of up to chunk units for each key, and admit requests from a
// grant in the process, without a store call, for at most hold after it
// asked for it: for a hot key (a global limit, one tenant's key) that
// would otherwise send every decision to the one Redis core that owns it.
// What a grant has not spent when its hold ends goes back to the store
// (a settle); a process that dies spends its grants.
//
// The limits stay exact in true time, under any number of processes,
// whatever their clocks and whatever holds they lease with: the store
// checks a grant against everything it has recorded, and records the
// grant as spent at the end of its hold, the latest its process may
// spend it (Leaser). So a window limit counts a grant until hold +
// Period from the moment it granted it (FixedWindow and
// SlidingWindowApprox are leased as a SlidingWindow, a stronger
// promise), and a token bucket takes it at the end of its hold, so that
// a full bucket grants at most its burst less the hold's worth of tokens
// (hold ÷ the emission interval, rounded up). The cost is
// under-admission: a client at a window limit of Rate per Period gets at
// most Rate per Period + hold (100/s leased for 50ms: 95.2/s), and the
// units granted and not yet spent are unavailable to other processes
// until they are spent or go back.
//
// The grant a process asks for adapts to its traffic: the request's cost
// at first, then twice what the last grant spent, up to chunk; it is
// smaller when the limit has less room (a partial grant). A key the store
// denied is denied locally until the store's Retry-After; a request is
// admitted only from grants of every one of its keys. Its Decision
// reports the store's answer to the grant, with Remaining the store's
// plus what the process's grant still holds, and ResetAfter counted from
// that answer: a view as old as hold at most.
//
// Refund and Settle of a request admitted from a grant go back into the
// grant while it runs; a refund after its hold gives nothing back (the
// limit under-admits by it). A debt (a settle above the charge) is
// charged to the store at once, in one settle per key, whether the hold
// ended or not: no process admits a request while a debt fills a limit.
// Reset forgets the process's
// grants of the keys; other processes spend theirs until their hold ends.
// Request IDs (WithIdempotencyKey) are not remembered under a lease:
// every request is charged. A leased policy counts in counters of its
// own, apart from the policy's own (turning leases on or off starts them
// afresh), but the same whatever the chunk and the hold: a rolling
// deploy that changes them keeps the counts, and processes leasing with
// different holds share the limit exactly.
//
// chunk must be 1 to the leased policy's capacity; hold a whole number
// of milliseconds from 1ms to the shortest Period (and, for a TokenBucket,
// short enough to leave a burst of at least chunk). A policy with a
// Concurrent limit cannot be leased. The store must be a Leaser and, for
// unspent units to go back and debts to be charged, a Settler (the
// memory and Redis stores are both). WithLease(0, 0) in Policy.With turns leasing off.
func WithLease(chunk int64, hold time.Duration) PolicyOption {
	return func(c *policyConfig) { c.lease, c.set = leaseTerms{chunk, hold}, c.set|setLease }
}

// ParsePolicy parses a list of limits such as "10/s, 120/m, 240/h",
// "10/second;120/minute" or "1000/24h". Limits are separated by commas or
// semicolons; each is RATE/PERIOD, where PERIOD is a unit (ms, s, sec,
// second, m, min, minute, h, hr, hour, d, day, each optionally plural) with
// an optional leading count ("15m", "24h"), or a Go duration ("1m30s");
// or N concurrent (requests in flight: see Concurrent), optionally with
// "lease PERIOD" after it ("5 concurrent lease 2m").
// Errors name the offending limit and its position.
func ParsePolicy(s string, opts ...PolicyOption) (*Policy, error) {
	var c policyConfig
	if err := c.applyAll("ParsePolicy", opts); err != nil {
		return nil, err
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
		if c.algorithm == SlidingWindow && !l.Concurrent {
			l.Precision = c.precision
		}
		if c.algorithm == TokenBucket && !l.Concurrent {
			l.Burst = c.burst
		}
		limits = append(limits, l)
	}
	p, err := buildPolicy(c.name, c.algorithm, limits, c.block, c.leased())
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
	if f := strings.Fields(s); len(f) >= 2 && strings.EqualFold(f[1], "concurrent") {
		return parseConcurrent(f)
	}
	rateText, periodText, ok := strings.Cut(s, "/")
	if !ok {
		return Limit{}, errors.New(`want RATE/PERIOD, e.g. "10/s", or N concurrent`)
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

// parseConcurrent parses the fields of "N concurrent", optionally
// followed by "lease PERIOD".
func parseConcurrent(f []string) (Limit, error) {
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 1 || n > MaxRate {
		return Limit{}, fmt.Errorf("requests in flight %q: want a whole number from 1 to %d", f[0], MaxRate)
	}
	l := Concurrent(n)
	switch {
	case len(f) == 2:
	case len(f) == 4 && strings.EqualFold(f[2], "lease"):
		if l.Period, err = parsePeriod(f[3]); err != nil {
			return Limit{}, fmt.Errorf("lease: %w", err)
		}
	default:
		return Limit{}, errors.New(`want N concurrent, or N concurrent lease PERIOD`)
	}
	return l, nil
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

// With returns a copy of p with opts applied, as ParsePolicy applies them:
// Named gives the copy another name (limits named by default take the new
// name: "api-1m" becomes "login-1m"; limits named in their Limit keep
// theirs), BlockFor another penalty, WithLease other lease terms (the
// copy keeps p's otherwise; WithLease(0, 0) turns leasing off). The copy's ID follows its
// definition: it differs from p's, so the two never share counters,
// unless the options give back p's own name, penalty and leasing. The
// options that change how the limits are counted (WithAlgorithm,
// WithPrecision, WithBurst) apply only when a policy is built: With
// returns an error for them, as for a nil option or an invalid value.
func (p *Policy) With(opts ...PolicyOption) (*Policy, error) {
	if p == nil {
		return nil, errors.New("ratelimit: Policy.With: nil policy")
	}
	c := policyConfig{name: p.name, block: p.block}
	if p.lease != nil {
		c.lease = p.lease.terms
	}
	if err := c.applyAll("Policy.With", opts); err != nil {
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
	q, err := buildPolicy(c.name, p.algorithm, p.given, c.block, c.leased())
	if err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	return q, nil
}

// leased returns the lease terms c sets, nil for none.
func (c *policyConfig) leased() *leaseTerms {
	if c.lease == (leaseTerms{}) {
		return nil
	}
	return &c.lease
}
