package memory

import (
	"math"
	"slices"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// reservation is one pending reservation: cost units released at time at.
type reservation struct{ at, cost int64 }

// maxPending is the most pending reservations (distinct release times)
// an identity keeps. A request that would need one more is not reserved:
// it is denied with the wait until it fits, and Limiter.Wait waits that
// long and asks again.
const maxPending = layout.MaxPending

// counters is one identity's state as the algorithms read it.
type counters struct {
	st   []int64
	pend []reservation // in order of release
	held int64         // the units pend holds
	// stamp is, for a lease (verdict.Call.Hold), the time its charge is
	// recorded at, ahead of the time it is evaluated at; 0 otherwise.
	stamp int64
	// reserves: the policy reserves places in line (layout.Policy.Reserves),
	// so pend may hold reservations; else it holds only leases.
	reserves bool
}

// chargeUnits adds c units at time t to a log, a token bucket or
// sub-buckets, from its fields alone: a charge made now, or a place in
// line folded in.
func chargeUnits(st []int64, t int64, p *layout.Limit, c int64) {
	switch p.Kind {
	case layout.Token:
		chargeToken(st, t, p, c)
	case layout.Buckets:
		chargeBuckets(st, t, p, c)
	default:
		chargeLog(st, t, p, c)
	}
}

// drained reports whether k holds token buckets and every one of them
// owes nothing at t: its TAT, the places in line included, in the
// interval it was written in, is no later than t. Such a state reads as
// never written (forget), in both stores: a Redis key outlives the memory
// store's entry by up to a quarter TTL (its expiry is pushed ahead in
// steps), and what it still holds must answer as the fresh entry does.
func (k *counters) drained(lim []layout.Limit, t int64) bool {
	any := false
	for i := range lim {
		if p := &lim[i]; p.Kind == layout.Token {
			if tokenTAT(k, p) > t {
				return false
			}
			any = true
		}
	}
	return any
}

// forget makes k's drained token buckets read as never written: no
// interval (the reader's own) and no places in line (all released, and
// owing nothing). Their TATs, all past, stay: they count as nothing.
func (k *counters) forget(lim []layout.Limit) {
	for i := range lim {
		if p := &lim[i]; p.Kind == layout.Token {
			k.st[p.Mem+1] = 0
		}
	}
	k.pend, k.held = nil, 0
}

// retime rewrites, before a charge at t0 (not a place in line), every
// token bucket of k written in another interval than its limit's: the
// reservations released by t0 are folded in first, in the interval they
// were promised in, then what the TAT still owes is rewritten in the
// limit's (layout.TokenTAT), and the refund count goes up, so that a
// refund of an earlier charge, whose arithmetic was in the old interval,
// gives nothing back. It reports whether any was rewritten.
func (k *counters) retime(lim []layout.Limit, t0 int64) bool {
	any := false
	for i := range lim {
		if p := &lim[i]; p.Kind == layout.Token && tokenWidth(k.st, p) != p.Width {
			any = true
		}
	}
	if !any {
		return false
	}
	k.fold(lim, t0)
	for i := range lim {
		if p := &lim[i]; p.Kind == layout.Token && tokenWidth(k.st, p) != p.Width {
			k.st[p.Mem] = layout.TokenTAT(k.st[p.Mem], k.st[p.Mem+1], p.Width, t0)
			k.st[p.Mem+1] = p.Width
		}
	}
	k.st[layout.MemGen]++
	return true
}

// logUnit returns the time of the i-th oldest (0-based) of the last
// capacity units of a log, its pending reservations' units coming after
// its ring's slots.
func logUnit(k *counters, p *layout.Limit, i int64) int64 {
	j := p.Ring - p.Capacity + k.held + i
	if j < p.Ring {
		return logSlot(k.st, p, j)
	}
	j -= p.Ring
	for _, r := range k.pend {
		if j < r.cost {
			return r.at
		}
		j -= r.cost
	}
	return math.MaxInt64 // not reached: i < capacity
}

// place records a lease's c units at time t, a place in line, and
// returns the time they are recorded at: t, or, when the identity keeps
// as many places as it may, a later one: merged into the first place at
// or after t, or, when all lie before it, with the latest one, moved to
// t. A unit recorded later counts longer: never less than it should. The
// receipts of a place moved find it no more, and give nothing back (see
// Refund).
func (k *counters) place(t, c int64) int64 {
	if len(k.pend) >= maxPending {
		for i, r := range k.pend {
			if r.at >= t {
				k.pend[i].cost += c
				k.held += c
				return r.at
			}
		}
		last := &k.pend[len(k.pend)-1]
		last.at, last.cost = t, last.cost+c
		k.held += c
		return t
	}
	k.reserve(t, c)
	return t
}

// reserve records a reservation of cost c released at t, in order of
// release (after those released at the same time, with which it merges).
func (k *counters) reserve(t, c int64) {
	i := len(k.pend)
	for i > 0 && k.pend[i-1].at > t {
		i--
	}
	if i > 0 && k.pend[i-1].at == t {
		k.pend[i-1].cost += c
	} else {
		k.pend = slices.Insert(k.pend, i, reservation{t, c})
	}
	k.held += c
}

// fold charges the places in line released by t into the fields, in
// order of release, before a charge at t: the time of the last charge
// (layout.MemTime) moves to each, as sub-buckets read it.
func (k *counters) fold(lim []layout.Limit, t int64) {
	n := 0
	for n < len(k.pend) && k.pend[n].at <= t {
		r := k.pend[n]
		for i := range lim {
			chargeUnits(k.st, r.at, &lim[i], r.cost)
		}
		k.st[layout.MemTime] = max(k.st[layout.MemTime], r.at)
		k.held -= r.cost
		n++
	}
	if n > 0 {
		k.pend = slices.Delete(k.pend, 0, n)
	}
}

// unreserve takes c units of the pending reservation released at t out of
// it, and reports whether there was one.
func (k *counters) unreserve(t, c int64) bool {
	for i, r := range k.pend {
		if r.at == t {
			back := min(c, r.cost)
			k.pend[i].cost -= back
			k.held -= back
			if k.pend[i].cost == 0 {
				k.pend = slices.Delete(k.pend, i, i+1)
			}
			return true
		}
	}
	return false
}
