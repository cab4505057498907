// Package storekit is for writers of ratelimit stores: the operations a
// Store may offer beyond Take, which a Limiter looks for (Refunder,
// Resetter, Reserver, Granter, Leaser, Settler, Releaser, FallbackStore,
// Local), and what a store needs beyond the types of package ratelimit. A
// store makes the ratelimit.Receipt of each charge itself and reads it
// back for a refund; checks requests with Validate; keys answers it keeps
// (a cache) by Definition; and, when it wraps another store, checks that
// store's decisions with ratelimit.Decision.Check. Package store/storetest
// checks a store against the stores of this module.
package storekit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
)

// Complete is a Store with every optional operation, as the stores of
// this module are: a compile-time check for writers (var _
// storekit.Complete = (*MyStore)(nil)).
type Complete interface {
	ratelimit.Store
	Resetter
	Refunder
	Reserver
	Granter
	Leaser
	Settler
	Releaser
}

// Resetter is implemented by stores that can forget keys' counters
// (Limiter.Reset).
type Resetter interface {
	// Reset forgets the counters (and any BlockFor penalty) of keys under
	// policy p, as if they had never been charged, in one round trip.
	// Records of request IDs (Request.ID) are kept.
	Reset(ctx context.Context, p *ratelimit.Policy, keys ...string) error
}

// Refunder is implemented by stores that can undo a charge
// (Limiter.Refund, WithRefundIf).
type Refunder interface {
	// Refund takes back what the charge of r still counts, exactly: never
	// below zero, never another charge's units. It refunds whenever asked:
	// the caller sees to it that a charge is refunded once (Limiter.Refund
	// does).
	Refund(ctx context.Context, r ratelimit.Receipt) error
}

// Settler is implemented by stores that can settle a charge: change it to
// the cost it turned out to have once the work was done (Limiter.Settle,
// WithCostAfter).
type Settler interface {
	// Settle changes the charge of r to actual units (0 to
	// ratelimit.MaxSettle), in one store call. Below the charge it takes
	// back the difference, as Refund takes back a whole charge (what
	// still counts, never another charge's units). Above it, it charges
	// the difference to every key of r now, whatever room the limits
	// have: usage past a limit is debt, and the key is denied until its
	// limits have room again. A penalty (BlockFor) neither stops a debt
	// nor starts. It settles whenever asked: the caller sees to it that a
	// charge is settled once (Limiter.Settle does).
	Settle(ctx context.Context, r ratelimit.Receipt, actual int64) error
}

// Releaser is implemented by stores that count requests in flight
// (ratelimit.Concurrent limits).
type Releaser interface {
	// Release frees the slot the charge of r holds in every Concurrent
	// limit, for every key, in one store call: as far as it still counts
	// (a slot lapsed unrenewed, or forgotten by a Reset, frees nothing;
	// never below zero). It frees whenever asked: the caller sees to it
	// that a slot is freed once (Limiter.Release does). A charge of a
	// policy without a Concurrent limit frees nothing.
	Release(ctx context.Context, r ratelimit.Receipt) error
	// Renew records the slots the charge of r holds anew, now, so that
	// they count another lease, and returns the receipt that holds them
	// from now on (for the next Renew and the Release). A slot that had
	// lapsed is taken again, whatever room is left: its request is still
	// in flight.
	Renew(ctx context.Context, r ratelimit.Receipt) (ratelimit.Receipt, error)
}

// Reserver is implemented by stores that can reserve a place in line
// (Limiter.Wait, and the Handler's holding).
type Reserver interface {
	// Reserve is Take for an event that may wait: when the policy's
	// algorithm can record an admission in the future (every limit
	// counted by an exact log, as SlidingLog's and small SlidingWindow
	// limits are, or by the token bucket) and every limit of every key
	// has room by maxDelay from now, the request is admitted and charged
	// as of that time, and Decision.Delay says how long to wait.
	// Otherwise it is Take.
	Reserve(ctx context.Context, req ratelimit.Request, maxDelay time.Duration) (ratelimit.Decision, error)
}

// Granter is implemented by stores that can grant part of a request
// (Limiter.AllowUpTo).
type Granter interface {
	// TakeUpTo grants the largest cost ≤ req.Cost that every limit of every
	// key can admit now, and charges exactly that (Decision.Granted; 0
	// grants and charges nothing, and then the Decision denies, with the
	// wait until a cost of 1 fits). req.Cost must be at least 1.
	TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error)
}

// Leaser is implemented by stores that can lease part of a policy's
// quota to a caller that spends it over a while (ratelimit.WithLease).
type Leaser interface {
	// Lease grants, as TakeUpTo does, the largest cost ≤ req.Cost that
	// every limit of every key can admit now, counting everything
	// recorded, leases still ahead included, and records it as spent at
	// now + hold: its caller may spend it at any time until then. A
	// window limit counts it until hold + Period from now, and a token
	// bucket takes it at now + hold, so its caller's spending never
	// passes a limit in true time, whatever holds other callers lease
	// with, and with the callers that take as they spend (hold 0 is
	// TakeUpTo). Only counters that keep places in line can be leased: a
	// leased policy's (WithLease: they count its fixed windows and
	// approximations as sliding windows), and a policy that reserves (see
	// Reserver); other policies, a hold below 0 or above MaxSpan, and a
	// policy with a Concurrent limit are refused (ErrInvalidRequest). The
	// receipt refunds and settles the lease as any charge.
	Lease(ctx context.Context, req ratelimit.Request, hold time.Duration) (ratelimit.Decision, error)
}

// FallbackStore is implemented by a store that can fail, such as the
// Redis store: it names the store that decides, per process, while it
// fails. A Limiter built without WithFallback and without WithFailureMode
// asks that store whenever this one fails or does not answer in time, so
// that an outage does not leave the routes unlimited; each server then
// counts on its own, and a fleet of N servers admits up to N times the
// limit until the store answers again. The Redis store names a memory
// store (store/memory); the deny cache (store/denycache) names its inner
// store's.
type FallbackStore interface {
	// Fallback returns the store that decides while this one fails, or nil
	// for none. It returns the same store every time: its counters carry
	// over from one failure to the next. That store must not be this one,
	// and should not fail itself (a memory store never does).
	Fallback() ratelimit.Store
}

// Local is implemented by stores that answer without I/O and never block
// beyond a short lock, such as the memory store: a Limiter calls them
// without setting a deadline, which saves a timer per request.
type Local interface {
	ratelimit.Store
	// Local is a marker; it does nothing.
	Local()
}

// Definition returns the name of p and a fingerprint of its whole
// definition, every rate and lease term included. Policies of one ID
// share their counters but may differ in their rates (see
// ratelimit.Policy.ID): a store that keeps answers rather than counters
// (a cache of denials) keys them by Definition, so that an answer under
// one rate is never given under another.
func Definition(p *ratelimit.Policy) string { return plan.Of(p).Def }

// Validate reports, wrapping ratelimit.ErrInvalidRequest, a Request a
// store must refuse: no policy, no keys or more than ratelimit.MaxKeys, an
// empty or repeated key, a negative cost.
func Validate(req ratelimit.Request) error {
	const prefix = "ratelimit/store"
	switch {
	case req.Policy == nil || len(plan.Of(req.Policy).Limits) == 0:
		return fmt.Errorf("%s: %w: no policy (build one with ratelimit.NewPolicy or ParsePolicy)", prefix, ratelimit.ErrInvalidRequest)
	case len(req.Keys) == 0:
		return fmt.Errorf("%s: %w: no keys", prefix, ratelimit.ErrInvalidRequest)
	case len(req.Keys) > ratelimit.MaxKeys:
		return fmt.Errorf("%s: %w: %d keys, at most %d", prefix, ratelimit.ErrInvalidRequest, len(req.Keys), ratelimit.MaxKeys)
	case req.Cost < 0:
		return fmt.Errorf("%s: %w: negative cost %d", prefix, ratelimit.ErrInvalidRequest, req.Cost)
	}
	for i, k := range req.Keys {
		if k == "" {
			return fmt.Errorf("%s: %w: key %d is empty", prefix, ratelimit.ErrInvalidRequest, i)
		}
		for _, prev := range req.Keys[:i] {
			if prev == k {
				return fmt.Errorf("%s: %w: key %d repeats an earlier key", prefix, ratelimit.ErrInvalidRequest, i)
			}
		}
	}
	return nil
}
