package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// What a Limiter asks its Store and what the Store answers. The
// operations a store may offer beyond Take (refunds, resets, places in
// line, partial grants, leases, settles, slots in flight) are interfaces
// of package store/storekit, where store writers look; a Limiter asked
// for one its store lacks returns an error wrapping errors.ErrUnsupported.

// Store decides and records requests against a Policy. Implementations live
// in the store package: store.NewRedis (shared across a fleet) and
// store.NewMemory (one process; also the executable reference of the
// algorithms). A Store must be safe for concurrent use.
type Store interface {
	// Take checks every limit of req.Policy for every key in req.Keys and,
	// only if all of them have room for req.Cost, charges all of them,
	// atomically. A denied request charges nothing. The error is non-nil
	// only when the store could not decide (network, timeout, bad request);
	// the Decision is then the zero value. Take must return by ctx's
	// deadline: the Limiter relies on it and starts no goroutine of its own.
	Take(ctx context.Context, req Request) (Decision, error)
}

// Bounds of what a Store is asked and answers.
const (
	// MaxKeys is the largest number of keys one Request may carry, and so
	// the largest number of identifiers a Limiter may have.
	MaxKeys = 16
	// MaxRepeats is how many times a request ID (Request.ID) is answered
	// with its first Decision without being charged again.
	MaxRepeats = 3
	// MaxSettle is the largest actual cost a charge may be settled to
	// (Limiter.Settle): 2^40 units.
	MaxSettle = 1 << 40
	// Never is the RetryAfter of a request whose cost exceeds the
	// capacity of a limit (Rate, or Burst for the token bucket): it will
	// never be admitted.
	Never time.Duration = -1
)

// Errors a Limiter reports, wrapped, and stores return.
var (
	// ErrInvalidRequest is wrapped by the error a Store returns for a
	// malformed Request (nil policy, no keys, too many, empty or repeated
	// keys, negative cost). It reports a bug in the caller, not a store
	// failure: a Limiter neither counts it against the store's circuit
	// nor asks its fallback.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrCircuitOpen is wrapped by the error a Limiter reports when it did
	// not ask its store because the store's circuit is open (see
	// WithCircuitBreaker). The fallback store or the failure mode decided.
	ErrCircuitOpen = errors.New("store circuit open")
	// ErrCostOverCapacity is wrapped by the error the error hook and the
	// log get for a request whose cost is above the capacity of its policy
	// (its smallest Rate, or Burst): it can never be admitted, so it is a
	// configuration mistake (say WithCost above a cheaper tier's capacity,
	// from WithPolicyFunc). The request is denied, without Retry-After.
	ErrCostOverCapacity = errors.New("cost above the policy's capacity")
	// ErrSettled is returned by Settle for a charge already settled or
	// refunded: a charge is settled at most once, and a settled one is not
	// refunded.
	ErrSettled = errors.New("ratelimit: the charge was already settled or refunded")
)

// Request is what a Store is asked.
type Request struct {
	// Policy is the set of limits to check. Required.
	Policy *Policy
	// Keys identify the caller, one per identifier ("ip:203.0.113.7",
	// "user:42"). Each key has its own counters; all must have room. One
	// to MaxKeys distinct, non-empty keys are required; any length is
	// accepted (stores hash long keys).
	Keys []string
	// Cost is the weight of the request in units of Limit.Rate. 0 peeks:
	// the Decision reports whether a request of cost 1 would be admitted
	// and the current Remaining, and nothing is charged. Negative costs
	// are rejected. For Granter.TakeUpTo it is the most to grant.
	Cost int64
	// ID, when not empty, makes the request count once: a request whose ID
	// was already charged under the same policy for a key, within the
	// policy's longest Period, gets that first Decision again (Repeated
	// set) and is charged nothing for that key; at most MaxRepeats times,
	// after which a repeat is charged like any request, so reusing an ID is
	// never a free pass. Only admitted requests are remembered: the retry
	// of a denied request is decided afresh. Stores that do not know IDs
	// ignore the field (repeats are then charged), and so do this
	// module's under a policy with a Concurrent limit: every run of a
	// request holds a slot. The stores keep a hash of the ID, never the
	// ID itself.
	ID string
}

// Decision is what a Store answers.
type Decision struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Limit is the index, in Policy.Limits, of the most restrictive limit:
	// when denied, the denying limit that frees up last; when allowed, the
	// limit with the least Remaining (ties: the longest ResetAfter).
	Limit int
	// Key is the index, in Request.Keys, of the key Limit applies to.
	Key int
	// Remaining is the cost the most restrictive limit can still admit now,
	// after this request's charge.
	Remaining int64
	// ResetAfter is how long until the most restrictive limit has its whole
	// quota back, if nothing more is charged.
	ResetAfter time.Duration
	// RefillAfter is how long the most restrictive limit admits no more
	// than Remaining, whatever is asked: until some of its quota comes
	// back, if nothing more is charged (the RateLimit header's t of
	// draft-11). With the whole quota there, it is how long the limit
	// admits no more than it: a period, a sub-bucket, an emission interval,
	// or what is left of a window. It is 0, no claim, for a log or a token
	// bucket with places in line (Limiter.Wait) released later: a charge
	// made before such a release need not lower what the limit admits. A
	// sliding window in sub-buckets with Remaining above 0 whose oldest
	// counting sub-bucket is neither the edge one nor the current one
	// claims less, never more: until the one after the edge could leave at
	// the earliest, less than a sub-bucket away (knowing the oldest would
	// cost the Redis store another read); with Remaining 0 the claim is
	// exact.
	RefillAfter time.Duration
	// RetryAfter is how long until a request of the same cost could be
	// admitted, if nothing more is charged: 0 when allowed, Never when the
	// cost exceeds a limit's capacity.
	RetryAfter time.Duration
	// Limits holds the state of every limit of the policy, in order, each
	// for its most restrictive key.
	Limits []LimitStatus
	// Granted is the cost charged: the request's cost when admitted (or,
	// for Granter.TakeUpTo, the part of it granted), 0 when denied or for a
	// peek. A Repeated decision reports the first request's grant.
	Granted int64
	// Delay is how long the caller must wait before the admitted event may
	// happen: 0 unless a Reserver reserved a place in line for it.
	Delay time.Duration
	// Repeated reports that the request's ID (Request.ID) was charged
	// before: this is that first Decision again, and nothing was charged.
	Repeated bool
	// InFlight reports a denial by a Concurrent limit (the headline one,
	// Limit): its slots are all held by requests in flight. RetryAfter is
	// then when a slot whose holder stopped renewing it could lapse, no
	// promise: a slot frees when a request ends. The headers send no
	// Retry-After for it.
	InFlight bool
	// Receipt records the charge, for its refund or settle
	// (Limiter.Refund, Limiter.Settle); the zero Receipt when nothing was
	// charged.
	Receipt Receipt
}

// Receipt records one charge, so that it can be refunded or settled
// exactly (Limiter.Refund, Limiter.Settle): a refund takes back what that
// charge still counts and never touches another request's charge. The
// store that charged fills it in; the zero Receipt stands for no charge.
// Copies of a Receipt a Limiter returned share one claim, so that a charge
// is refunded or settled at most once in a process, whoever asks.
type Receipt struct {
	// Policy is the policy charged under; nil when the Receipt stands for
	// no charge (a denial, a Decision of no store).
	Policy *Policy
	// Keys are the keys charged (the store keeps them: do not modify).
	Keys []string
	// Cost is the units charged.
	Cost int64
	// Marks are the store's own record of the charge, for it alone to
	// read (for the stores of this module: per key, the time of the
	// charge, the key's refund count then, and one number per limit).
	Marks []int64
	c     *claim // set by the Limiter that returned the charge
}

// claim is what the copies of a Receipt share.
type claim struct {
	fallback bool // the Limiter's fallback store charged, not its store
	done     atomic.Bool
	// Of a charge holding slots (Concurrent): released once, and the
	// receipt its latest renewal answered, which holds them now.
	released atomic.Bool
	renewed  atomic.Pointer[Receipt]
	// adjust, for a request admitted from grants of a leased policy
	// (WithLease), changes what it spent of them by delta units, in the
	// process (lease_grants.go).
	adjust func(ctx context.Context, r *http.Request, delta int64) error
}

// claimed returns r with a claim of its own when it has none: the
// charge of the Limiter's store, or of its fallback.
func (r Receipt) claimed(fallback bool) Receipt {
	if r.Policy != nil && r.c == nil {
		r.c = &claim{fallback: fallback}
	}
	return r
}

// claim reports whether this call is the first to claim r for a refund or
// a settle: true once, false ever after (and for the zero Receipt), for r
// and all its copies. A Receipt no Limiter returned has no claim to keep:
// it is claimed every time.
func (r Receipt) claim() bool {
	if r.c == nil {
		return r.Policy != nil
	}
	return r.c.done.CompareAndSwap(false, true)
}

// holding returns the receipt that holds r's slots now: its latest
// renewal's, or r.
func (r Receipt) holding() Receipt {
	if r.c != nil {
		if n := r.c.renewed.Load(); n != nil {
			return *n
		}
	}
	return r
}

// withCost returns the charge r with its cost as c: the same charge as a
// settle left it (its keys, policy, marks and store), claimable anew.
func (r Receipt) withCost(c int64) Receipt {
	r.Cost = c
	if r.c != nil {
		r.c = &claim{fallback: r.c.fallback}
	}
	return r
}

// fromFallback reports that the Limiter's fallback store charged r.
func (r Receipt) fromFallback() bool { return r.c != nil && r.c.fallback }

// LimitStatus is the state of one limit of the policy for one key.
type LimitStatus struct {
	// Key is the index, in Request.Keys, of the key this status describes:
	// the one with the least room for this limit.
	Key int
	// Allowed reports whether this limit had room for the request's cost.
	Allowed bool
	// Remaining is the cost this limit can still admit now.
	Remaining int64
	// ResetAfter is how long until this limit has its whole quota back.
	ResetAfter time.Duration
	// RefillAfter is how long this limit admits no more than Remaining
	// (see Decision.RefillAfter).
	RefillAfter time.Duration
	// RetryAfter is how long until this limit has room for the request's
	// cost: 0 when it has room now, Never when it never will.
	RetryAfter time.Duration
}

// Check reports a Decision that points outside its Request (a limit or
// key index out of range, limit states of another policy, a negative
// delay or grant, a grant above the cost), so that a faulty store cannot
// make the headers index out of range. The Limiter checks every store's
// answer with it; a store that wraps another checks that store's.
func (d Decision) Check(req Request) error {
	if req.Policy == nil {
		return errors.New("invalid decision: the request has no policy")
	}
	n := len(req.Policy.limits)
	if d.Limit < 0 || d.Limit >= n || d.Key < 0 || d.Key >= len(req.Keys) || len(d.Limits) != 0 && len(d.Limits) != n {
		return fmt.Errorf("invalid decision: limit %d, key %d, %d limit states for %d limits and %d keys",
			d.Limit, d.Key, len(d.Limits), n, len(req.Keys))
	}
	for i, s := range d.Limits {
		if s.Key < 0 || s.Key >= len(req.Keys) {
			return fmt.Errorf("invalid decision: limit %d names key %d of %d", i, s.Key, len(req.Keys))
		}
	}
	// A repeated ID reports its first request's grant, whatever this one's cost.
	if d.Delay < 0 || d.Granted < 0 || d.Granted > max(req.Cost, 0) && !d.Repeated {
		return fmt.Errorf("invalid decision: delay %s, granted %d of cost %d", d.Delay, d.Granted, req.Cost)
	}
	return nil
}

// The operations a store may offer beyond Take, as store/storekit names
// them for store writers (storekit.Resetter, storekit.Refunder, ...): a
// Limiter looks for them in its stores.
type (
	resetter interface {
		Reset(ctx context.Context, p *Policy, keys ...string) error
	}
	refunder interface {
		Refund(ctx context.Context, r Receipt) error
	}
	settler interface {
		Settle(ctx context.Context, r Receipt, actual int64) error
	}
	releaser interface {
		Release(ctx context.Context, r Receipt) error
		Renew(ctx context.Context, r Receipt) (Receipt, error)
	}
	reserver interface {
		Reserve(ctx context.Context, req Request, maxDelay time.Duration) (Decision, error)
	}
	granter interface {
		TakeUpTo(ctx context.Context, req Request) (Decision, error)
	}
	leaser interface {
		Lease(ctx context.Context, req Request, hold time.Duration) (Decision, error)
	}
	fallbackStore interface{ Fallback() Store }
	// local stores answer without I/O and never block beyond a short lock
	// (storekit.Local): a Limiter calls them without setting a deadline,
	// which saves a timer per request.
	local interface{ Local() }
)
