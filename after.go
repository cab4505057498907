package ratelimit

import "net/http"

// What happens to a request's charge after the handler answered: a refund
// by outcome (WithRefundIf), or a settle to the cost the response turned
// out to have (WithCostAfter). The Handler runs them (handler.go's serve).

// WithRefundIf gives a request's charge back after the handler answered,
// when fn says so, given the status the handler wrote (200 if it wrote
// none; 0 if it hijacked the connection). Typical uses: count only failed
// logins (refund when status < 400), do not charge server errors (status
// ≥ 500). The refund is exact (Refunder): it takes back what the charge
// still counts, never below zero, never another request's units; a charge
// is refunded at most once, whatever else asks (stacked Limiters, a held
// request whose client left, Limiter.Refund). The status is captured
// without hiding http.Flusher, http.Hijacker or http.ResponseController
// from the handler. fn must be safe for concurrent use; the store must be
// a Refunder (the memory and Redis stores are), or New fails.
func WithRefundIf(fn func(r *http.Request, status int) bool) Option {
	return required("WithRefundIf", "function", fn, func(c *config) { c.refundIf = fn })
}

// WithCostAfter settles each admitted request's charge, after the handler
// answered, to the cost fn returns (Limiter.Settle), given the status the
// handler wrote (as WithRefundIf gives it) and the bytes of body it wrote:
// for APIs metered by what a response turned out to cost (tokens
// generated, bytes sent). The request is charged its up-front cost
// (WithCost, WithCostFunc: an estimate) and the headers tell that; the
// settle charges the difference or gives it back, once. Usage past a
// limit is debt: later requests of the identity are denied until the
// limits have room again. A cost below 0 settles to 0, above MaxSettle to
// MaxSettle. When WithRefundIf refunds a request, it is not settled; a
// handler that panics keeps its up-front charge. A store error goes to
// the error hook and the log. fn must be safe for concurrent use; the
// store must be a Settler (the memory and Redis stores are), or New
// fails.
func WithCostAfter(fn func(r *http.Request, status int, written int64) int64) Option {
	return required("WithCostAfter", "function", fn, func(c *config) { c.costAfter = fn })
}

// settleAfter settles d's charge to WithCostAfter's cost, held to 0 ..
// MaxSettle; the error goes to the hooks and the log.
func (l *Limiter) settleAfter(r *http.Request, d Decision, actual int64) {
	_ = l.settle(r.Context(), r, d, min(max(actual, 0), MaxSettle))
}
