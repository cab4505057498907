package memory

import (
	"slices"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// logRing is the exact log: the times of the last Capacity units of cost
// in a ring (SlidingLog, and SlidingWindow up to ExactRateMax;
// lua/log.lua).
type logRing struct{}

// evaluate: cost c fits at t when the units of the log and of the
// pending reservations that count after t-Period are at most
// capacity-c: the c-th oldest of the last capacity units is older than
// that.
func (logRing) evaluate(k *counters, t int64, p *layout.Limit, c int64) (e eval) {
	e.avail = logAvail(k, p, t)
	if c > p.Capacity {
		e.retry = -1
	} else if free := logUnit(k, p, c-1) + p.Period; free > t {
		e.retry = free - t
	}
	return e
}

func (logRing) report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	newest := logUnit(k, p, p.Capacity-1)
	if ch > 0 {
		newest = max(newest, at)
	}
	return e.avail - ch, max(newest+p.Period-t, 0)
}

// refill: the first unit to leave is the oldest counted one, or one
// charged from t, which leaves a Period after t at the earliest.
func (logRing) refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	first := t
	if e.avail < p.Capacity {
		first = min(first, logUnit(k, p, e.avail))
	}
	return first + p.Period - t
}

func (logRing) charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	chargeLog(st, t, p, c)
}

// refund: a charge that counts no more has nothing to undo.
func (logRing) refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
	if at+p.Period > now {
		refundLog(st, at, p, c)
	}
}

// chargeLog writes c units at time t into a log's ring. Units past the
// ring's size (a settle's debt) would overwrite slots this charge already
// set to t: the ring holds t in every slot.
func chargeLog(st []int64, t int64, p *layout.Limit, c int64) {
	ptr := st[p.Mem]
	for i := int64(0); i < min(c, p.Ring); i++ {
		st[p.Mem+1+int((ptr+i)%p.Ring)] = t
	}
	st[p.Mem] = (ptr + c) % p.Ring
}

// logSlot returns the time of the i-th oldest slot of a log's ring.
func logSlot(st []int64, p *layout.Limit, i int64) int64 {
	return st[p.Mem+1+int((st[p.Mem]+i)%p.Ring)]
}

// logAvail counts the last capacity units of a log (pending reservations
// included) that stopped counting by t: its oldest units, found by binary
// search (times grow from the oldest).
func logAvail(k *counters, p *layout.Limit, t int64) int64 {
	lo, hi := int64(0), p.Capacity
	for lo < hi {
		mid := (lo + hi) / 2
		if logUnit(k, p, mid)+p.Period <= t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// refundLog takes c units charged at time at out of a log. The units they
// had replaced are gone, so units that count no less stand in for them:
// every unit a log has forgotten was its oldest when it left, so it is no
// newer than any unit the log holds, and it was at least one Period older
// than the unit that replaced it, so no newer than the newest minus a
// Period. The stand-ins take the earlier of the two times.
func refundLog(st []int64, at int64, p *layout.Limit, c int64) {
	r := p.Ring
	ring := make([]int64, r)
	found := int64(0)
	for i := range ring {
		ring[i] = logSlot(st, p, int64(i))
		if ring[i] == at {
			found++
		}
	}
	take := min(c, found)
	if take == 0 {
		return
	}
	stand := min(ring[0], ring[r-1]-p.Period)
	out := ring[:0]
	for _, v := range ring {
		if v == at && take > 0 {
			take--
			continue
		}
		out = append(out, v)
	}
	for len(out) < int(r) {
		out = append(out, stand)
	}
	slices.Sort(out)
	st[p.Mem] = 0
	copy(st[p.Mem+1:p.Mem+1+int(r)], out)
}

// storedLayout returns the layout in which the counters of keys, held in
// ents, are read and kept under lay, a policy of their ID: lay itself
// unless a policy of the same ID with a larger rate grew a log's ring
// (layout.Limit.Ring), then lay with every such log's ring as large as
// the largest among the keys. ents[i] is nil for a key not read.
func storedLayout(lay *layout.Policy, ents []*memEntry) *layout.Policy {
	var rings []int64
	for _, e := range ents {
		if e == nil || e.lay == lay {
			continue
		}
		for i := range lay.Limits {
			if l := &lay.Limits[i]; l.Kind == layout.Log && e.lay.Limits[i].Ring > l.Ring {
				if rings == nil {
					rings = make([]int64, len(lay.Limits))
				}
				rings[i] = max(rings[i], e.lay.Limits[i].Ring)
			}
		}
	}
	if rings == nil {
		return lay
	}
	return lay.WithRings(rings, ratelimit.ExactRateMax)
}

// sameRings reports whether counters laid out by a are laid out as b
// wants them: a and b are layouts of one ID (their limits' kinds, periods
// and sub-buckets agree, and a token bucket's capacity and interval), so
// only their logs' rings can differ.
func sameRings(a, b *layout.Policy) bool {
	for i := range a.Limits {
		if a.Limits[i].Kind == layout.Log && a.Limits[i].Ring != b.Limits[i].Ring {
			return false
		}
	}
	return true
}

// relayout returns the counters st, laid out by from, in the layout to,
// whose logs' rings are at least as large: every field where to keeps it,
// and each ring that grows laid out anew, oldest first from its pointer
// 0, its times kept and the older slots empty (no time, as in a new log),
// which forgets nothing.
func relayout(st []int64, from, to *layout.Policy) []int64 {
	out := make([]int64, to.MemFields)
	copy(out[:layout.MemFirst], st)
	for i := range to.Limits {
		a, b := &from.Limits[i], &to.Limits[i]
		if a.Kind != layout.Log || a.Ring == b.Ring {
			copy(out[b.Mem:b.Mem+b.MemFields()], st[a.Mem:])
			continue
		}
		for j := int64(0); j < a.Ring; j++ {
			out[b.Mem+1+int(b.Ring-a.Ring+j)] = logSlot(st, a, j)
		}
	}
	return out
}
