package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
)

// A Limiter limits the rate of HTTP requests, or of any event keyed by
// strings, against a Policy counted in a Store. Build one with New; the
// zero value is not usable. A Limiter is safe for concurrent use.
//
// Handler wraps an http.Handler: most callers want it. Allow and AllowN
// ask the same question outside HTTP, for keys the caller chooses; Wait
// and WaitN wait for their turn instead of being refused; AllowUpTo grants
// what is left of a quota; Refund gives a charge back and Reset forgets
// keys.
//
// Every decision costs one call to the store, however many identifiers
// and limits are involved. When the store fails or does not answer within
// the timeout, the Limiter asks the fallback store (WithFallback, or by
// default the store's own: the Redis store's per-process memory store),
// and otherwise (or if the fallback fails too) applies its FailureMode
// (FailClosed unless WithFailureMode says otherwise). A request that none
// of the identifiers applies to passes unlimited (see WithIdentifiers).
type Limiter struct {
	config
	// epoch is when the Limiter (or its test clock) started: the clocks of
	// the circuit breaker and of the logs count from it (monotonic).
	epoch time.Time
	// outage is what the log tells of the store's failures (outage_log.go).
	outage outageLog
	// holding counts the requests Handler holds (hold.go).
	holding holder
	// leases holds the grants of leased policies (lease_grants.go).
	leases leaseTable
}

// New returns a Limiter that counts requests against policy in store.
// Every option is checked here, so a Limiter that New returns does not
// fail on configuration at request time: New returns an error, prefixed
// "ratelimit: ", for a nil store, policy or option, a nil function or
// handler given to an option, a negative cost or one above the policy's
// capacity, both WithCost and WithCostFunc, a non-positive timeout, a
// fallback that is nil or the store itself, an unknown failure mode or
// header style, WithRefundIf with a store that cannot refund, and when
// ByIP (the default identifier) fails.
//
// When the store fails, a Limiter built without WithFallback and
// WithFailureMode asks the store's own fallback (see FallbackStore: the
// Redis store names a memory store, so each server keeps limiting on its
// own, and a fleet of N servers admits up to N times the limit until Redis
// answers again); with a store that names none, it refuses requests
// (FailClosed). Unlimited is a choice: WithFailureMode(FailOpen).
func New(store Store, policy *Policy, opts ...Option) (*Limiter, error) {
	l := &Limiter{}
	if err := l.config.init(store, policy, opts); err != nil {
		return nil, err
	}
	l.sleep = sleep
	l.setClock(time.Now)
	return l, nil
}

// DefaultTimeout is how long a Limiter waits for its store on each call
// unless WithTimeout says otherwise. A healthy Redis on the same network
// answers in well under a millisecond, so 100ms trips only when the store
// is in real trouble, while it caps what an outage adds to the latency of
// every request. Raise it for a store that is far away.
const DefaultTimeout = 100 * time.Millisecond

// FailureMode says what a Limiter does when it cannot get a decision: the
// store (and the fallback store, if any) failed or did not answer within
// the timeout. Set it with WithFailureMode.
type FailureMode uint8

const (
	// FailOpen lets the request through, without rate-limit headers: an
	// outage of the store does not become an outage of the service, but
	// leaves the routes unlimited while it lasts. The error goes to the
	// error hook and the outage to the log (see WithLogger). Only
	// WithFailureMode(FailOpen) chooses it.
	FailOpen FailureMode = iota
	// FailClosed answers 503 Service Unavailable with "Retry-After: 1",
	// "Cache-Control: no-store" and a problem document of the type
	// UnavailableProblemType that reveals nothing of the error. A request of cost 0 is served all the same.
	// Allow and AllowN report the request denied, with a RetryAfter of one
	// second. It is the default when no fallback store can decide (see
	// WithFailureMode).
	FailClosed
)

// String returns "fail-open" or "fail-closed".
func (m FailureMode) String() string { return enumName(failureModeNames, uint8(m), "failure-mode") }

var failureModeNames = []string{"fail-open", "fail-closed"}

// failClosedRetryAfter is the Retry-After of the 503 answered by FailClosed,
// and the RetryAfter of its Decision: store outages are usually short, and
// the limiter gives up on a store within its timeout, so a client may try
// again soon.
const failClosedRetryAfter = time.Second

// ErrCircuitOpen is wrapped by the error a Limiter reports when it did not
// ask its store because the store's circuit is open (see
// WithCircuitBreaker). The fallback store or the failure mode decided.
var ErrCircuitOpen = errors.New("store circuit open")

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// setClock sets the clock of the circuit breaker and the logs, and
// restarts the logs (outage_log.go).
func (l *Limiter) setClock(now func() time.Time) {
	l.now = now
	l.epoch = now()
	l.outage.restart()
}

// sinceEpoch is the Limiter's monotonic clock, in nanoseconds.
func (l *Limiter) sinceEpoch() int64 { return int64(l.now().Sub(l.epoch)) }

// opKind is the store operation a decision needs.
type opKind uint8

const (
	opTake    opKind = iota
	opReserve        // Reserver, when the policy and store can
	opUpTo           // Granter
	opLease          // Leaser, for a grant of a leased policy (WithLease)
)

func (o opKind) String() string {
	switch o {
	case opReserve:
		return "reserve"
	case opUpTo:
		return "take_up_to"
	case opLease:
		return "lease"
	}
	return "take"
}

// ask is one decision to get from the stores.
type ask struct {
	policy   *Policy
	keys     []string
	cost     int64
	id       string
	op       opKind
	maxDelay time.Duration
	hold     time.Duration // opLease: how long the grant may be spent
}

// decide asks the store, then the fallback, for a decision. failed reports
// that neither could decide: the Decision is then the failure mode's and
// err says why. When the fallback decides, fallback is true and err is nil,
// as in Result.Err: the store's error has gone to the error hook and the
// log. Every state change of the circuit survives a panic in the store or
// in a hook: a probe that panics is forgotten, and the panic goes on.
func (l *Limiter) decide(parent context.Context, r *http.Request, a ask) (d Decision, fallback, failed bool, err error) {
	if a.policy.lease != nil {
		if a.cost > 0 {
			return l.leaseDecide(parent, r, a)
		}
		a.policy = a.policy.lease.store // a peek asks the store
	}
	if ok, probe := l.breaker.Allow(l.sinceEpoch); ok {
		settled := false
		defer func() {
			if !settled {
				l.breaker.Forget(probe) // a panic: release the probe, let the panic go on
			}
		}()
		d, err = l.call(parent, r, l.store, "store", a)
		if errors.Is(err, ErrInvalidRequest) || errors.Is(err, errors.ErrUnsupported) {
			// A bug of the caller's, not an outage: no circuit, no fallback.
			settled = true
			l.breaker.Forget(probe)
			d, failed, err = l.failed(err)
			return d, false, failed, err
		}
		change := l.breaker.Record(l.sinceEpoch, err == nil, probe)
		settled = true
		switch change {
		case breaker.Opened:
			l.circuit(true)
		case breaker.Closed:
			l.circuit(false)
		}
		if err == nil {
			l.storeAnswered(parent)
			return d, false, false, nil
		}
	} else {
		err = fmt.Errorf("ratelimit: store: %w (skipping it for up to %s after repeated failures)", ErrCircuitOpen, time.Duration(l.breaker.Cooldown))
		l.report(parent, r, "store", a.policy, err)
		for _, o := range l.observers {
			o.ObserveStore(StoreEvent{Policy: a.policy, Op: a.op.String(), Err: err})
		}
	}
	if l.fallback != nil {
		fd, ferr := l.call(parent, r, l.fallback, "fallback store", a)
		if ferr == nil {
			return fd, true, false, nil
		}
		err = errors.Join(err, ferr)
	}
	d, failed, err = l.failed(err)
	return d, false, failed, err
}

// acquire gets an admission within budget: reserving a place in line where
// the policy and the store can, else waiting the store's RetryAfter and
// asking again. While the admitted event waits for its turn, ctx ending
// gives the place back and returns ctx's error as held. Handler (with
// WithMaxDelay) and WaitN wait through it.
func (l *Limiter) acquire(ctx context.Context, r *http.Request, a ask, budget time.Duration) (d Decision, fallback, failed bool, err, held error) {
	start := l.now()
	for {
		left := max(budget-l.now().Sub(start), 0)
		a.op, a.maxDelay = opTake, 0
		if left > 0 && a.cost > 0 && a.policy.Reserves() {
			a.op, a.maxDelay = opReserve, left
		}
		d, fallback, failed, err = l.decide(ctx, r, a)
		if failed {
			return d, fallback, failed, err, nil
		}
		if d.Allowed {
			if d.Delay > 0 {
				if werr := l.sleep(ctx, d.Delay); werr != nil {
					l.giveBack(r, d) // the waiter left: its place goes back
					return Decision{}, fallback, false, nil, werr
				}
			}
			return d, fallback, false, nil, nil
		}
		if a.cost == 0 || d.RetryAfter == Never || d.RetryAfter > left {
			return d, fallback, false, nil, nil
		}
		if werr := l.sleep(ctx, max(d.RetryAfter, time.Microsecond)); werr != nil {
			return Decision{}, fallback, false, nil, werr
		}
	}
}

// failed returns the failure mode's decision for err.
func (l *Limiter) failed(err error) (Decision, bool, error) {
	if l.mode == FailClosed {
		return Decision{RetryAfter: failClosedRetryAfter}, true, err
	}
	return Decision{Allowed: true}, true, err
}

// circuit tells the observers the circuit opened or closed.
func (l *Limiter) circuit(open bool) {
	for _, o := range l.observers {
		o.ObserveCircuit(CircuitEvent{Open: open, Cooldown: time.Duration(l.breaker.Cooldown)})
	}
}

// call asks s within the timeout, on a context that keeps parent's values
// but not its cancellation (a client that goes away does not decide the
// request). On failure it returns the error with its context, after the
// error hook and the log have seen it.
func (l *Limiter) call(parent context.Context, r *http.Request, s Store, which string, a ask) (Decision, error) {
	ctx := context.WithoutCancel(parent)
	if _, isLocal := s.(local); !isLocal {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	var start time.Time
	if len(l.observers) > 0 {
		start = time.Now()
	}
	req := Request{Policy: a.policy, Keys: a.keys, Cost: a.cost, ID: a.id}
	var d Decision
	var err error
	switch a.op {
	case opReserve:
		if rs, ok := s.(Reserver); ok {
			d, err = rs.Reserve(ctx, req, a.maxDelay)
		} else {
			d, err = s.Take(ctx, req)
		}
	case opUpTo:
		if g, ok := s.(Granter); ok {
			d, err = g.TakeUpTo(ctx, req)
		} else {
			err = fmt.Errorf("%T cannot grant part of a request: %w", s, errors.ErrUnsupported)
		}
	case opLease:
		if g, ok := s.(Leaser); ok {
			d, err = g.Lease(ctx, req, a.hold)
		} else {
			err = fmt.Errorf("%T cannot lease part of a policy's quota: %w", s, errors.ErrUnsupported)
		}
	default:
		d, err = s.Take(ctx, req)
	}
	var expired error
	if err != nil {
		expired = ctx.Err()
	} else if err = checkDecision(d, req); err != nil {
		d = Decision{}
	}
	err = l.annotate(which, err, expired)
	for _, o := range l.observers {
		o.ObserveStore(StoreEvent{Policy: a.policy, Op: a.op.String(), Fallback: which != "store", Duration: time.Since(start), Err: err})
	}
	if err == nil {
		d.Receipt.withStore(s)
		return d, nil
	}
	l.report(parent, r, which, a.policy, err)
	return Decision{}, err
}

// op runs a store operation other than a decision (a refund, a reset),
// within the timeout, on a context detached from parent's cancellation,
// reporting its error as call does.
func (l *Limiter) op(parent context.Context, r *http.Request, p *Policy, which, name string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), l.timeout)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	if err != nil {
		err = l.annotate(which+": "+name, err, ctx.Err())
		l.report(parent, r, which, p, err)
	}
	for _, o := range l.observers {
		o.ObserveStore(StoreEvent{Policy: p, Op: name, Fallback: which != "store", Duration: time.Since(start), Err: err})
	}
	return err
}

// annotate returns the error of a store call with what the Limiter knows
// of it: which store (and operation), and, when expired (the call's
// context ended: the timeout), the timeout and expired's error.
func (l *Limiter) annotate(which string, err, expired error) error {
	switch {
	case err == nil:
		return nil
	case expired == nil:
		return fmt.Errorf("ratelimit: %s: %w", which, err)
	case errors.Is(err, expired):
		return fmt.Errorf("ratelimit: %s: no answer within %s: %w", which, l.timeout, err)
	}
	return fmt.Errorf("ratelimit: %s: no answer within %s: %w (%w)", which, l.timeout, err, expired)
}

// report gives an error to the error hook and to the log: a store's
// failure to the outage log, a caller's mistake ("config": a cost above
// the policy's capacity; an invalid request; an operation the store
// lacks) to the log of mistakes (outage_log.go).
func (l *Limiter) report(ctx context.Context, r *http.Request, which string, p *Policy, err error) {
	if l.errHook != nil {
		l.errHook(r, err)
	}
	if which == "config" || errors.Is(err, ErrInvalidRequest) || errors.Is(err, errors.ErrUnsupported) {
		l.mistake(ctx, p, err)
		return
	}
	l.storeFailed(ctx, which, p, err)
}

// refund gives back d's charge, once, to the store that made it.
func (l *Limiter) refund(ctx context.Context, r *http.Request, d Decision) error {
	rc := d.Receipt
	if !rc.claim() {
		return nil
	}
	if rc.r.leases != nil {
		return l.leaseAdjust(ctx, r, rc, -rc.r.cost)
	}
	s := l.charger(rc)
	rf, ok := s.(Refunder)
	if !ok {
		return fmt.Errorf("ratelimit: Refund: the store (%T) cannot refund: %w", s, errors.ErrUnsupported)
	}
	return l.op(ctx, r, rc.policy(), l.which(s), "refund", func(ctx context.Context) error { return rf.Refund(ctx, rc) })
}

// charger returns the store that made the charge rc: the store or the
// fallback.
func (l *Limiter) charger(rc Receipt) Store {
	if s := rc.madeBy(); s != nil {
		return s
	}
	return l.store
}

// which names s, the store or the fallback, for errors and observers. A
// caller checks s's interface first: a store of a type Go cannot compare
// (a func) implements none of them.
func (l *Limiter) which(s Store) string {
	if s != l.store {
		return "fallback store"
	}
	return "store"
}

// giveBack refunds d's charge for the Handler or a waiter that left; the
// error goes to the hooks and the log.
func (l *Limiter) giveBack(r *http.Request, d Decision) {
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
	}
	_ = l.refund(ctx, r, d)
}

// notify counts a decision for the outage log and tells the decision hook
// and the observers about it.
func (l *Limiter) notify(r *http.Request, res Result, outcome Outcome, fallback bool) {
	l.outage.decided(outcome, fallback)
	if l.decHook != nil {
		l.decHook(r, res)
	}
	for _, o := range l.observers {
		o.ObserveDecision(DecisionEvent{Request: r, Result: res, Outcome: outcome, Fallback: fallback})
	}
}
