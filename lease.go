package ratelimit

import (
	"fmt"
	"time"
)

// Leases of a policy's quota (WithLease): what the store counts them
// under. The Limiter's side, the grants it spends locally, is in
// lease_grants.go; why the leases are exact is in docs/leases.md.

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

// leaseTerms are WithLease's arguments.
type leaseTerms struct {
	chunk int64
	hold  time.Duration
}

// leasing is how a Limiter leases a policy's quota.
type leasing struct {
	terms leaseTerms
	// store is the policy the store counts the grants under: the
	// policy's limits (a fixed window or an approximation as a sliding
	// window), in counters of its own whatever the terms.
	store *Policy
	// maxCost is the most one grant can hold: the smallest rate, or a
	// token bucket's burst less the hold's tokens.
	maxCost int64
}

// Lease returns the policy's WithLease terms: 0 and 0 when it is not
// leased.
func (p *Policy) Lease() (chunk int64, hold time.Duration) {
	if p.lease == nil {
		return 0, 0
	}
	return p.lease.terms.chunk, p.lease.terms.hold
}

// leased sets p's lease terms, building the policy its grants are
// counted under; zero terms turn leasing off.
func (p *Policy) leased(t leaseTerms) error {
	if t == (leaseTerms{}) {
		p.lease = nil
		return nil
	}
	where := fmt.Sprintf("policy %q: WithLease(%d, %s)", p.name, t.chunk, t.hold)
	if t.chunk < 1 {
		return fmt.Errorf("%s: chunk must be at least 1", where)
	}
	if t.hold < time.Millisecond || t.hold%time.Millisecond != 0 {
		return fmt.Errorf("%s: hold must be a whole number of milliseconds, at least 1ms", where)
	}
	alg := p.algorithm
	if alg == FixedWindow || alg == SlidingWindowApprox {
		alg = SlidingWindow // a sliding promise covers the aligned one; leases ahead need it
	}
	limits := make([]Limit, len(p.limits))
	capacity := int64(0) // the most one grant can hold: MaxCost
	for i, l := range p.limits {
		if l.Concurrent {
			return fmt.Errorf("%s: limit %d counts requests in flight, which cannot be leased", where, i+1)
		}
		if t.hold > l.Period {
			return fmt.Errorf("%s: hold is longer than limit %d's period %s", where, i+1, FormatPeriod(l.Period))
		}
		limits[i] = Limit{Rate: l.Rate, Period: l.Period, Name: l.Name}
		room := l.Rate
		switch alg {
		case SlidingWindow:
			if p.algorithm == SlidingWindow {
				limits[i].Precision = l.Precision
			}
		case TokenBucket:
			// A grant is taken at the end of its hold: a full bucket
			// keeps room for the hold's worth of tokens besides it.
			limits[i].Burst = l.Burst
			interval := (l.Period.Microseconds() + l.Rate - 1) / l.Rate
			room = l.Burst - (t.hold.Microseconds()+interval-1)/interval
			if room < t.chunk {
				return fmt.Errorf("%s: limit %d's burst %d less the hold's %d tokens leaves %d, less than the chunk: shorten the hold or raise the burst",
					where, i+1, l.Burst, l.Burst-room, max(room, 0))
			}
		}
		if capacity == 0 || room < capacity {
			capacity = room
		}
	}
	lp, err := buildPolicy(p.name, alg, limits, p.block, &t)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if t.chunk > capacity {
		return fmt.Errorf("%s: chunk is above the policy's capacity %d", where, capacity)
	}
	p.lease = &leasing{terms: t, store: lp, maxCost: capacity}
	return nil
}
