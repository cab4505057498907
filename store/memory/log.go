package memory

import (
	"slices"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// logSlot returns the time of the i-th oldest unit of a log.
func logSlot(st []int64, p *layout.Limit, i int64) int64 {
	return st[p.Mem+1+int((st[p.Mem]+i)%p.Capacity)]
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
	r := p.Capacity
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
