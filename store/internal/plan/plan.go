// Package plan gives the stores of this module how to count a
// ratelimit.Policy: its layout (internal/layout), derived from what the
// policy exports (its algorithm, limits, penalty and lease terms) by the
// same functions package ratelimit lays it out with, and its definition's
// fingerprint. A policy is immutable, so its plan is derived once and
// kept, for up to maxPlans policies at a time.
package plan

import (
	"sync"
	"sync/atomic"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// Plan is how the stores count a policy.
type Plan struct {
	*layout.Policy
	// Def is the policy's name and a fingerprint of its whole definition
	// (storekit.Definition).
	Def string
}

// maxPlans bounds the plans kept: past it they are forgotten all at once
// (a program that builds policies without end derives them anew).
const maxPlans = 4096

var (
	plans sync.Map // *ratelimit.Policy → *Plan
	kept  atomic.Int64
)

// Of returns p's plan.
func Of(p *ratelimit.Policy) *Plan {
	if v, ok := plans.Load(p); ok {
		return v.(*Plan)
	}
	pl := derive(p)
	if kept.Add(1) > maxPlans {
		plans.Clear()
		kept.Store(1)
	}
	plans.Store(p, pl)
	return pl
}

// Layout returns p's layout.
func Layout(p *ratelimit.Policy) *layout.Policy { return Of(p).Policy }

// counting names each ratelimit.Algorithm as package layout counts it.
var counting = map[ratelimit.Algorithm]layout.Algorithm{
	ratelimit.SlidingWindow:       layout.SlidingWindow,
	ratelimit.FixedWindow:         layout.FixedWindow,
	ratelimit.TokenBucket:         layout.TokenBucket,
	ratelimit.SlidingLog:          layout.SlidingLog,
	ratelimit.SlidingWindowApprox: layout.SlidingWindowApprox,
}

func derive(p *ratelimit.Policy) *Plan {
	limits := p.Limits()
	specs := make([]layout.Spec, len(limits))
	for i, l := range limits {
		specs[i] = layout.Spec{Rate: l.Rate, Burst: l.Burst, Period: l.Period.Microseconds(), Precision: int64(l.Precision), Concurrent: l.Concurrent}
	}
	alg := counting[p.Algorithm()]
	chunk, hold := p.Lease()
	block := p.BlockFor().Microseconds()
	_, def := layout.Names(p.Name(), alg, specs, block, chunk, hold.Microseconds())
	return &Plan{Policy: layout.Derive(alg, specs, block, chunk > 0), Def: def}
}
