// Package storekit is for writers of ratelimit stores: what a Store needs
// beyond the types of package ratelimit. A store makes the Receipt of each
// charge with NewReceipt and reads it back, for a refund, with ChargeOf;
// checks requests with Validate; keys answers it keeps (a cache) by
// Definition; and, when it wraps another store, checks that store's
// decisions with CheckDecision. A store that answers
// without I/O implements Local. Package store/storetest checks a store
// against the stores of this module.
package storekit

import (
	"fmt"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/bridge"
)

// Complete is a Store with every optional operation of package
// ratelimit, as the stores of this module are: a compile-time check for
// writers (var _ storekit.Complete = (*MyStore)(nil)).
type Complete interface {
	ratelimit.Store
	ratelimit.Resetter
	ratelimit.Refunder
	ratelimit.Reserver
	ratelimit.Granter
}

// Local is implemented by stores that answer without I/O and never block
// beyond a short lock, such as the memory store: a Limiter calls them
// without setting a deadline, which saves a timer per request.
type Local interface {
	ratelimit.Store
	// Local is a marker; it does nothing.
	Local()
}

// Charge is what a Receipt records of one charge: the policy it was made
// under, the keys charged, the cost, and the store's own marks (for the
// stores of this module: per key, the time of the charge, the key's
// refund count then, and one number per limit).
type Charge struct {
	Policy *ratelimit.Policy
	Keys   []string
	Cost   int64
	Marks  []int64
}

// Definition returns the name of p and a fingerprint of its whole
// definition, every rate included. Policies of one ID share their
// counters but may differ in their rates (see ratelimit.Policy.ID): a
// store that keeps answers rather than counters (a cache of denials)
// keys them by Definition, so that an answer under one rate is never
// given under another.
func Definition(p *ratelimit.Policy) string { return bridge.Definition(p) }

// NewReceipt returns the Receipt of a charge of cost, under p, for keys
// (which it keeps: do not modify them), with the store's marks.
func NewReceipt(p *ratelimit.Policy, keys []string, cost int64, marks []int64) ratelimit.Receipt {
	return bridge.NewReceipt(p, keys, cost, marks).(ratelimit.Receipt)
}

// ChargeOf returns what r records; a nil Policy for the zero Receipt.
func ChargeOf(r ratelimit.Receipt) Charge {
	p, keys, cost, marks := bridge.ReadReceipt(r)
	return Charge{Policy: p.(*ratelimit.Policy), Keys: keys, Cost: cost, Marks: marks}
}

// LeaseCounters returns the policy a Limiter leases p's quota under
// (ratelimit.WithLease, ratelimit.Leaser): the counters of p's leases,
// apart from p's own, whose identities keep places in line ahead of now.
// It is nil when p is not leased. A Leaser refuses other policies than
// these and those that reserve (ratelimit.Policy.Reserves).
func LeaseCounters(p *ratelimit.Policy) *ratelimit.Policy {
	return bridge.LeaseCounters(p).(*ratelimit.Policy)
}

// CheckDecision reports a Decision that points outside its Request (a
// limit or key index out of range, limit states of another policy, a
// negative delay or grant, a grant above the cost), so that a faulty store
// cannot make the headers index out of range. The Limiter checks every
// store's answer with it; a store that wraps another checks that store's.
func CheckDecision(d ratelimit.Decision, req ratelimit.Request) error {
	return bridge.CheckDecision(d, req)
}

// Validate reports, wrapping ratelimit.ErrInvalidRequest, a Request a
// store must refuse: no policy, no keys or more than ratelimit.MaxKeys, an
// empty or repeated key, a negative cost.
func Validate(req ratelimit.Request) error {
	const prefix = "ratelimit/store"
	switch {
	case req.Policy == nil || req.Policy.NumLimits() == 0:
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
