package memory

import "github.com/ratelimitkit/ratelimit/internal/layout"

// concurrent is a Concurrent limit: slots of requests in flight, counted
// per epoch (internal/layout's concurrent.go; lua/concurrent.lua). A
// request takes one slot, whatever its cost.
type concurrent struct{}

// evaluate: denied, a request waits until a slot whose holder stopped
// renewing it could lapse: the end of this epoch for the last one's, else
// of the next.
func (concurrent) evaluate(k *counters, t int64, p *layout.Limit, c int64) (e eval) {
	st := k.st
	_, cur, prev := layout.SlotsRolled(st[p.Mem], st[p.Mem+1], st[p.Mem+2], t, p.Width)
	e.used, e.total = cur+prev, cur
	e.avail = max(p.Capacity-e.used, 0)
	if e.used >= p.Capacity {
		e.retry = slotLapse(t, p.Width, prev)
	}
	return e
}

// report: one slot per request; every slot could lapse by the end of the
// next epoch (this one's recorded now, e.total, or by a charge).
func (concurrent) report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	rem = e.avail
	if ch > 0 {
		rem--
	}
	if cur := e.total + min(ch, 1); cur > 0 {
		reset = slotLapse(t, p.Width, 0)
	} else if e.used > 0 {
		reset = slotLapse(t, p.Width, e.used)
	}
	return rem, reset
}

// refill: a slot frees when a request ends: no claim.
func (concurrent) refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	return 0
}

// charge: one slot, whatever the cost.
func (concurrent) charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	ep, cur, prev := layout.SlotsRolled(st[p.Mem], st[p.Mem+1], st[p.Mem+2], t, p.Width)
	st[p.Mem], st[p.Mem+1], st[p.Mem+2] = ep, cur+1, prev
}

// refund: a slot is given back by Release (slots.go), not by a refund.
func (concurrent) refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
}

// slotLapse is how long from t until a slot of a Concurrent limit could
// lapse unrenewed: the end of t's epoch when the epoch before recorded
// some (prev), else the end of the next.
func slotLapse(t, w, prev int64) int64 {
	end := (t/w + 1) * w
	if prev == 0 {
		end += w
	}
	return end - t
}
