package ratelimit

import (
	"fmt"
	"io"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// A limit of requests in flight: its definition and how the stores lay
// it out. The Handler's holding of its slots is in slots.go.

// DefaultLease is the lease of a Concurrent limit's slot when none is
// set: a Handler renews its slots every quarter lease while the request
// runs, and a process that dies holding slots holds them at most a
// lease.
const DefaultLease = 30 * time.Second

// Concurrent returns a limit of n requests in flight at once ("5
// concurrent" in ParsePolicy), for expensive endpoints: a request holds a
// slot from its admission until it ends (the Handler releases it when the
// handler returns, on panic and when the client left too; outside HTTP,
// Limiter.Release). It is checked with the policy's other limits, for
// every key, in the same store call, all or nothing, and counts requests,
// not cost. A slot carries a lease (Period, DefaultLease when 0) that the
// Handler renews every quarter lease while the request runs: a process
// that dies holding a slot holds it half a lease to a lease, then the
// slot frees itself, as does a slot taken by a store call that answered after the
// Limiter's timeout. A denial by it (Decision.InFlight) has no wait to
// promise: a slot frees when a request ends.
func Concurrent(n int64) Limit { return Limit{Rate: n, Concurrent: true} }

// slotLimit validates limit i of p, a Concurrent one, and lays it out:
// its Rate is the slots, its Period the lease (DefaultLease when 0), two
// epochs of its counters (a slot counts until the end of the epoch after
// its own: at most a lease). The lease is in the ID's fingerprint (fp, with
// the kind); the slots only in the definition's (df), so that a changed
// number of slots keeps the slots held.
func slotLimit(p *Policy, l *Limit, i int, fp, df io.Writer, out *layout.Limit) error {
	where := fmt.Sprintf("policy %q: limit %d (%d concurrent)", p.name, i+1, l.Rate)
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
	for j := range p.limits[:i] {
		if p.limits[j].Concurrent {
			return fmt.Errorf("%s: limit %d is concurrent too; a policy has at most one", where, j+1)
		}
	}
	lease := l.Period.Microseconds()
	*out = layout.Limit{Kind: layout.Concurrent, Capacity: l.Rate, Width: lease / 2, N: 1, Period: lease}
	fmt.Fprintf(df, "|c%d/%d", l.Rate, lease)
	fmt.Fprintf(fp, "|c%d", lease)
	return nil
}
