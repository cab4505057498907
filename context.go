package ratelimit

import (
	"context"
	"sync/atomic"
)

// Result is what the Limiter decided for one request. The Limiter puts it
// in the request's context before calling the next handler or the denied
// handler; read it with FromContext (or AllFromContext, when Limiters are
// stacked).
type Result struct {
	// Policy is the policy applied. It is nil only in a Result built by
	// hand.
	Policy *Policy
	// Keys are the keys of the identifiers that applied, in order
	// ("ip:203.0.113.7", "user:42"). Empty when no identifier applied.
	// Decision.Key and LimitStatus.Key index it.
	Keys []string
	// Cost is the request's cost in units of Limit.Rate.
	Cost int64
	// Decision is the store's answer (or the failure mode's, when Err is
	// set).
	Decision Decision
	// Err is the store's error when the store failed and the configured
	// failure mode decided instead; nil otherwise. It is for logs and
	// metrics: never send its text to the client.
	Err error
	// DryRun reports whether the Limiter was in dry-run mode: the request
	// went through even if Decision denies it.
	DryRun bool
	// Outcome is what the Limiter did with the request.
	Outcome Outcome
}

// ctxKey is the context key of the frames; unexported so that only this
// package can set it.
type ctxKey struct{}

// frame is one Limiter's pass over a request, chained to the frames of the
// Limiters outside it (outer), so that stacked Limiters see each other.
type frame struct {
	res   Result
	outer *frame
	// limited: a Limiter's frame, not a Result added by NewContext.
	limited bool
	// served is cleared by an inner Limiter (or its failure mode) that
	// refused the request, so that this Limiter gives back its charge.
	refused atomic.Bool
}

// NewContext returns a copy of ctx carrying res, innermost: FromContext
// returns it, and AllFromContext lists it after any Result ctx carried
// already. The Limiter calls it for every request it checks; custom
// middleware stacks and tests may too.
func NewContext(ctx context.Context, res Result) context.Context {
	return withFrame(ctx, &frame{res: res})
}

func withFrame(ctx context.Context, f *frame) context.Context {
	f.outer, _ = ctx.Value(ctxKey{}).(*frame)
	return context.WithValue(ctx, ctxKey{}, f)
}

func frameOf(ctx context.Context) *frame {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(ctxKey{}).(*frame)
	return f
}

// FromContext returns the Result carried by ctx, and whether there was one:
// with stacked Limiters, the innermost's (the one the handler or denied
// handler reading it sits behind). Without one (the request did not go
// through a Limiter, or ctx is nil) it returns the zero Result and false.
func FromContext(ctx context.Context) (Result, bool) {
	if f := frameOf(ctx); f != nil {
		return f.res, true
	}
	return Result{}, false
}

// AllFromContext returns every Result carried by ctx, outermost first: one
// per Limiter the request went through (a global Limiter on the router,
// then a stricter one on the route, say). It returns nil when there is
// none.
func AllFromContext(ctx context.Context) []Result {
	n := 0
	for f := frameOf(ctx); f != nil; f = f.outer {
		n++
	}
	if n == 0 {
		return nil
	}
	out := make([]Result, n)
	for f := frameOf(ctx); f != nil; f = f.outer {
		n--
		out[n] = f.res
	}
	return out
}

// refuse tells every Limiter that limited the request of ctx (its own,
// once its frame is in ctx, and those outside) that the request was not
// served, so that they give their charges back.
func refuse(ctx context.Context) {
	for o := frameOf(ctx); o != nil; o = o.outer {
		if o.limited {
			o.refused.Store(true)
		}
	}
}

// stacked reports whether another Limiter handled the request before f.
func stacked(f *frame) bool {
	for o := f.outer; o != nil; o = o.outer {
		if o.limited {
			return true
		}
	}
	return false
}
