package memory

import (
	"math"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// approx is SlidingWindowApprox: the aligned window's index, its cost and
// the previous window's cost, weighted (lua/approx.lua).
type approx struct{}

func (approx) evaluate(k *counters, t int64, p *layout.Limit, c int64) (e eval) {
	e.used, e.total = approxWindows(k.st, p, t)
	e.avail = approxAvail(p, t, e.used, e.total)
	switch {
	case c > p.Capacity:
		e.retry = -1
	case c > e.avail:
		e.retry = approxRetry(k.st, p, t, e, c)
	}
	return e
}

func (approx) report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	kk := t / p.Width
	if e.used+ch > 0 {
		reset = (kk+2)*p.Width - t
	} else if e.total > 0 {
		reset = (kk+1)*p.Width - t
	}
	return e.avail - ch, reset
}

// refill: until the weighted product admits one more than rem, at most
// the end of the window (a microsecond less than exact).
func (approx) refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	w := p.Width
	kk := t / w
	end := (kk+1)*w - t
	cur, prev := e.used+ch, e.total
	m := p.Capacity - cur - (rem + 1)
	if prev == 0 || m < 0 {
		return end
	}
	d := int64(math.Floor(float64(w) - float64(m)*float64(w)/float64(prev)))
	return min(max(kk*w+d-t-1, 0), end)
}

func (approx) charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	st[p.Mem], st[p.Mem+1], st[p.Mem+2] = t/p.Width, e.used+c, e.total
}

func (approx) refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
	switch k := at / p.Width; st[p.Mem] {
	case k:
		st[p.Mem+1] -= min(c, st[p.Mem+1])
	case k + 1:
		st[p.Mem+2] -= min(c, st[p.Mem+2])
	}
}

// approxWindows returns the approximation's current and previous window
// costs as seen at t.
func approxWindows(st []int64, p *layout.Limit, t int64) (cur, prev int64) {
	switch k := t / p.Width; st[p.Mem] {
	case k:
		return st[p.Mem+1], st[p.Mem+2]
	case k - 1:
		return 0, st[p.Mem+1]
	}
	return 0, 0
}

// approxAvail is the cost the approximation admits at t: the largest a
// with prev × (Period − elapsed)/Period + cur + a ≤ capacity. The weighted
// product is the one computation in doubles; the Lua script does the same
// operations in the same order, so both round alike.
func approxAvail(p *layout.Limit, t, cur, prev int64) int64 {
	e := t - t/p.Width*p.Width
	est := float64(float64(prev)*float64(p.Width-e)) / float64(p.Width)
	a := math.Floor(float64(p.Capacity-cur) - est)
	if a < 0 {
		return 0
	}
	return int64(a)
}

// approxRetry finds the least wait after which cost c fits, if nothing is
// charged meanwhile: a guess from the closed form, then corrected one
// microsecond at a time against approxAvail itself, so that waiting the
// answer is enough and one microsecond less is not.
func approxRetry(st []int64, p *layout.Limit, t int64, e eval, c int64) int64 {
	P := p.Width
	k := t / P
	fits := func(x int64) bool {
		cur, prev := approxWindows(st, p, x)
		return approxAvail(p, x, cur, prev) >= c
	}
	var x int64
	if m := p.Capacity - e.used - c; m >= 0 && e.total > 0 {
		x = k*P + int64(math.Ceil(float64(P)-float64(m)*float64(P)/float64(e.total)))
	} else if e.used > 0 {
		x = (k+1)*P + int64(math.Ceil(float64(P)-float64(p.Capacity-c)*float64(P)/float64(e.used)))
	} else {
		x = (k + 1) * P
	}
	x = min(max(x, t+1), (k+2)*P)
	for i := 0; i < 64 && !fits(x); i++ {
		x++
	}
	for i := 0; i < 64 && x > t+1 && fits(x-1); i++ {
		x--
	}
	return x - t
}
