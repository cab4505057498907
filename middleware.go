package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
)

// DefaultTimeout is how long a Limiter waits for its store on each call
// unless WithTimeout says otherwise. A healthy Redis on the same network
// answers in well under a millisecond, so 100ms trips only when the store
// is in real trouble, while it caps what an outage adds to the latency of
// every request. Raise it for a store that is far away.
const DefaultTimeout = 100 * time.Millisecond

// failClosedRetryAfter is the Retry-After of the 503 answered by FailClosed,
// and the RetryAfter of its Decision: store outages are usually short, and
// the limiter gives up on a store within its timeout, so a client may try
// again soon.
const failClosedRetryAfter = time.Second

// logEvery is the least time between two error logs of one Limiter.
const logEvery = time.Second

// A Limiter limits the rate of HTTP requests, or of any event keyed by
// strings, against a Policy counted in a Store. Build one with New; the
// zero value is not usable. A Limiter is safe for concurrent use.
//
// Handler wraps an http.Handler: most callers want it. Allow and AllowN
// ask the same question outside HTTP, for keys the caller chooses.
//
// Every decision costs one call to the store, however many identifiers
// and limits are involved. When the store fails or does not answer within
// the timeout, the Limiter asks the fallback store if one is configured,
// and otherwise (or if the fallback fails too) applies its FailureMode.
// A request that none of the identifiers applies to passes unlimited (see
// WithIdentifiers).
type Limiter struct {
	config
	// epoch is when the Limiter was built; lastLog is the time of the
	// last error log, relative to epoch (monotonic), and suppressed the
	// number of error logs skipped since.
	epoch      time.Time
	lastLog    atomic.Int64
	suppressed atomic.Int64
}

type config struct {
	store    Store
	policy   *Policy
	ids      []Identifier
	policyFn func(*http.Request) *Policy
	cost     int64
	costSet  bool
	costFn   func(*http.Request) int64
	mode     FailureMode
	fallback Store
	timeout  time.Duration
	errHook  func(*http.Request, error)
	logger   *slog.Logger
	denied   http.Handler
	decHook  func(*http.Request, Result)
	dryRun   bool
	style    HeaderStyle
	now      func() time.Time // clock of the log throttle and the circuit breaker
	err      error            // the first invalid option
	// breaker guards the store (not the fallback); see WithCircuitBreaker.
	breaker    breaker.Breaker
	breakerSet bool
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("ratelimit: "+format, args...)
	}
}

// An Option configures a Limiter built by New. Options are applied in
// order; when one is given twice, the last wins. An invalid argument makes
// New return an error.
type Option func(*config)

// FailureMode says what a Limiter does when it cannot get a decision: the
// store (and the fallback store, if any) failed or did not answer within
// the timeout.
type FailureMode uint8

const (
	// FailOpen lets the request through, without rate-limit headers. The
	// error goes to the error hook and, throttled, to the logger. It is the
	// default: an outage of the store does not become an outage of the
	// service.
	FailOpen FailureMode = iota
	// FailClosed answers 503 Service Unavailable with "Retry-After: 1",
	// "Cache-Control: no-store" and a short plain-text body that reveals
	// nothing of the error. A request of cost 0 is served all the same.
	// Allow and AllowN report the request denied, with a RetryAfter of one
	// second.
	FailClosed
)

// String returns "fail-open" or "fail-closed".
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return "failure-mode(" + strconv.Itoa(int(m)) + ")"
}

// WithIdentifiers sets who a request is limited as; it replaces the
// default, ByIP() with no options (the peer address in
// http.Request.RemoteAddr, no proxy headers trusted).
//
// Every identifier that applies to a request contributes one key, and all
// keys are checked and charged together in the same single store call: the
// request is admitted only if every key has room. An identifier that does
// not apply (ok false, or an empty key) is skipped. If none applies, the
// request passes unlimited: no store call, no headers, no decision hook and
// no Result in its context. To make sure every request is limited, include
// an identifier that always applies, such as ByIP.
//
// One to MaxKeys identifiers are required, and none may be nil or a nil
// IdentifierFunc. (A nil pointer is accepted: some types, such as
// *IPIdentifier, give it a meaning.)
func WithIdentifiers(ids ...Identifier) Option {
	return func(c *config) {
		if len(ids) == 0 {
			c.fail("WithIdentifiers: no identifiers")
			return
		}
		if len(ids) > MaxKeys {
			c.fail("WithIdentifiers: %d identifiers, at most %d", len(ids), MaxKeys)
			return
		}
		for i, id := range ids {
			if id == nil || isNilFunc(id) {
				c.fail("WithIdentifiers: identifier %d is nil", i)
				return
			}
		}
		c.ids = append([]Identifier(nil), ids...)
	}
}

// WithPolicyFunc chooses the policy per request, for example by plan tier.
// When fn returns nil, the policy given to New applies. fn must be safe
// for concurrent use; it runs once per request, after the identifiers.
func WithPolicyFunc(fn func(r *http.Request) *Policy) Option {
	return func(c *config) {
		if fn == nil {
			c.fail("WithPolicyFunc: nil function")
			return
		}
		c.policyFn = fn
	}
}

// WithCost sets the cost of every request, in units of Limit.Rate. The
// default is 1. A cost of 0 never blocks and never charges: the store is
// only asked for the current state (a peek), which the headers report.
// n must be at least 0 and at most the capacity of the policy given to New
// (Policy.MaxCost), or every request would be denied. WithCost and
// WithCostFunc are exclusive.
func WithCost(n int64) Option {
	return func(c *config) {
		if n < 0 {
			c.fail("WithCost(%d): cost must not be negative", n)
			return
		}
		c.cost, c.costSet = n, true
	}
}

// WithCostFunc weighs each request: fn's result is its cost, in units of
// Limit.Rate; a negative result counts as 0 (see WithCost for what 0
// means). A request whose cost exceeds the capacity of its policy is
// always denied, without Retry-After. fn must be safe for concurrent use.
// WithCost and WithCostFunc are exclusive.
func WithCostFunc(fn func(r *http.Request) int64) Option {
	return func(c *config) {
		if fn == nil {
			c.fail("WithCostFunc: nil function")
			return
		}
		c.costFn = fn
	}
}

// WithFailureMode sets what happens when no store can decide; the default
// is FailOpen.
func WithFailureMode(m FailureMode) Option {
	return func(c *config) {
		if m != FailOpen && m != FailClosed {
			c.fail("WithFailureMode: unknown failure mode %d", m)
			return
		}
		c.mode = m
	}
}

// WithFallback sets a store to ask when the store given to New fails or
// does not answer within the timeout; typically store.NewMemory(), so
// that each server keeps limiting on its own during an outage of the
// shared store. The fallback gets a fresh timeout of its own, so a request
// waits at most twice the timeout. If the fallback fails too, the failure
// mode applies. The fallback is not asked when the request's own context
// is already done. When the fallback decides, Result.Err (and AllowN's
// error) is nil, since the failure mode did not apply; the store's error
// still goes to the error hook and the log. s must not be nil nor the
// store given to New.
func WithFallback(s Store) Option {
	return func(c *config) {
		if isNil(s) {
			c.fail("WithFallback: nil store")
			return
		}
		c.fallback = s
	}
}

// WithTimeout sets how long each store call may take (DefaultTimeout
// unless set). It bounds the call with context.WithTimeout on the
// request's context, so the Store must honour its context. d must be
// positive.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithTimeout(%v): timeout must be positive", d)
			return
		}
		c.timeout = d
	}
}

// WithErrorHook sets a function called with every store error, of the
// store and of the fallback, before the failure mode applies; r is nil
// when the call came from Allow or AllowN. The error wraps the store's,
// and context.DeadlineExceeded when the timeout expired. When the
// request's own context was done (the client went away), the error wraps
// that context's error, typically context.Canceled: filter it with
// errors.Is if it is not a store failure to you. fn runs on the request's
// goroutine and must be safe for concurrent use.
func WithErrorHook(fn func(r *http.Request, err error)) Option {
	return func(c *config) {
		if fn == nil {
			c.fail("WithErrorHook: nil function")
			return
		}
		c.errHook = fn
	}
}

// WithLogger sets where store errors are logged; the default is
// slog.Default(). Errors are logged at level Error, at most about once a
// second per Limiter so that an outage does not flood the log: each record
// carries "suppressed", the number of errors left unlogged since the
// previous one. Store calls abandoned because the request's own context
// was done (the client went away) are logged at level Debug, unthrottled,
// and do not count as suppressed. Keys are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("WithLogger: nil logger")
			return
		}
		c.logger = l
	}
}

// WithDeniedHandler sets the handler that answers a denied request; the
// default is DeniedHandler. It finds the Result in r.Context() (see
// FromContext). When it runs, the rate-limit headers, Retry-After and
// "Cache-Control: no-store" are already set on w; it must write the
// status code (normally 429).
func WithDeniedHandler(h http.Handler) Option {
	return func(c *config) {
		if isNil(h) {
			c.fail("WithDeniedHandler: nil handler")
			return
		}
		c.denied = h
	}
}

// WithDecisionHook sets a function that sees every decision: allowed,
// denied, store failures (Result.Err set) and dry runs, for metrics or
// audit. It runs before the response is written, with the request that
// carries the Result in its context; r is nil when the call came from
// Allow or AllowN. Requests that no identifier applies to are not
// decided, so they are not seen. fn runs on the request's goroutine and
// must be safe for concurrent use.
func WithDecisionHook(fn func(r *http.Request, res Result)) Option {
	return func(c *config) {
		if fn == nil {
			c.fail("WithDecisionHook: nil function")
			return
		}
		c.decHook = fn
	}
}

// WithDryRun makes Handler count and report but never block: a request
// that would be denied is served, with the rate-limit headers and
// Retry-After that report the denial, and Result.DryRun set. A dry run
// does not block on a store failure either, whatever the failure mode.
// Since denied requests are never charged, a client over the limit is not
// charged further. Allow and AllowN are not affected: they report the
// store's decision as is.
func WithDryRun(on bool) Option {
	return func(c *config) { c.dryRun = on }
}

// WithHeaders sets the styles of the rate-limit headers (HeadersIETF
// unless set); styles combine with |, e.g. HeadersIETF|HeadersXRateLimit.
// HeadersNone sends none of them, not even Retry-After. A denied response
// still carries "Cache-Control: no-store", and the default denied handler's
// body still names the limit and the wait: to tell clients nothing about
// the limits, also set WithDeniedHandler. Bits that name no style are an
// error.
func WithHeaders(style HeaderStyle) Option {
	return func(c *config) {
		if style&^(HeadersIETF|HeadersDraft06|HeadersXRateLimit) != 0 {
			c.fail("WithHeaders(%d): unknown header style bits", style)
			return
		}
		c.style = style
	}
}

// New returns a Limiter that counts requests against policy in store.
// Every option is checked here, so a Limiter that New returns does not
// fail on configuration at request time: New returns an error, prefixed
// "ratelimit: ", for a nil store, policy or option, a nil function or
// handler given to an option, a negative cost or one above the policy's
// capacity, both WithCost and WithCostFunc, a non-positive timeout, a
// fallback that is nil or the store itself, an unknown failure mode or
// header style, and when ByIP (the default identifier) fails.
func New(store Store, policy *Policy, opts ...Option) (*Limiter, error) {
	if isNil(store) {
		return nil, errors.New("ratelimit: New: nil store")
	}
	if policy == nil {
		return nil, errors.New("ratelimit: New: nil policy")
	}
	l := &Limiter{config: config{
		store:   store,
		policy:  policy,
		cost:    1,
		timeout: DefaultTimeout,
		style:   HeadersIETF,
	}}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("ratelimit: New: option %d is nil", i)
		}
		o(&l.config)
		if l.err != nil {
			return nil, l.err
		}
	}
	c := &l.config
	if !c.breakerSet {
		c.breaker = breaker.Breaker{Threshold: DefaultCircuitFailures, Cooldown: int64(DefaultCircuitCooldown), Quiet: true}
	}

	if c.costSet && c.costFn != nil {
		return nil, errors.New("ratelimit: WithCost and WithCostFunc are exclusive")
	}
	if c.cost > policy.MaxCost() {
		return nil, fmt.Errorf("ratelimit: WithCost(%d): above the capacity %d of policy %q, every request would be denied",
			c.cost, policy.MaxCost(), policy.Name())
	}
	if c.fallback != nil && sameStore(c.fallback, store) {
		return nil, errors.New("ratelimit: WithFallback: the fallback is the store itself")
	}
	if c.ids == nil {
		id, err := ByIP()
		if err != nil {
			return nil, fmt.Errorf("ratelimit: default identifier: %w", err)
		}
		c.ids = []Identifier{id}
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.denied == nil {
		c.denied = DeniedHandler
		if isNil(c.denied) {
			return nil, errors.New("ratelimit: New: DeniedHandler is nil; set one with WithDeniedHandler")
		}
	}
	l.setClock(time.Now)
	return l, nil
}

// setClock sets the clock of the log throttle and restarts it.
func (l *Limiter) setClock(now func() time.Time) {
	l.now = now
	l.epoch = now()
	l.lastLog.Store(-int64(logEvery)) // the first error is logged
	l.suppressed.Store(0)
}

// sinceEpoch is the Limiter's monotonic clock, in nanoseconds.
func (l *Limiter) sinceEpoch() int64 { return int64(l.now().Sub(l.epoch)) }

// isNil reports whether v is nil, or a nil pointer or func in an interface:
// a store or handler that would panic when called.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Func) && rv.IsNil()
}

// isNilFunc reports whether v is a nil func in an interface.
func isNilFunc(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Func && rv.IsNil()
}

// sameStore reports whether a and b are the same store, without risking
// the panic of comparing uncomparable values.
func sameStore(a, b Store) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Kind() == reflect.Pointer && a == b
}

// Handler returns next wrapped by the limiter, for chi (r.Use(l.Handler),
// r.With(l.Handler)) or plain net/http (l.Handler(mux)).
//
// For each request: every identifier gives a key (those that do not apply
// are skipped; if none applies the request passes unlimited), the policy
// (WithPolicyFunc or the default) and the cost are chosen, and the store is
// asked once, within the timeout. Then:
//
//   - Allowed: the rate-limit headers are set and next serves the request.
//   - Denied: the headers, Retry-After (unless the cost exceeds the
//     policy's capacity: it would never be admitted) and "Cache-Control:
//     no-store" are set and the denied handler answers, normally 429.
//   - No store could decide: the failure mode applies.
//
// Both next and the denied handler find the Result in the request's
// context (FromContext). A request with cost 0 is never denied, and in a
// dry run (WithDryRun) nothing is blocked.
//
// Handler panics if next is nil.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("ratelimit: Handler: nil next handler")
	}
	if l == nil || l.store == nil {
		panic("ratelimit: Handler: Limiter not built by New")
	}
	return &handler{l: l, next: next}
}

type handler struct {
	l    *Limiter
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := h.l
	keys := l.identify(r)
	if keys == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	res := Result{Policy: l.policy, Keys: keys, Cost: l.cost, DryRun: l.dryRun}
	if l.policyFn != nil {
		if p := l.policyFn(r); p != nil {
			res.Policy = p
		}
	}
	if l.costFn != nil {
		res.Cost = max(l.costFn(r), 0)
	}
	var failed bool
	res.Decision, failed, res.Err = l.take(r.Context(), r, res.Policy, keys, res.Cost)
	r = r.WithContext(NewContext(r.Context(), res))
	if l.decHook != nil {
		l.decHook(r, res)
	}
	if failed {
		if l.mode == FailClosed && !l.dryRun && res.Cost > 0 {
			serviceUnavailable(w)
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	d := &res.Decision
	denied := !d.Allowed && res.Cost > 0
	hdr := w.Header()
	if l.style != HeadersNone {
		SetHeaders(hdr, l.style, res.Policy, *d)
		if denied && d.RetryAfter > 0 {
			SetRetryAfter(hdr, *d)
		}
	}
	if denied && !l.dryRun {
		hdr.Set("Cache-Control", "no-store")
		l.denied.ServeHTTP(w, r)
		return
	}
	h.next.ServeHTTP(w, r)
}

// identify returns the keys of the identifiers that apply to r, without
// duplicates, or nil if none applies.
func (l *Limiter) identify(r *http.Request) []string {
	var keys []string
ids:
	for _, id := range l.ids {
		k, ok := id.Identify(r)
		if !ok || k == "" {
			continue
		}
		for _, seen := range keys {
			if seen == k {
				continue ids
			}
		}
		if keys == nil {
			keys = make([]string, 0, len(l.ids))
		}
		keys = append(keys, k)
	}
	return keys
}

func serviceUnavailable(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(int(failClosedRetryAfter/time.Second)))
	h.Set("Cache-Control", "no-store")
	http.Error(w, "Service temporarily unavailable, please retry shortly.", http.StatusServiceUnavailable)
}

// Allow reports whether one event may happen now for all of keys; it is
// AllowN(ctx, 1, keys...).
func (l *Limiter) Allow(ctx context.Context, keys ...string) (Decision, error) {
	return l.AllowN(ctx, 1, keys...)
}

// AllowN asks the store whether an event of the given cost may happen now
// for all of keys under the policy given to New and, if so, charges every
// key. It is the Handler's decision outside HTTP: the keys are the
// caller's (such as "job:" + tenant), and the timeout, fallback, failure
// mode, hooks (with a nil request) and logging are the same. A cost of 0
// charges nothing and reports whether a cost of 1 would be admitted.
// Dry run does not apply: the Decision is the store's.
//
// The error is non-nil when the arguments are invalid (negative cost, no
// key, more than MaxKeys keys or an empty key: then the store is not asked and the Decision is the
// zero value, which denies), or when no store could decide: then the
// Decision is the failure mode's (FailOpen allows, FailClosed denies with
// a RetryAfter of one second) and the error says why. When the fallback
// store decides, its Decision comes with a nil error. Callers that only
// want a yes or no may use Decision.Allowed whatever the error.
func (l *Limiter) AllowN(ctx context.Context, cost int64, keys ...string) (Decision, error) {
	if cost < 0 {
		return Decision{}, fmt.Errorf("ratelimit: AllowN: negative cost %d", cost)
	}
	if len(keys) == 0 {
		return Decision{}, errors.New("ratelimit: AllowN: no keys")
	}
	if len(keys) > MaxKeys {
		return Decision{}, fmt.Errorf("ratelimit: AllowN: %d keys, at most %d", len(keys), MaxKeys)
	}
	for i, k := range keys {
		if k == "" {
			return Decision{}, fmt.Errorf("ratelimit: AllowN: key %d is empty", i)
		}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	keys = dedupe(keys)
	d, _, err := l.take(ctx, nil, l.policy, keys, cost)
	if l.decHook != nil {
		l.decHook(nil, Result{Policy: l.policy, Keys: keys, Cost: cost, Decision: d, Err: err})
	}
	return d, err
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

// take asks the store, then the fallback, for a decision. failed reports
// that neither could decide: the Decision is then the failure mode's and
// err says why. When the fallback decides, err is nil, as in Result.Err:
// the store's error has gone to the error hook and the log.
func (l *Limiter) take(parent context.Context, r *http.Request, p *Policy, keys []string, cost int64) (d Decision, failed bool, err error) {
	req := Request{Policy: p, Keys: keys, Cost: cost}
	if ok, probe := l.breaker.Allow(l.sinceEpoch); ok {
		d, err = l.call(parent, r, l.store, "store", req)
		if errors.Is(err, ErrInvalidRequest) {
			// A bug of the caller's, not an outage: no circuit, no fallback.
			l.breaker.Forget(probe)
			return l.failed(err)
		}
		if err == nil || parent.Err() == nil { // a client that went away says nothing of the store
			if l.breaker.Record(l.sinceEpoch, err == nil, probe) {
				l.logger.LogAttrs(parent, slog.LevelWarn, "ratelimit: store circuit opened: skipping the store after repeated failures",
					slog.String("policy", p.Name()), slog.Duration("cooldown", time.Duration(l.breaker.Cooldown)))
			}
		} else {
			l.breaker.Forget(probe)
		}
		if err == nil {
			return d, false, nil
		}
	} else {
		err = circuitErr(l.breaker.Cooldown)
		if l.errHook != nil {
			l.errHook(r, err)
		}
	}
	if l.fallback != nil && parent.Err() == nil {
		fd, ferr := l.call(parent, r, l.fallback, "fallback store", req)
		if ferr == nil {
			return fd, false, nil
		}
		err = errors.Join(err, ferr)
	}
	return l.failed(err)
}

// failed returns the failure mode's decision for err.
func (l *Limiter) failed(err error) (Decision, bool, error) {
	if l.mode == FailClosed {
		return Decision{RetryAfter: failClosedRetryAfter}, true, err
	}
	return Decision{Allowed: true}, true, err
}

// call asks s within the timeout. On failure it returns the error with its
// context, after the error hook and the log have seen it.
func (l *Limiter) call(parent context.Context, r *http.Request, s Store, which string, req Request) (Decision, error) {
	ctx := parent
	if _, local := s.(Local); !local {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, l.timeout)
		defer cancel()
	}
	d, err := s.Take(ctx, req)
	var expired error
	if err != nil {
		expired = ctx.Err()
	} else if err = checkDecision(d, req); err != nil {
		d = Decision{}
	}
	if err == nil {
		return d, nil
	}
	gone := parent.Err()
	switch {
	case gone != nil:
		err = wrap(which+": request context done", err, gone)
	case expired != nil:
		err = wrap(which+": no answer within "+l.timeout.String(), err, expired)
	default:
		err = fmt.Errorf("ratelimit: %s: %w", which, err)
	}
	if l.errHook != nil {
		l.errHook(r, err)
	}
	l.log(parent, gone != nil, which, req.Policy, err)
	return Decision{}, err
}

// wrap returns err with context, wrapping cause too unless err already does.
func wrap(msg string, err, cause error) error {
	if errors.Is(err, cause) {
		return fmt.Errorf("ratelimit: %s: %w", msg, err)
	}
	return fmt.Errorf("ratelimit: %s: %w (%w)", msg, err, cause)
}

// checkDecision reports a Decision that points outside its Request, so a
// faulty store cannot make the headers index out of range.
func checkDecision(d Decision, req Request) error {
	n := req.Policy.NumLimits()
	if d.Limit < 0 || d.Limit >= n || d.Key < 0 || d.Key >= len(req.Keys) || len(d.Limits) != 0 && len(d.Limits) != n {
		return fmt.Errorf("invalid decision: limit %d, key %d, %d limit states for %d limits and %d keys",
			d.Limit, d.Key, len(d.Limits), n, len(req.Keys))
	}
	return nil
}

// log logs a store error: at level Debug when the caller went away, else
// at level Error, at most once per logEvery, counting the ones it skips.
func (l *Limiter) log(ctx context.Context, gone bool, which string, p *Policy, err error) {
	if gone {
		l.logger.LogAttrs(ctx, slog.LevelDebug, "ratelimit: store call abandoned, request context done",
			slog.String("store", which), slog.String("policy", p.Name()), slog.Any("error", err))
		return
	}
	now := int64(l.now().Sub(l.epoch))
	last := l.lastLog.Load()
	if now-last < int64(logEvery) || !l.lastLog.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return
	}
	l.logger.LogAttrs(ctx, slog.LevelError, "ratelimit: store failed",
		slog.String("store", which), slog.String("policy", p.Name()),
		slog.String("failure_mode", l.mode.String()), slog.Bool("fallback", l.fallback != nil),
		slog.Any("error", err), slog.Int64("suppressed", l.suppressed.Swap(0)))
}
