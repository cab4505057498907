package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/bridge"
	"github.com/ratelimitkit/ratelimit/internal/layout"
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

// MaxRepeats is how many times a request ID (Request.ID) is answered with
// its first Decision without being charged again.
const MaxRepeats = 3

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
	// RefillAfter is how long the most restrictive limit admits no more
	// than Remaining, whatever is asked: until some of its quota comes
	// back, if nothing more is charged (the RateLimit header's t of
	// draft-11). With the whole quota there, it is how long the limit
	// admits no more than it: a period, a sub-bucket, an emission interval,
	// or what is left of a window. It is 0, no claim, for a log or a token
	// bucket with places in line (Limiter.Wait) released later: a charge
	// made before such a release need not lower what the limit admits. A
	// sliding window in sub-buckets with Remaining above 0 whose oldest
	// counting sub-bucket is neither the edge one, the next nor the
	// current one claims less, never more: until the one after the edge
	// and the next could leave at the earliest (knowing the oldest would
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
	// Receipt identifies the charge, for a refund (Refunder, Limiter.Refund);
	// the zero Receipt when nothing was charged.
	Receipt Receipt
}

// Receipt identifies one charge, so that it can be refunded exactly
// (Limiter.Refund): a refund takes back what that charge still counts and
// never touches another request's charge. The zero Receipt stands for no
// charge. It is opaque: stores make and read receipts with package
// store/storekit. Copies of a Receipt share one claim, so that a charge is
// refunded at most once in a process, whoever asks.
type Receipt struct{ r *receipt }

type receipt struct {
	policy *Policy
	keys   []string
	cost   int64
	marks  []int64
	store  Store // the store that charged, set by the Limiter
	done   atomic.Bool
	// Of a charge holding slots (Concurrent): released once, and the
	// receipt its latest renewal answered, which holds them now.
	released atomic.Bool
	renewed  atomic.Pointer[receipt]
	// Of a request admitted from grants of a leased policy (WithLease):
	// its share of each key's grant, refunded and settled in the process.
	leases []leaseUse
}

// IsZero reports whether r stands for no charge.
func (r Receipt) IsZero() bool { return r.r == nil }

// claim reports whether this call is the first to claim r for a refund:
// true once, false ever after (and for the zero Receipt), for r and all its
// copies.
func (r Receipt) claim() bool {
	return r.r != nil && r.r.done.CompareAndSwap(false, true)
}

// holding returns the receipt that holds r's slots now: its latest
// renewal's, or r.
func (r Receipt) holding() Receipt {
	if r.r != nil {
		if n := r.r.renewed.Load(); n != nil {
			return Receipt{n}
		}
	}
	return r
}

// withCost returns the charge r with its cost as c: the same charge as a
// settle left it (its keys, policy, marks and store), claimable anew.
func (r Receipt) withCost(c int64) Receipt {
	n := &receipt{policy: r.r.policy, keys: r.r.keys, cost: c, marks: r.r.marks, store: r.r.store}
	return Receipt{n}
}

func (r Receipt) withStore(s Store) {
	if r.r != nil && r.r.store == nil {
		r.r.store = s
	}
}

func (r Receipt) madeBy() Store {
	if r.r == nil {
		return nil
	}
	return r.r.store
}

func (r Receipt) policy() *Policy {
	if r.r == nil {
		return nil
	}
	return r.r.policy
}

func init() {
	bridge.Layout = func(p any) *layout.Policy { return p.(*Policy).layout }
	bridge.Definition = func(p any) string { return p.(*Policy).def }
	bridge.NewReceipt = func(p any, keys []string, cost int64, marks []int64) any {
		return Receipt{&receipt{policy: p.(*Policy), keys: keys, cost: cost, marks: marks}}
	}
	bridge.ReadReceipt = func(r any) (any, []string, int64, []int64) {
		rc := r.(Receipt)
		if rc.r == nil {
			return (*Policy)(nil), nil, 0, nil
		}
		return rc.r.policy, rc.r.keys, rc.r.cost, rc.r.marks
	}
	bridge.CheckDecision = func(d, req any) error { return checkDecision(d.(Decision), req.(Request)) }
	bridge.LeaseCounters = func(p any) any {
		if l := p.(*Policy).lease; l != nil {
			return l.store
		}
		return (*Policy)(nil)
	}
	bridge.SetClock = func(l any, now func() time.Time, sleep func(context.Context, time.Duration) error) {
		l.(*Limiter).setClock(now)
		l.(*Limiter).sleep = sleep
	}
}

// The operations below are optional: a Store implements those it can, and
// wrappers of stores (store.DenyCache) forward them. A Limiter asked for an
// operation its store lacks returns an error wrapping errors.ErrUnsupported.

// Resetter is implemented by stores that can forget keys' counters.
type Resetter interface {
	// Reset forgets the counters (and any BlockFor penalty) of keys under
	// policy p, as if they had never been charged, in one round trip.
	// Records of request IDs (Request.ID) are kept.
	Reset(ctx context.Context, p *Policy, keys ...string) error
}

// Refunder is implemented by stores that can undo a charge.
type Refunder interface {
	// Refund takes back what the charge of r still counts, exactly: never
	// below zero, never another charge's units. It refunds whenever asked:
	// the caller sees to it that a charge is refunded once (Limiter.Refund
	// does).
	Refund(ctx context.Context, r Receipt) error
}

// Settler is implemented by stores that can settle a charge: change it to
// the cost it turned out to have once the work was done.
type Settler interface {
	// Settle changes the charge of r to actual units (0 to MaxSettle), in
	// one store call. Below the charge it takes back the difference, as
	// Refund takes back a whole charge (what still counts, never another
	// charge's units). Above it, it charges the difference to every key of
	// r now, whatever room the limits have: usage past a limit is debt,
	// and the key is denied until its limits have room again. A penalty
	// (BlockFor) neither stops a debt nor starts. It settles whenever
	// asked: the caller sees to it that a charge is settled once
	// (Limiter.Settle does).
	Settle(ctx context.Context, r Receipt, actual int64) error
}

// Releaser is implemented by stores that count requests in flight
// (Concurrent limits).
type Releaser interface {
	// Release frees the slot the charge of r holds in every Concurrent
	// limit, for every key, in one store call: as far as it still counts
	// (a slot lapsed unrenewed, or forgotten by a Reset, frees nothing;
	// never below zero). It frees whenever asked: the caller sees to it
	// that a slot is freed once (Limiter.Release does). A charge of a
	// policy without a Concurrent limit frees nothing.
	Release(ctx context.Context, r Receipt) error
	// Renew records the slots the charge of r holds anew, now, so that
	// they count another lease, and returns the receipt that holds them
	// from now on (for the next Renew and the Release). A slot that had
	// lapsed is taken again, whatever room is left: its request is still
	// in flight.
	Renew(ctx context.Context, r Receipt) (Receipt, error)
}

// MaxSettle is the largest actual cost a charge may be settled to
// (Settler, Limiter.Settle): 2^40 units.
const MaxSettle = 1 << 40

// Reserver is implemented by stores that can reserve a place in line.
type Reserver interface {
	// Reserve is Take for an event that may wait: when the policy's
	// algorithm can record an admission in the future (the exact log of
	// SlidingLog and of small SlidingWindow limits, and the token bucket:
	// see Policy.Reserves) and every limit of every key has room by
	// maxDelay from now, the request is admitted and charged as of that
	// time, and Decision.Delay says how long to wait. Otherwise it is Take.
	Reserve(ctx context.Context, req Request, maxDelay time.Duration) (Decision, error)
}

// Granter is implemented by stores that can grant part of a request.
type Granter interface {
	// TakeUpTo grants the largest cost ≤ req.Cost that every limit of every
	// key can admit now, and charges exactly that (Decision.Granted; 0
	// grants and charges nothing, and then the Decision denies, with the
	// wait until a cost of 1 fits). req.Cost must be at least 1.
	TakeUpTo(ctx context.Context, req Request) (Decision, error)
}

// Leaser is implemented by stores that can lease part of a policy's
// quota to a caller that spends it over a while (WithLease).
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
	// policy that reserves (Policy.Reserves), and the counters a Limiter
	// leases a WithLease policy under (store/storekit.LeaseCounters);
	// other policies, a hold below 0 or above MaxSpan, and a policy with
	// a Concurrent limit are refused (ErrInvalidRequest). The receipt
	// refunds and settles the lease as any charge.
	Lease(ctx context.Context, req Request, hold time.Duration) (Decision, error)
}

// FallbackStore is implemented by a Store that can fail, such as the Redis
// store: it names the store that decides, per process, while it fails. A
// Limiter built without WithFallback and without WithFailureMode asks that
// store whenever this one fails or does not answer in time, so that an
// outage does not leave the routes unlimited; each server then counts on
// its own, and a fleet of N servers admits up to N times the limit until
// the store answers again. The Redis store names a memory store
// (store/memory); the deny cache (store/denycache) names its inner
// store's.
type FallbackStore interface {
	// Fallback returns the store that decides while this one fails, or nil
	// for none. It returns the same store every time: its counters carry
	// over from one failure to the next. That store must not be this one,
	// and should not fail itself (a memory store never does).
	Fallback() Store
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
	// RefillAfter is how long this limit admits no more than Remaining
	// (see Decision.RefillAfter).
	RefillAfter time.Duration
	// RetryAfter is how long until this limit has room for the request's
	// cost: 0 when it has room now, Never when it never will.
	RetryAfter time.Duration
}

// local is implemented by stores that answer without I/O and never block
// beyond a short lock (store/storekit.Local): a Limiter calls them without
// setting a deadline, which saves a timer per request.
type local interface{ Local() }

// checkDecision reports a Decision that points outside its Request (a
// limit or key index out of range, limit states of another policy, a
// negative delay or grant, a grant above the cost), so that a faulty store
// cannot make the headers index out of range. The Limiter checks every
// store's answer with it; wrappers of stores check the store they wrap
// (store/storekit.CheckDecision).
func checkDecision(d Decision, req Request) error {
	if req.Policy == nil {
		return errors.New("invalid decision: the request has no policy")
	}
	n := req.Policy.NumLimits()
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
