package memory

import "github.com/ratelimitkit/ratelimit/internal/layout"

// fixed is FixedWindow: the aligned window's index and the cost counted
// in it (lua/fixed.lua's steps).
type fixed struct{}

func (fixed) evaluate(k *counters, t int64, p *layout.Limit, c int64) (e eval) {
	if k.st[p.Mem] == t/p.Width {
		e.used = k.st[p.Mem+1]
	}
	e.avail = max(p.Capacity-e.used, 0)
	switch {
	case c > p.Capacity:
		e.retry = -1
	case e.used+c > p.Capacity:
		e.retry = (t/p.Width+1)*p.Width - t
	}
	return e
}

func (fixed) report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	if e.used+ch > 0 {
		reset = (t/p.Width+1)*p.Width - t
	}
	return e.avail - ch, reset
}

// refill: what is left of the window.
func (fixed) refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	return (t/p.Width+1)*p.Width - t
}

func (fixed) charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	st[p.Mem] = t / p.Width
	st[p.Mem+1] = e.used + c
}

func (fixed) refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
	if st[p.Mem] == at/p.Width {
		st[p.Mem+1] -= min(c, st[p.Mem+1])
	}
}
