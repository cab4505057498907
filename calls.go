package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// Allow reports whether one event may happen now for all of keys; it is
// AllowN(ctx, 1, keys...).
func (l *Limiter) Allow(ctx context.Context, keys ...string) (Decision, error) {
	return l.AllowN(ctx, 1, keys...)
}

// AllowN asks the store whether an event of the given cost may happen now
// for all of keys under the policy given to New and, if so, charges every
// key. It is the Handler's decision outside HTTP: the keys are the
// caller's (such as "job:" + tenant), and the timeout, fallback, failure
// mode, hooks and observers (with a nil request) and logging are the same.
// A cost of 0 charges nothing and reports whether a cost of 1 would be
// admitted. Dry run does not apply: the Decision is the store's. As in
// Handler, ctx's cancellation does not end the store call: the store
// decides, bounded by the Limiter's timeout (ctx's values reach the
// store). A nil ctx means context.Background().
//
// The error is non-nil when the arguments are invalid (negative cost, no
// key, more than MaxKeys distinct keys or an empty key: then the store is
// not asked and the Decision is the zero value, which denies), or when no
// store could decide: then the Decision is the failure mode's (FailOpen
// allows, FailClosed denies with a RetryAfter of one second) and the error
// says why. When the fallback store decides, its Decision comes with a nil
// error. Callers that only want a yes or no may use Decision.Allowed
// whatever the error. To give the charge back later, see Refund.
func (l *Limiter) AllowN(ctx context.Context, cost int64, keys ...string) (Decision, error) {
	ctx, keys, err := l.checkArgs("AllowN", ctx, cost, keys)
	if err != nil {
		return Decision{}, err
	}
	f := l.start(ctx, nil, l.policy, keys, cost)
	f.record(f.decide(f.ask(opTake)))
	return f.res.Decision, f.res.Err
}

// checkArgs validates the arguments of the calls outside HTTP and returns
// the context (Background for nil) and keys without repeats.
func (l *Limiter) checkArgs(fn string, ctx context.Context, cost int64, keys []string) (context.Context, []string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if cost < 0 {
		return ctx, nil, fmt.Errorf("ratelimit: %s: negative cost %d", fn, cost)
	}
	if len(keys) == 0 {
		return ctx, nil, fmt.Errorf("ratelimit: %s: no keys", fn)
	}
	for i, k := range keys {
		if k == "" {
			return ctx, nil, fmt.Errorf("ratelimit: %s: key %d is empty", fn, i)
		}
	}
	keys = dedupe(keys)
	if len(keys) > MaxKeys {
		return ctx, nil, fmt.Errorf("ratelimit: %s: %d keys, at most %d", fn, len(keys), MaxKeys)
	}
	return ctx, keys, nil
}

// Wait waits until one event may happen for all of keys, charges it, and
// returns; it is WaitN(ctx, 1, keys...).
func (l *Limiter) Wait(ctx context.Context, keys ...string) (Decision, error) {
	return l.WaitN(ctx, 1, keys...)
}

// WaitN waits until an event of the given cost may happen for all of keys
// under the policy given to New, and returns once it is charged; or
// returns an error, having charged nothing, when ctx ends first or its
// deadline is too close for the wait (the error then wraps
// context.DeadlineExceeded). It does not poll: the store's answer says how
// long to wait. Where the policy can reserve (every limit counted by an
// exact log, or the token bucket) and the store can (storekit.Reserver),
// the place in line
// is reserved in the same call, so waiters are served in order and never
// more than the limit admits, measured at the time each is released; a
// waiter whose ctx ends gives its place back. Under other policies WaitN
// waits the store's RetryAfter and asks again, and waiters are served in
// no particular order. A cost above the policy's capacity never fits: an
// error at once. Failures are handled as by AllowN (the failure mode
// decides, and the error says why); dry run does not apply.
func (l *Limiter) WaitN(ctx context.Context, cost int64, keys ...string) (Decision, error) {
	ctx, keys, err := l.checkArgs("WaitN", ctx, cost, keys)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("ratelimit: WaitN: %w", ctx.Err())
	}
	if err != nil {
		return Decision{}, err
	}
	budget := MaxSpan
	if dl, ok := ctx.Deadline(); ok {
		budget = dl.Sub(l.now())
	}
	f := l.start(ctx, nil, l.policy, keys, cost)
	got, left := f.acquire(f.ask(opTake), budget)
	if left != nil {
		return Decision{}, fmt.Errorf("ratelimit: WaitN: %w", left)
	}
	f.record(got)
	d := f.res.Decision
	if f.by == byFailureMode || d.Allowed || cost == 0 {
		return d, f.res.Err
	}
	if d.RetryAfter == Never {
		return d, fmt.Errorf("ratelimit: WaitN: cost %d can never be admitted under policy %q (capacity %d)", cost, l.policy.Name(), l.policy.MaxCost())
	}
	return d, fmt.Errorf("ratelimit: WaitN: the wait (%s) would pass the context's deadline: %w", d.RetryAfter, context.DeadlineExceeded)
}

// AllowUpTo grants the largest cost ≤ max that every limit of every key can
// admit now, and charges exactly that, in one store call: for quota handed
// out in chunks (batch jobs, token budgets for LLM calls). granted is 0
// when nothing fits; the Decision then denies, with the wait until a cost
// of 1 fits. On a Redis Cluster whose keys live on several masters, each
// key grants what fits and the excess over the smallest grant is refunded
// at once. The store must grant (storekit.Granter: the memory and Redis stores do),
// else the error wraps errors.ErrUnsupported. When no store can decide,
// FailOpen grants max and FailClosed 0, with the error saying why; the
// rest is as AllowN. max must be at least 1.
func (l *Limiter) AllowUpTo(ctx context.Context, max int64, keys ...string) (granted int64, d Decision, err error) {
	ctx, keys, err = l.checkArgs("AllowUpTo", ctx, max, keys)
	if err != nil {
		return 0, Decision{}, err
	}
	if max < 1 {
		return 0, Decision{}, fmt.Errorf("ratelimit: AllowUpTo: max %d, want at least 1", max)
	}
	if !implements[granter](l.store) {
		return 0, Decision{}, fmt.Errorf("ratelimit: AllowUpTo: the store (%T) cannot grant part of a request: %w", l.store, errors.ErrUnsupported)
	}
	f := l.start(ctx, nil, l.policy, keys, max)
	got := f.decide(f.ask(opUpTo))
	if got.by == byFailureMode && got.d.Allowed {
		got.d.Granted = max
	}
	f.record(got)
	return f.res.Decision.Granted, f.res.Decision, f.res.Err
}

// Reset forgets the counters of keys under the Limiter's policy (and any
// BlockFor penalty), as if they had never been charged: after a successful
// login, say. It is ResetPolicy with the policy given to New.
func (l *Limiter) Reset(ctx context.Context, keys ...string) error {
	return l.ResetPolicy(ctx, l.policy, keys...)
}

// ResetPolicy forgets the counters of keys under policy p, for policies
// chosen per request (WithPolicyFunc). It resets the store, in one round
// trip, and the fallback store if there is one; a deny cache in front of
// the store (store.DenyCache) forgets the keys too, while other processes'
// deny caches agree within their maximum hold (1s by default). The store
// must reset (storekit.Resetter: the memory and Redis stores do), else the error
// wraps errors.ErrUnsupported. A store failure is returned as is: the
// failure mode does not apply.
func (l *Limiter) ResetPolicy(ctx context.Context, p *Policy, keys ...string) error {
	if p == nil {
		return errors.New("ratelimit: ResetPolicy: nil policy")
	}
	ctx, keys, err := l.checkArgs("Reset", ctx, 0, keys)
	if err != nil {
		return err
	}
	rs, ok := l.store.(resetter)
	if !ok {
		return fmt.Errorf("ratelimit: Reset: the store (%T) cannot reset keys: %w", l.store, errors.ErrUnsupported)
	}
	if p.lease != nil {
		l.leases.forget(p, keys)
	}
	err = l.op(ctx, nil, p, byStore, "reset", func(ctx context.Context) error { return rs.Reset(ctx, p, keys...) })
	if fr, ok := l.fallback.(resetter); ok {
		if ferr := l.op(ctx, nil, p, byFallback, "reset", func(ctx context.Context) error { return fr.Reset(ctx, p, keys...) }); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}
	return err
}

// Refund gives back the charge d reports (Decision.Receipt), exactly: it
// takes back what that charge still counts, never below zero, never
// another request's units, in one store call to the store that made the
// charge. A charge is refunded at most once in a process, whoever asks:
// a second Refund of it (or of a copy of d) does nothing and returns nil,
// as does the Refund of a Decision that charged nothing. For a refund by
// outcome in HTTP, see WithRefundIf. The store must refund (storekit.Refunder: the
// memory and Redis stores are), else the error wraps errors.ErrUnsupported
// (and the charge stays claimed: it is not refunded again). A store
// failure is returned as is.
func (l *Limiter) Refund(ctx context.Context, d Decision) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return l.refund(ctx, nil, d.Receipt)
}

// Settle changes the charge d reports (Decision.Receipt) to actual units,
// the cost the work turned out to have (tokens generated, bytes sent,
// rows scanned), in one store call to the store that made the charge.
// Below the charge it gives the difference back, as Refund gives a whole
// charge back. Above it, it charges the difference to every key now,
// whatever room the limits have: usage past a limit is debt, and the keys
// are denied (RateLimit r=0, with a Retry-After that says when) until
// their limits have room again. No request is admitted while a key's
// settled usage fills a limit. A penalty (BlockFor) neither stops a debt
// nor starts. A charge is settled at most once in a process, whoever asks:
// a second Settle of it (or of a copy of d), or a Settle after its Refund,
// returns ErrSettled; a Refund after a Settle does nothing. The Settle of
// a Decision that charged nothing (a denial, a peek, a repeated ID, a
// failure mode's answer) does nothing and returns nil. actual must be 0
// to MaxSettle. Under a sliding window, a fixed window or a log, debt past
// one limit's worth changes no decision (the window is full until the
// debt leaves it); a token bucket owes all of it, up to MaxSpan. A log
// (SlidingLog, and SlidingWindow up to ExactRateMax) keeps at most its
// ring of debt, the rate of the policy that settled: a policy of the same
// name with a larger rate (see Policy.ID) sees no more. A debt voids the
// refunds of the keys' earlier charges (a refund or settle of one gives
// nothing back), as a Reset does: the log could not tell their units from
// the debt's. On a
// Redis Cluster whose keys live on several masters, each key owes its
// debt on its own: a master that fails leaves the others charged, and
// the error says so. For settling in HTTP, see WithCostAfter. The store
// must settle (storekit.Settler: the memory and Redis stores do), else the error
// wraps errors.ErrUnsupported (and the charge stays claimed). A store
// failure is returned as is.
func (l *Limiter) Settle(ctx context.Context, d Decision, actual int64) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return l.settle(ctx, nil, d.Receipt, actual)
}

// dedupe returns keys without repeats, copying only if there are any.
func dedupe(keys []string) []string {
	for i := 1; i < len(keys); i++ {
		for j := 0; j < i; j++ {
			if keys[i] == keys[j] {
				out := make([]string, 0, len(keys))
			outer:
				for _, k := range keys {
					for _, o := range out {
						if o == k {
							continue outer
						}
					}
					out = append(out, k)
				}
				return out
			}
		}
	}
	return keys
}

// Release frees the slots d's charge holds in the policy's Concurrent
// limits, for every key, in one store call to the store that made the
// charge, so that another request can start. The Handler releases a
// request's slots when its handler returns (also on a panic, and when the
// client left), renewing them every quarter lease while it runs; Release
// is for requests decided outside HTTP (Allow, AllowN, WaitN), which are
// not renewed: release within half the lease (Limit.Period of the
// Concurrent limit), or the slot lapses by itself within the lease. A
// charge is released at most once in a process, whoever asks; a Decision
// that charged nothing, or of a policy without a Concurrent limit,
// releases nothing and returns nil. A Refund or Settle of the charge does
// not free its slots. The store must release (storekit.Releaser: the
// memory and Redis stores do), else the error wraps errors.ErrUnsupported.
// A store failure is returned as is: the slot then lapses after its lease.
func (l *Limiter) Release(ctx context.Context, d Decision) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return l.release(ctx, nil, d.Receipt)
}

// A Call is a request that comes through another transport than net/http,
// such as a gRPC call, as Serve decides it: the Limiter's identifiers,
// skip, policy and cost functions, hooks and observers see it as an
// *http.Request with these fields (Method POST, URL.Path and RequestURI
// the Method here, Proto HTTP/2.0) and the call's context.
type Call struct {
	// Method is the call's method, the request's path: a gRPC full method
	// ("/pkg.Service/Method"), say.
	Method string
	// RemoteAddr is the peer's address, host:port, as ByIP reads it.
	RemoteAddr string
	// Host is the authority the call was sent to.
	Host string
	// Header holds the call's metadata, keys in canonical form
	// (http.CanonicalHeaderKey), as identifiers such as ByHeader read it.
	Header http.Header
}

// request is c as an *http.Request on ctx.
func (c Call) request(ctx context.Context) *http.Request {
	h := c.Header
	if h == nil {
		h = http.Header{}
	}
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: c.Method}, RequestURI: c.Method,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Host: c.Host, RemoteAddr: c.RemoteAddr}
	return r.WithContext(ctx)
}

// Serve decides the call c as Handler decides an HTTP request, in the
// same steps (skip, identifiers, policy and cost, one store call, holding
// a wait below the maximum delay, failure mode, dry run), and runs run
// when c is served: admitted, passed unlimited (WithSkip, no identifier
// applies), in a dry run or by FailOpen. run gets a context that carries
// the Result (FromContext) and the rate-limit fields to send before its
// answer (what Handler writes as headers; empty when unlimited), and
// returns the status its answer stands for, which WithRefundIf and
// WithCostAfter are given (with 0 bytes written); a Concurrent limit's
// slot is held while run runs. run is not called when c is refused:
// Serve then returns the Result, whose Outcome is Denied (the fields
// carry RateLimit and Retry-After) or FailedClosed (Retry-After: 1), or
// whose Outcome is Abandoned and Err ctx's error when the caller went
// away while c was held.
// served reports that run was called. Stacked Limiters see each other
// through ctx, as through an HTTP request's.
func (l *Limiter) Serve(ctx context.Context, c Call, run func(ctx context.Context, fields http.Header) (status int)) (res Result, fields http.Header, served bool) {
	fields = http.Header{}
	f := l.handle(c.request(ctx), fields, func(req *http.Request, _ Outcome, serve bool) (int, int64) {
		if !serve {
			return 0, 0
		}
		served = true
		return run(req.Context(), fields), 0
	})
	if f == nil {
		return Result{}, fields, served
	}
	return f.res, fields, served
}
