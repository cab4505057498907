package ratelimit

import (
	"context"
	"errors"
	"time"
)

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

// ErrInvalidRequest is wrapped by the error a Store returns for a malformed
// Request (nil policy, no keys, too many, empty or repeated keys, negative
// cost). It reports a bug in the caller, not a store failure: a Limiter
// neither counts it against the store's circuit nor asks its fallback.
var ErrInvalidRequest = errors.New("invalid request")

// MaxKeys is the largest number of keys one Request may carry, and so the
// largest number of identifiers a Limiter may have.
const MaxKeys = 16

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
	// are rejected.
	Cost int64
}

// Never is the RetryAfter of a request whose cost exceeds the capacity of a
// limit (Rate, or Burst for the token bucket): it will never be admitted.
const Never time.Duration = -1

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
	// RetryAfter is how long until a request of the same cost could be
	// admitted, if nothing more is charged: 0 when allowed, Never when the
	// cost exceeds a limit's capacity.
	RetryAfter time.Duration
	// Limits holds the state of every limit of the policy, in order, each
	// for its most restrictive key.
	Limits []LimitStatus
}

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
	// RetryAfter is how long until this limit has room for the request's
	// cost: 0 when it has room now, Never when it never will.
	RetryAfter time.Duration
}

// Local is implemented by stores that answer without I/O and never block
// beyond a short lock, such as the memory store. A Limiter calls them
// without setting a deadline, which saves a timer per request.
type Local interface {
	Store
	// Local is a marker; it does nothing.
	Local()
}
