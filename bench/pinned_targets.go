package main

import (
	"fmt"
	"os"

	"github.com/ratelimitkit/ratelimit"
)

// The goals of "One algorithm, one file, two languages, at the cost floor
// of a dedicated Redis core", judged where Redis has a core of its own
// (-pin): a fleet's ceiling is then Redis's CPU per decision.
const (
	pinnedCPUVsUlule       = 0.7 // (a) ours Take's Redis CPU µs per decision ÷ ulule's, at most
	pinnedHandlerVsUlule   = 1.2 // (a) ours Handler ÷ ulule's middleware, decisions/s, at least
	pinnedThreeVsUlule     = 2.5 // (b) ours Take ÷ ulule's three Limiters, and ours Handler ÷ ulule's three middlewares
	pinnedThreeVsRedisRate = 4   // (b) ours Take ÷ redis_rate's three calls
)

// pinnedTargets judges those goals on this run's tables; where Redis
// shared the callers' cores they are shown, not judged.
func (r *report) pinnedTargets() []target {
	judged := os.Getenv(pinnedEnv) != ""
	take, handler := "ours Take, "+ratelimit.SlidingWindow.String(), "ours Handler, "+ratelimit.SlidingWindow.String()
	var ts []target
	add := func(what string, ours, peer *cellResult, x float64, want string, met bool) {
		if !ours.ok() || !peer.ok() {
			ts = append(ts, target{what, "not measured", want, "not measured"})
			return
		}
		res := "**met**"
		if !met {
			res = "**missed**"
		}
		if !judged {
			res = "n/a (judged with -pin)"
		}
		ts = append(ts, target{what, fmt.Sprintf("%s× (%s against %s)", ratioNum(x), ours.name, peer.name), want, res})
	}
	cpu := func(c *cellResult) float64 { return c.perOp(c.redisCPU * 1e6) }
	ops := func(a, b *cellResult) float64 {
		if !a.ok() || !b.ok() {
			return 0
		}
		return a.opsPerSec() / b.opsPerSec()
	}
	if t := r.table("a"); t != nil {
		o, u := t.row(take), t.row("ulule/limiter v3")
		x := 0.0
		if o.ok() && u.ok() {
			x = cpu(o) / cpu(u)
		}
		add("(a, pinned) Redis CPU µs per decision, ours Take ÷ ulule/limiter", o, u, x, fmt.Sprintf("≤ %s×", ratioNum(pinnedCPUVsUlule)), x <= pinnedCPUVsUlule)
		h, uh := t.row(handler), t.row(ululeHTTPName)
		x = ops(h, uh)
		add("(a, pinned) decisions/s, ours Handler ÷ ulule's middleware", h, uh, x, fmt.Sprintf("≥ %s×", ratioNum(pinnedHandlerVsUlule)), x >= pinnedHandlerVsUlule)
	}
	if t := r.table("b"); t != nil {
		o, u, rr := t.row(take), t.row("ulule/limiter v3"), t.row(redisRateName)
		x := ops(o, u)
		add("(b, pinned) decisions/s, ours Take ÷ ulule's three Limiters", o, u, x, fmt.Sprintf("≥ %s×", ratioNum(pinnedThreeVsUlule)), x >= pinnedThreeVsUlule)
		x = ops(o, rr)
		add("(b, pinned) decisions/s, ours Take ÷ redis_rate's three calls", o, rr, x, fmt.Sprintf("≥ %s×", ratioNum(pinnedThreeVsRedisRate)), x >= pinnedThreeVsRedisRate)
		h, uh := t.row(handler), t.row(ululeHTTPName)
		x = ops(h, uh)
		add("(b, pinned) decisions/s, ours Handler ÷ ulule's three middlewares", h, uh, x, fmt.Sprintf("≥ %s×", ratioNum(pinnedThreeVsUlule)), x >= pinnedThreeVsUlule)
	}
	return ts
}
