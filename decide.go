package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
)

// Deciding: who answers a request, in one place. The store answers,
// unless it fails, does not answer within the timeout or its circuit is
// open; then the fallback store, if there is one; then the failure mode.
// Every store call goes through call or op, within the timeout, on a
// context that keeps the request's values but not its cancellation, and
// every failure reaches the error hook, the observers and the log.

// decided is a decision and who made it. err is why no store could
// decide (byFailureMode); nil otherwise, as in Result.Err: a store's error
// that the fallback made up for has gone to the error hook and the log.
type decided struct {
	d   Decision
	by  decidedBy
	err error
}

// opKind is the store operation a decision needs.
type opKind uint8

const (
	opTake    opKind = iota
	opReserve        // reserver, when the policy and store can
	opUpTo           // granter
	opLease          // leaser, for a grant of a leased policy (WithLease)
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
	maxDelay time.Duration // opReserve: the longest wait for a place in line
	hold     time.Duration // opLease: how long the grant may be spent
}

// decider asks a Limiter's stores: its configuration, the clock its
// circuit breaker and logs count by, and the log of outages.
type decider struct {
	config
	// epoch is when the Limiter (or its test clock) started: the clocks of
	// the circuit breaker and of the logs count from it (monotonic).
	epoch  time.Time
	outage outageLog
}

// setClock sets the clock of the circuit breaker and the logs, and
// restarts the logs.
func (dc *decider) setClock(now func() time.Time) {
	dc.now = now
	dc.epoch = now()
	dc.outage.restart()
}

// sinceEpoch is the decider's monotonic clock, in nanoseconds.
func (dc *decider) sinceEpoch() int64 { return int64(dc.now().Sub(dc.epoch)) }

// decide asks the store, then the fallback, for a decision, and applies
// the failure mode when neither could decide. A caller's mistake (an
// invalid request, an operation the store lacks) goes to the failure
// mode at once: no circuit, no fallback. Every state change of the
// circuit survives a panic in the store or in a hook: a probe that panics
// is forgotten, and the panic goes on. r is nil outside HTTP.
func (dc *decider) decide(ctx context.Context, r *http.Request, a ask) decided {
	var err error
	if ok, probe := dc.breaker.Allow(dc.sinceEpoch); ok {
		settled := false
		defer func() {
			if !settled {
				dc.breaker.Forget(probe) // a panic: release the probe, let the panic go on
			}
		}()
		var d Decision
		d, err = dc.call(ctx, r, byStore, a)
		if errors.Is(err, ErrInvalidRequest) || errors.Is(err, errors.ErrUnsupported) {
			settled = true
			dc.breaker.Forget(probe)
			return dc.onFailure(err)
		}
		change := dc.breaker.Record(dc.sinceEpoch, err == nil, probe)
		settled = true
		switch change {
		case breaker.Opened:
			dc.circuitChanged(true)
		case breaker.Closed:
			dc.circuitChanged(false)
		}
		if err == nil {
			dc.outage.storeAnswered(ctx, dc.sinceEpoch())
			return decided{d: d, by: byStore}
		}
	} else {
		err = fmt.Errorf("ratelimit: store: %w (skipping it for up to %s after repeated failures)", ErrCircuitOpen, time.Duration(dc.breaker.Cooldown))
		dc.report(ctx, r, byStore, a.policy, err)
		for _, o := range dc.observers {
			o.ObserveStore(StoreEvent{Policy: a.policy, Op: a.op.String(), Err: err, ErrorKind: errorKind(err)})
		}
	}
	if dc.fallback != nil {
		fd, ferr := dc.call(ctx, r, byFallback, a)
		if ferr == nil {
			return decided{d: fd, by: byFallback}
		}
		err = errors.Join(err, ferr)
	}
	return dc.onFailure(err)
}

// onFailure returns the failure mode's decision for err.
func (dc *decider) onFailure(err error) decided {
	if dc.mode == FailClosed {
		return decided{d: Decision{RetryAfter: failClosedRetryAfter}, by: byFailureMode, err: err}
	}
	return decided{d: Decision{Allowed: true}, by: byFailureMode, err: err}
}

// circuitChanged tells the observers the circuit opened or closed.
func (dc *decider) circuitChanged(open bool) {
	for _, o := range dc.observers {
		o.ObserveCircuit(CircuitEvent{Open: open, Cooldown: time.Duration(dc.breaker.Cooldown)})
	}
}

// storeOf returns the store that by names.
func (dc *decider) storeOf(by decidedBy) Store {
	if by == byFallback {
		return dc.fallback
	}
	return dc.store
}

// call asks the store by names (byStore or byFallback) within the
// timeout, on a context that keeps ctx's values but not its cancellation
// (a client that goes away does not decide the request). On failure it
// returns the error with its context, after the error hook and the log
// have seen it.
func (dc *decider) call(ctx context.Context, r *http.Request, by decidedBy, a ask) (Decision, error) {
	s := dc.storeOf(by)
	var start time.Time // before the timeout starts: a call that times out took at least it
	if len(dc.observers) > 0 {
		start = time.Now()
	}
	cctx := context.WithoutCancel(ctx)
	if _, isLocal := s.(local); !isLocal {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(cctx, dc.timeout)
		defer cancel()
	}
	req := Request{Policy: a.policy, Keys: a.keys, Cost: a.cost, ID: a.id}
	var d Decision
	var err error
	switch a.op {
	case opReserve:
		if rs, ok := s.(reserver); ok {
			d, err = rs.Reserve(cctx, req, a.maxDelay)
		} else {
			d, err = s.Take(cctx, req)
		}
	case opUpTo:
		if g, ok := s.(granter); ok {
			d, err = g.TakeUpTo(cctx, req)
		} else {
			err = fmt.Errorf("%T cannot grant part of a request: %w", s, errors.ErrUnsupported)
		}
	case opLease:
		if g, ok := s.(leaser); ok {
			d, err = g.Lease(cctx, req, a.hold)
		} else {
			err = fmt.Errorf("%T cannot lease part of a policy's quota: %w", s, errors.ErrUnsupported)
		}
	default:
		d, err = s.Take(cctx, req)
	}
	var expired error
	if err != nil {
		expired = cctx.Err()
	} else if err = d.Check(req); err != nil {
		d = Decision{}
	}
	err = dc.annotate(by.String(), err, expired)
	for _, o := range dc.observers {
		o.ObserveStore(StoreEvent{Policy: a.policy, Op: a.op.String(), Fallback: by == byFallback, Duration: time.Since(start), Err: err, ErrorKind: errorKind(err)})
	}
	if err == nil {
		d.Receipt = d.Receipt.claimed(by == byFallback)
		return d, nil
	}
	dc.report(ctx, r, by, a.policy, err)
	return Decision{}, err
}

// op runs the store operation name (a refund, a reset) on the store by
// names, within the timeout, on a context detached from ctx's
// cancellation, reporting its error as call does.
func (dc *decider) op(ctx context.Context, r *http.Request, p *Policy, by decidedBy, name string, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dc.timeout)
	defer cancel()
	start := time.Now()
	err := f(cctx)
	if err != nil {
		err = dc.annotate(by.String()+": "+name, err, cctx.Err())
		dc.report(ctx, r, by, p, err)
	}
	for _, o := range dc.observers {
		o.ObserveStore(StoreEvent{Policy: p, Op: name, Fallback: by == byFallback, Duration: time.Since(start), Err: err, ErrorKind: errorKind(err)})
	}
	return err
}

// annotate returns the error of a store call with what the decider knows
// of it: which store (and operation), and, when expired (the call's
// context ended: the timeout), the timeout and expired's error.
func (dc *decider) annotate(which string, err, expired error) error {
	switch {
	case err == nil:
		return nil
	case expired == nil:
		return fmt.Errorf("ratelimit: %s: %w", which, err)
	case errors.Is(err, expired):
		return fmt.Errorf("ratelimit: %s: no answer within %s: %w", which, dc.timeout, err)
	}
	return fmt.Errorf("ratelimit: %s: no answer within %s: %w (%w)", which, dc.timeout, err, expired)
}

// report gives a store's error to the error hook and to the log: a
// failure to the outage log, a caller's mistake (an invalid request, an
// operation the store lacks) to the log of mistakes.
func (dc *decider) report(ctx context.Context, r *http.Request, by decidedBy, p *Policy, err error) {
	if dc.errHook != nil {
		dc.errHook(r, err)
	}
	if errors.Is(err, ErrInvalidRequest) || errors.Is(err, errors.ErrUnsupported) {
		dc.outage.logMistake(ctx, dc.sinceEpoch(), p, err)
		return
	}
	dc.outage.storeFailed(ctx, dc.sinceEpoch(), by, p, err)
}

// mistake gives a caller's mistake the decider found itself (a cost
// above the policy's capacity) to the error hook and the log.
func (dc *decider) mistake(ctx context.Context, r *http.Request, p *Policy, err error) {
	if dc.errHook != nil {
		dc.errHook(r, err)
	}
	dc.outage.logMistake(ctx, dc.sinceEpoch(), p, err)
}

// chargedBy returns who made the charge rc: the store or the fallback.
func chargedBy(rc Receipt) decidedBy {
	if rc.fromFallback() {
		return byFallback
	}
	return byStore
}

// refund gives back rc's charge, once, to the store that made it; a
// charge spent from grants goes back into them (lease_grants.go).
func (dc *decider) refund(ctx context.Context, r *http.Request, rc Receipt) error {
	if !rc.claim() {
		return nil
	}
	if rc.c != nil && rc.c.adjust != nil {
		return rc.c.adjust(ctx, r, -rc.Cost)
	}
	by := chargedBy(rc)
	rf, ok := dc.storeOf(by).(refunder)
	if !ok {
		return fmt.Errorf("ratelimit: Refund: the store (%T) cannot refund: %w", dc.storeOf(by), errors.ErrUnsupported)
	}
	return dc.op(ctx, r, rc.Policy, by, "refund", func(ctx context.Context) error { return rf.Refund(ctx, rc) })
}

// settle changes rc's charge to actual units, once, at the store that
// made it, or in the grants it was spent from.
func (dc *decider) settle(ctx context.Context, r *http.Request, rc Receipt, actual int64) error {
	if actual < 0 || actual > MaxSettle {
		return fmt.Errorf("ratelimit: Settle: actual cost %d, want 0 to %d", actual, int64(MaxSettle))
	}
	if rc.Policy == nil {
		return nil
	}
	if !rc.claim() {
		return ErrSettled
	}
	if rc.c != nil && rc.c.adjust != nil {
		return rc.c.adjust(ctx, r, actual-rc.Cost)
	}
	by := chargedBy(rc)
	st, ok := dc.storeOf(by).(settler)
	if !ok {
		return fmt.Errorf("ratelimit: Settle: the store (%T) cannot settle: %w", dc.storeOf(by), errors.ErrUnsupported)
	}
	return dc.op(ctx, r, rc.Policy, by, "settle", func(ctx context.Context) error { return st.Settle(ctx, rc, actual) })
}
