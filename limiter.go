package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
)

// A Limiter limits the rate of HTTP requests, or of any event keyed by
// strings, against a Policy counted in a Store. Build one with New; the
// zero value is not usable. A Limiter is safe for concurrent use.
//
// Handler wraps an http.Handler: most callers want it. Serve decides a
// request that comes through another transport (a gRPC call) the same
// way. Allow and AllowN ask the same question for keys the caller
// chooses; Wait and WaitN wait for their turn instead of being refused;
// AllowUpTo grants what is left of a quota; Refund gives a charge back
// and Reset forgets keys.
//
// Every decision costs one call to the store, however many identifiers
// and limits are involved. When the store fails or does not answer within
// the timeout, the Limiter asks the fallback store (WithFallback, or by
// default the store's own: the Redis store's per-process memory store),
// and otherwise (or if the fallback fails too) applies its FailureMode
// (FailClosed unless WithFailureMode says otherwise). A request that none
// of the identifiers applies to passes unlimited (see WithIdentifiers).
type Limiter struct {
	decider
	// held counts the requests held now (WithMaxDelay, WithMaxHeld).
	held atomic.Int64
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
// WithFailureMode asks the store's own fallback (storekit.FallbackStore:
// the Redis store names a memory store, so each server keeps limiting on
// its own, and a fleet of N servers admits up to N times the limit until
// Redis answers again); with a store that names none, it refuses requests
// (FailClosed). Unlimited is a choice: WithFailureMode(FailOpen).
func New(store Store, policy *Policy, opts ...Option) (*Limiter, error) {
	l := &Limiter{}
	if err := configure(&l.config, store, policy, opts); err != nil {
		return nil, err
	}
	l.sleep = pause
	l.outage.logger, l.outage.mode, l.outage.fallback, l.outage.breaker = l.logger, l.mode, l.fallback != nil, &l.breaker
	l.setClock(time.Now)
	l.leases.d = &l.decider
	return l, nil
}

// configure sets c to the defaults, applies opts over them and checks the
// whole: what New validates.
func configure(c *config, store Store, policy *Policy, opts []Option) error {
	if isNil(store) {
		return errors.New("ratelimit: New: nil store")
	}
	if policy == nil {
		return errors.New("ratelimit: New: nil policy")
	}
	*c = config{
		store:   store,
		policy:  policy,
		cost:    1,
		timeout: DefaultTimeout,
		style:   HeadersIETF,
		breaker: breaker.Breaker{Threshold: DefaultCircuitFailures, Cooldown: int64(DefaultCircuitCooldown), Quiet: true},
		logger:  slog.Default(),
		denied:  deniedHandler,
		// Hold the waits Retry-After cannot say (WithMaxDelay).
		maxDelay: holdBelow,
		maxHeld:  DefaultMaxHeld,
	}
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("ratelimit: New: option %d is nil", i)
		}
		if o(c); c.err != nil {
			return c.err
		}
	}
	switch {
	case c.costSet && c.costFn != nil:
		return errors.New("ratelimit: WithCost and WithCostFunc are exclusive")
	case c.cost > policy.MaxCost():
		return fmt.Errorf("ratelimit: WithCost(%d): above the capacity %d of policy %q, every request would be denied",
			c.cost, policy.MaxCost(), policy.Name())
	case c.fallback != nil && sameStore(c.fallback, store):
		return errors.New("ratelimit: WithFallback: the fallback is the store itself")
	}
	if policy.algorithm == SlidingWindowApprox {
		for _, l := range policy.limits {
			if l.Rate < MinApproxRate {
				return fmt.Errorf("ratelimit: New: policy %q: limit %q (%d per %s): the approximation loses about one unit per period to its estimate, more than 5%% of a rate below %d, so a client that honours Retry-After would get less than it was promised; use SlidingWindow, exact at this rate for the same cost",
					policy.Name(), l.Name, l.Rate, FormatPeriod(l.Period), MinApproxRate)
			}
		}
	}
	if !c.modeSet {
		// The store's own fallback, then FailClosed (see WithFailureMode).
		c.mode = FailClosed
		if fs, ok := store.(fallbackStore); ok && c.fallback == nil {
			if f := fs.Fallback(); !isNil(f) {
				if sameStore(f, store) {
					return fmt.Errorf("ratelimit: New: the store's fallback (%T.Fallback) is the store itself", store)
				}
				c.fallback = f
			}
		}
	}
	if c.ids == nil {
		id := ByIP()
		if err := identifierErr(id); err != nil {
			return fmt.Errorf("ratelimit: default identifier: %w", err)
		}
		c.ids = []Identifier{id}
	}
	for _, need := range [...]struct {
		asked bool
		has   bool
		what  string
	}{
		{c.refundIf != nil, implements[refunder](store), "WithRefundIf: the store (%T) cannot refund"},
		{policy.lease != nil, implements[leaser](store), "New: policy is leased (WithLease) and the store (%T) cannot lease"},
		{c.costAfter != nil, implements[settler](store), "WithCostAfter: the store (%T) cannot settle"},
	} {
		if need.asked && !need.has {
			return fmt.Errorf("ratelimit: "+need.what+": %w", store, errors.ErrUnsupported)
		}
	}
	return nil
}

// implements reports whether s offers the operation of interface T.
func implements[T any](s Store) bool {
	_, ok := s.(T)
	return ok
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A journey is one request's way through a Limiter, from its admission to
// its end; every front (the Handler, Serve, Allow, Wait and AllowUpTo)
// goes through one (the fronts that serve requests through handle).
// start (or begin, for a request) chooses its policy, keys and cost;
// decide asks for a decision (a leased policy's grants first, then the
// stores: decide.go); acquire waits for a place in line; record tells
// the hooks, the observers and the log what was decided; execute runs the
// request and then finishes it by outcome: a refund, a settle, its slots
// released.
//
// Holding: Retry-After counts whole seconds, so a client told to wait
// 50ms waits a second. Where a second is most of what a limit admits (a
// token bucket whose burst refills within a second, a period under a
// second, the approximation's weighted window), such a client gets a
// fraction of the rate it was promised. So a front that serves requests
// holds one whose wait is below one second, by default, rather than
// refuse it: it is served when its turn comes (decideOrHold). At most MaxHeld
// requests of one Limiter are held at once; beyond that, requests are
// refused as before.
type journey struct {
	l *Limiter
	// ctx carries the request's values to the stores, and its end to a
	// wait; once admitted, the request's Result too.
	ctx context.Context
	req *http.Request // nil outside a front that serves requests
	res Result
	id  string    // the request ID (WithIdempotencyKey), "" for none
	by  decidedBy // who decided
	// serves: the front serves the request unless the Limiter refuses it
	// (the Handler, Serve), so that a dry run and a cost of 0 are served
	// whatever the store answered; Allow and Wait report the answer as is.
	serves bool
	frame  *frame // the request's frame in ctx, once admitted
	// held is how long the request was held for its turn; holdFull, that
	// it would have been held but MaxHeld were (for the observers).
	held     time.Duration
	holdFull bool
}

// start returns the journey of a request of cost for keys under p.
func (l *Limiter) start(ctx context.Context, r *http.Request, p *Policy, keys []string, cost int64) *journey {
	return &journey{l: l, ctx: ctx, req: r, res: Result{Policy: p, Keys: keys, Cost: cost}}
}

// begin starts the journey of r for a front that serves it, or returns nil
// when r passes unlimited (WithSkip, or no identifier applies).
func (l *Limiter) begin(r *http.Request) *journey {
	if l.skip != nil && l.skip(r) {
		return nil
	}
	keys := identify(l.ids, r)
	if keys == nil {
		return nil
	}
	p, cost := l.policy, l.cost
	if l.policyFn != nil {
		if q := l.policyFn(r); q != nil {
			p = q
		}
	}
	if l.costFn != nil {
		cost = max(l.costFn(r), 0)
	}
	f := l.start(r.Context(), r, p, keys, cost)
	f.serves, f.id, f.res.DryRun = true, requestID(l.idHeader, r), l.dryRun
	if cost > p.MaxCost() {
		err := fmt.Errorf("ratelimit: cost %d of policy %q: %w (%d): it can never be admitted; check WithCost, WithCostFunc and WithPolicyFunc",
			cost, p.Name(), ErrCostOverCapacity, p.MaxCost())
		l.mistake(f.ctx, r, p, err)
	}
	return f
}

// handle takes r through the Limiter for a front that serves requests
// (the Handler, Serve), the one walk every such request makes: begin
// picks its policy, keys and cost; decideOrHold decides, holding a short
// wait, and records the decision; the rate-limit fields go into h
// (Retry-After alone for FailedClosed, none for FailedOpen); a refusal is
// told to the Limiters that charged the request, so that they give their
// charges back; respond then answers the request, and execute (finish.go)
// finishes a served one by outcome. respond serves the request when serve
// is true (admitted, passed unlimited, in a dry run or by FailOpen), else
// answers its refusal, of outcome o (Denied or FailedClosed); it returns
// the status the client got and the bytes of body written. It is not
// called when the client left while held (the Result's Err is then ctx's
// error). handle returns the journey, nil when r passed unlimited.
func (l *Limiter) handle(r *http.Request, h http.Header, respond func(req *http.Request, o Outcome, serve bool) (status int, written int64)) *journey {
	f := l.begin(r)
	if f == nil {
		respond(r, Allowed, true)
		return nil
	}
	left := f.decideOrHold()
	o, d := f.res.Outcome, f.res.Decision
	switch {
	case left, o == FailedOpen: // no decision to describe
	case o == FailedClosed:
		if l.style != HeadersNone {
			h.Set(hdrRetryAfter, strconv.Itoa(int(failClosedRetryAfter/time.Second)))
		}
	default:
		writeFields(h, l.style, f.res.Policy, d, f.res.Keys, stacked(f.frame), !d.Allowed && f.res.Cost > 0)
	}
	if left || o == Denied || o == FailedClosed {
		refuse(f.ctx)
		if !left {
			respond(f.req, o, false)
		}
		return f
	}
	f.execute(func() (int, int64) { return respond(f.req, o, true) })
	return f
}

// ask is what f asks of the stores.
func (f *journey) ask(op opKind) ask {
	return ask{policy: f.res.Policy, keys: f.res.Keys, cost: f.res.Cost, id: f.id, op: op}
}

// decide asks for a decision: from the grants of a leased policy
// (WithLease), or from the stores.
func (f *journey) decide(a ask) decided {
	if a.policy.lease != nil && a.cost > 0 {
		return f.l.leases.decide(f.ctx, f.req, a)
	}
	return f.l.decide(f.ctx, f.req, a)
}

// decideOrHold decides f for a front that serves it: it asks once and, when the
// answer is a denial that a short wait would turn into an admission,
// holds the request until its turn within the Limiter's maximum delay
// (WithMaxDelay: every request asks for a place in line). It reports
// that the client left while held: its place was given back and the
// Result's Err is ctx's error.
func (f *journey) decideOrHold() (left bool) {
	l := f.l
	a := f.ask(opTake)
	var got decided
	var gone error
	switch {
	case l.maxDelay == 0 || l.maxHeld == 0 || l.dryRun || a.policy.block > 0:
		// A policy with a penalty is never held: its denials start or
		// report the penalty, whose end is no turn to wait for.
		got = f.decide(a)
	case l.reserveFirst:
		got, gone = f.holdTurn(a, nil)
	default:
		// Ask as usual (the common call stays the common call); hold only
		// a denial whose wait is below the maximum delay. A denial in
		// flight has no wait to hold for: a slot frees when a request ends.
		got = f.decide(a)
		if d := got.d; got.by != byFailureMode && !d.Allowed && a.cost > 0 && !d.InFlight && d.RetryAfter > 0 && d.RetryAfter <= l.maxDelay {
			got, gone = f.holdTurn(a, &got)
		}
	}
	if gone != nil {
		f.res.Err, f.res.Outcome = gone, Abandoned
		f.tell()
		return true
	}
	f.record(got)
	return false
}

// holdTurn acquires a place in line for a within the maximum delay, when one
// of the Limiter's MaxHeld places is free; else it returns what was
// asked, or asks now when nothing was.
func (f *journey) holdTurn(a ask, asked *decided) (decided, error) {
	l := f.l
	if l.held.Add(1) > int64(l.maxHeld) {
		l.held.Add(-1)
		f.holdFull = true
		if asked != nil {
			return *asked, nil
		}
		return f.decide(a), nil
	}
	defer l.held.Add(-1)
	start := l.now()
	defer func() { f.held = max(l.now().Sub(start), time.Nanosecond) }()
	return f.acquire(a, l.maxDelay)
}

// acquire gets an admission within budget: reserving a place in line where
// the policy and the store can, else waiting the store's RetryAfter and
// asking again. While the admitted event waits for its turn, ctx ending
// gives the place back and returns ctx's error. The Handler's holding and
// WaitN wait through it.
func (f *journey) acquire(a ask, budget time.Duration) (decided, error) {
	l := f.l
	start := l.now()
	for {
		left := max(budget-l.now().Sub(start), 0)
		a.op, a.maxDelay = opTake, 0
		if left > 0 && a.cost > 0 && a.policy.layout.Reserves {
			a.op, a.maxDelay = opReserve, left
		}
		got := f.decide(a)
		d := got.d
		switch {
		case got.by == byFailureMode:
			return got, nil
		case d.Allowed && d.Delay > 0:
			if err := l.sleep(f.ctx, d.Delay); err != nil {
				_ = l.refund(f.ctx, f.req, d.Receipt) // the waiter left: its place goes back
				return decided{}, err
			}
			return got, nil
		case d.Allowed, a.cost == 0, d.RetryAfter == Never, d.RetryAfter > left:
			return got, nil
		}
		if err := l.sleep(f.ctx, max(d.RetryAfter, time.Microsecond)); err != nil {
			return decided{}, err
		}
	}
}

// record takes got as f's decision, with its outcome, and tells the log,
// the decision hook and the observers. A front that serves the request
// puts its Result in its context first, for the hooks and the handler to
// read.
func (f *journey) record(got decided) {
	l, res := f.l, &f.res
	res.Decision, res.Err, f.by = got.d, got.err, got.by
	denied := !res.Decision.Allowed && res.Cost > 0
	switch {
	case got.by == byFailureMode && (res.Decision.Allowed || f.serves && (res.DryRun || res.Cost == 0)):
		res.Outcome = FailedOpen
	case got.by == byFailureMode:
		res.Outcome = FailedClosed
	case denied && res.DryRun:
		res.Outcome = DryRunDenied
	case denied:
		res.Outcome = Denied
	default:
		res.Outcome = Allowed
	}
	if f.serves {
		f.frame = &frame{res: *res, limited: true}
		f.ctx = withFrame(f.ctx, f.frame)
		f.req = f.req.WithContext(f.ctx)
	}
	if l.decHook != nil {
		l.decHook(f.req, *res)
	}
	f.tell()
	l.outage.tally(f.by, res.Outcome)
}

// tell tells the observers what became of f.
func (f *journey) tell() {
	for _, o := range f.l.observers {
		o.ObserveDecision(DecisionEvent{Request: f.req, Result: f.res, Outcome: f.res.Outcome, Fallback: f.by == byFallback,
			Held: f.held, HoldFull: f.holdFull, Hold: holdOf(f.res.Outcome, f.held, f.holdFull)})
	}
}
