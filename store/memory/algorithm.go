package memory

import "github.com/ratelimitkit/ratelimit/internal/layout"

// The algorithms are the reference, one limit at a time, one file each:
// sliding.go (sub-buckets), log.go (the exact log), fixed.go, token.go,
// approx.go and concurrent.go, each with the same steps: evaluate at a
// time and a cost, report, refill, charge, refund. The Redis script
// (lua/) mirrors them: the same state (internal/layout), the same integer
// arithmetic (microseconds; the approximation's one weighted product in
// IEEE doubles, computed in the same order), the same order of decisions.
// The conformance suite (store/storetest) holds the two to identical
// answers.

// eval is one limit of one identity evaluated at a time t (never earlier
// than the last charge) for a cost c.
type eval struct {
	// used: buckets, fixed: the cost counted; token: the TAT, pending
	// reservations included, clamped to t;
	// approx: the current window's cost. total: buckets: the ring's sum
	// once the sub-buckets that left it are taken out; approx: the
	// previous window's cost.
	used, total int64
	avail       int64 // the cost admissible at t (≥ 0)
	retry       int64 // 0: c fits at t; -1: c never fits; else µs until it fits
}

// An algorithm is the steps of one kind of counter on one limit's fields.
//
// evaluate computes e for time t and cost c. A cost above the capacity is
// answered before any arithmetic on it, so no cost, however large, can
// overflow; times are subtracted before they are added, so no sum of
// times passes 2^53 (exact in Redis Lua) before 2175 (see
// ratelimit.MaxSpan).
//
// report computes the remaining cost and the time until the whole quota
// is back, evaluated at t (e), after charging ch recorded at at (t, or a
// lease's stamp).
//
// refill returns how long, after charging ch at t (or a lease at its
// stamp), the limit admits no more than rem, what remains: until the
// first of its quota comes back, if nothing more is charged. It may say
// less, never more (the approximation says a microsecond less). With its
// whole quota there, it is how long the limit admits no more than it.
// (Places in line ahead are answered before it: see refill.)
//
// charge adds cost c at time t (e is the evaluation at t), t being no
// earlier than any time the fields hold. Field layout.MemTime is set by
// the caller once every limit is charged.
//
// refund undoes, as far as it still counts at now, a charge of cost c
// made at time at, never below zero and never un-charging another
// charge's units. tat is the token bucket's TAT right after that charge,
// and sameGen reports that no refund came between the charge and this
// one.
type algorithm interface {
	evaluate(k *counters, t int64, p *layout.Limit, c int64) eval
	report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64)
	refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64
	charge(st []int64, t int64, p *layout.Limit, e *eval, c int64)
	refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool)
}

// algorithms holds each kind's steps, by layout.Kind.
var algorithms = [...]algorithm{
	layout.Buckets:    sliding{},
	layout.Log:        logRing{},
	layout.Fixed:      fixed{},
	layout.Token:      token{},
	layout.Approx:     approx{},
	layout.Concurrent: concurrent{},
}

func evaluate(k *counters, t int64, p *layout.Limit, c int64) eval {
	return algorithms[p.Kind].evaluate(k, t, p, c)
}

func report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	return algorithms[p.Kind].report(k, t, p, e, ch, at)
}

// refill is the algorithm's refill, once places in line ahead of t are
// ruled out: a charge before a release can leave what the release will
// find as it was (reservations; for a token bucket, leases too), so what
// is left does not fall one unit per unit charged, and no claim is made.
// (A window counts a lease ahead from its stamp, as any charge.) A slot
// frees when a request ends: a Concurrent limit makes no claim either.
func refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	if p.Kind == layout.Concurrent {
		return 0
	}
	ahead := len(k.pend) > 0 && k.pend[len(k.pend)-1].at > t
	if ahead && (k.reserves || p.Kind == layout.Token) || p.Kind == layout.Token && k.stamp > 0 {
		return 0
	}
	return algorithms[p.Kind].refill(k, t, p, e, ch, rem)
}

func charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	algorithms[p.Kind].charge(st, t, p, e, c)
}

func refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
	algorithms[p.Kind].refund(st, now, at, p, c, tat, sameGen)
}
