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
// whatever their clocks: the store counts a grant from the moment it
// grants it until hold after it would have left, because the process may
// spend any unit of it up to hold later. So every window limit
// (SlidingWindow, SlidingLog, and FixedWindow and SlidingWindowApprox,
// which leases count as a SlidingWindow, a stronger promise) is counted
// over Period + hold, and a TokenBucket's burst is lowered by hold's
// worth of tokens (hold ÷ the emission interval, rounded up). The cost is
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
// limit under-admits by it). A debt (a settle above the charge) is taken
// from what the grant has not spent, which the store counts already, and
// what it cannot cover, or all of it once the hold ended, is charged to
// the store at once, in one settle per key: no process admits a request
// while a debt fills a limit. Reset forgets the process's
// grants of the keys; other processes spend theirs until their hold ends.
// Request IDs (WithIdempotencyKey) are not remembered under a lease:
// every request is charged. A leased policy counts in counters of its
// own (its ID differs), so turning leases on or off starts them afresh.
//
// chunk must be 1 to the leased policy's capacity; hold a whole number
// of milliseconds from 1ms to the shortest Period (and, for a TokenBucket,
// short enough to leave a burst of at least chunk). A policy with a
// Concurrent limit cannot be leased. The store must be a Granter and,
// for unspent units to go back, a Settler (the memory and Redis stores
// are both). WithLease(0, 0) in Policy.With turns leasing off.
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
	// policy's limits with each window lengthened by the hold, or each
	// token bucket's burst lowered by it.
	store *Policy
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
	hold := t.hold.Microseconds()
	alg := p.algorithm
	if alg == FixedWindow || alg == SlidingWindowApprox {
		alg = SlidingWindow // over Period + hold: a sliding promise covers the aligned one
	}
	limits := make([]Limit, len(p.limits))
	for i, l := range p.limits {
		if l.Concurrent {
			return fmt.Errorf("%s: limit %d counts requests in flight, which cannot be leased", where, i+1)
		}
		if t.hold > l.Period {
			return fmt.Errorf("%s: hold is longer than limit %d's period %s", where, i+1, FormatPeriod(l.Period))
		}
		limits[i] = Limit{Rate: l.Rate, Period: l.Period, Name: l.Name}
		if alg == TokenBucket {
			// A unit spent up to hold after the store charged it: the
			// bucket keeps room for hold's worth of tokens.
			interval := (l.Period.Microseconds() + l.Rate - 1) / l.Rate
			limits[i].Burst = l.Burst - (hold+interval-1)/interval
			if limits[i].Burst < t.chunk {
				return fmt.Errorf("%s: limit %d's burst %d less the hold's %d tokens leaves %d, less than the chunk: shorten the hold or raise the burst",
					where, i+1, l.Burst, l.Burst-limits[i].Burst, max(limits[i].Burst, 0))
			}
			continue
		}
		limits[i].Period += t.hold
	}
	lp, err := buildPolicy(p.name, alg, limits, p.block, hold)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if t.chunk > lp.minRate {
		return fmt.Errorf("%s: chunk is above the policy's capacity %d", where, lp.minRate)
	}
	p.lease = &leasing{terms: t, store: lp}
	return nil
}
