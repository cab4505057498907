package ratelimit

import (
	"fmt"
	"time"
)

// The terms of a leased policy (WithLease) and their checks. The
// Limiter's side, the grants it spends locally, is in lease_grants.go;
// why the leases are exact is in docs/leases.md.

// leaseTerms are WithLease's arguments.
type leaseTerms struct {
	chunk int64
	hold  time.Duration
}

// leasing is how a Limiter leases a policy's quota.
type leasing struct {
	terms leaseTerms
	// maxCost is the most one grant can hold: the smallest rate, or a
	// token bucket's burst less the hold's tokens.
	maxCost int64
}

// checkLease checks the terms t of leasing the limits (defaults filled
// in), counted by alg, and returns how it leases them; its errors begin
// with where, which names the policy and the option.
func checkLease(where string, alg Algorithm, limits []Limit, t leaseTerms) (*leasing, error) {
	if t.chunk < 1 {
		return nil, fmt.Errorf("%s: chunk must be at least 1", where)
	}
	if t.hold < time.Millisecond || t.hold%time.Millisecond != 0 {
		return nil, fmt.Errorf("%s: hold must be a whole number of milliseconds, at least 1ms", where)
	}
	capacity := int64(0) // the most one grant can hold: MaxCost
	for i, l := range limits {
		if l.Concurrent {
			return nil, fmt.Errorf("%s: limit %d counts requests in flight, which cannot be leased", where, i+1)
		}
		if t.hold > l.Period {
			return nil, fmt.Errorf("%s: hold is longer than limit %d's period %s", where, i+1, FormatPeriod(l.Period))
		}
		room := l.Rate
		if alg == TokenBucket {
			// A grant is taken at the end of its hold: a full bucket
			// keeps room for the hold's worth of tokens besides it.
			interval := (l.Period.Microseconds() + l.Rate - 1) / l.Rate
			room = l.Burst - (t.hold.Microseconds()+interval-1)/interval
			if room < t.chunk {
				return nil, fmt.Errorf("%s: limit %d's burst %d less the hold's %d tokens leaves %d, less than the chunk: shorten the hold or raise the burst",
					where, i+1, l.Burst, l.Burst-room, max(room, 0))
			}
		}
		if capacity == 0 || room < capacity {
			capacity = room
		}
	}
	if t.chunk > capacity {
		return nil, fmt.Errorf("%s: chunk is above the policy's capacity %d", where, capacity)
	}
	return &leasing{terms: t, maxCost: capacity}, nil
}
