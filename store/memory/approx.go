package memory

import (
	"math"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

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
