package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
)

// Defaults: what a Limiter uses where it was given nothing.
const (
	// DefaultPolicyName is the name of a policy built without a name.
	DefaultPolicyName = "default"
	// UnknownIPKey is the key ByIP gives every request whose client
	// address cannot be determined (an empty or unparsable RemoteAddr,
	// such as a Unix socket peer). All such requests share this one
	// bucket, so malformed input can never escape the limit.
	UnknownIPKey = "ip:unknown"
	// DefaultTimeout is how long a Limiter waits for its store on each
	// call unless WithTimeout says otherwise. A healthy Redis on the same
	// network answers in well under a millisecond, so 100ms trips only
	// when the store is in real trouble, while it caps what an outage
	// adds to the latency of every request. Raise it for a store that is
	// far away.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultCircuitFailures is how many failures in a row open the
	// store's circuit (WithCircuitBreaker).
	DefaultCircuitFailures = 5
	// DefaultCircuitCooldown is how long an open circuit skips the store
	// before a probe (WithCircuitBreaker).
	DefaultCircuitCooldown = time.Second
	// DefaultMaxHeld is how many requests one Limiter holds at once
	// unless WithMaxHeld says otherwise.
	DefaultMaxHeld = 1024
)

// An Option configures a Limiter built by New. Options are applied in
// order; when one is given twice, the last wins. An invalid argument makes
// New return an error.
type Option func(*config)

// config is what the options set: a Limiter's configuration.
type config struct {
	store    Store
	policy   *Policy
	ids      []Identifier
	policyFn func(*http.Request) *Policy
	cost     int64
	costSet  bool
	costFn   func(*http.Request) int64
	mode     FailureMode
	modeSet  bool // WithFailureMode was given
	fallback Store
	timeout  time.Duration
	errHook  func(*http.Request, error)
	logger   *slog.Logger
	denied   http.Handler
	decHook  func(*http.Request, Result)
	dryRun   bool
	style    HeaderStyle
	maxDelay time.Duration // WithMaxDelay; holdBelow unless set
	// reserveFirst: WithMaxDelay was set, and every request asks for a
	// place in line; else only a denial within maxDelay is held.
	reserveFirst bool
	maxHeld      int    // WithMaxHeld
	idHeader     string // WithIdempotencyKey
	refundIf     func(*http.Request, int) bool
	costAfter    func(*http.Request, int, int64) int64
	skip         func(*http.Request) bool
	// observers get every event (WithObserver).
	observers []Observer
	now       func() time.Time                                 // clock of the logs, the circuit breaker and waits
	sleep     func(ctx context.Context, d time.Duration) error // waits d, or until ctx is done
	err       error                                            // the first invalid option
	// breaker guards the store (not the fallback); see WithCircuitBreaker.
	breaker breaker.Breaker
}

// fail records the first invalid option; New returns it.
func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("ratelimit: "+format, args...)
	}
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
			if err := identifierErr(id); err != nil {
				c.fail("WithIdentifiers: identifier %d: %s", i, strings.TrimPrefix(err.Error(), "ratelimit: "))
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
	return required("WithPolicyFunc", "function", fn, func(c *config) { c.policyFn = fn })
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
	return required("WithCostFunc", "function", fn, func(c *config) { c.costFn = fn })
}

// WithFailureMode sets what happens when no store can decide: the store
// failed, and so did the fallback store if there is one. FailOpen admits
// every request unlimited; FailClosed refuses it.
//
// Giving the option is choosing: the store's own fallback (FallbackStore)
// is then not used, and only a store set with WithFallback is asked before
// the failure mode applies. Without the option, a Limiter asks the store's
// fallback when it names one (the Redis store names a memory store, so
// each server keeps limiting on its own while Redis is down), and applies
// FailClosed when no store can decide: a store that names no fallback
// (your own store, say) refuses requests while it fails rather than leave
// the routes unlimited. Unlimited is what you ask for with
// WithFailureMode(FailOpen).
func WithFailureMode(m FailureMode) Option {
	return func(c *config) {
		if m != FailOpen && m != FailClosed {
			c.fail("WithFailureMode: unknown failure mode %d", m)
			return
		}
		c.mode, c.modeSet = m, true
	}
}

// WithFallback sets a store to ask when the store given to New fails or
// does not answer within the timeout; typically store.NewMemory(), so
// that each server keeps limiting on its own during an outage of the
// shared store (a fleet of N servers then admits up to N times the limit).
// It replaces the store's own fallback (FallbackStore), which a Limiter
// without WithFailureMode asks by default. The fallback gets a fresh
// timeout of its own (none for the memory store, which answers at once),
// so a request waits at most twice the timeout. If the fallback fails too,
// the failure mode applies (FailClosed unless WithFailureMode says
// otherwise). When the fallback decides, Result.Err (and AllowN's error)
// is nil, since the failure mode did not apply; the store's error still
// goes to the error hook and the log. s must not be nil nor the store
// given to New.
func WithFallback(s Store) Option {
	return required("WithFallback", "store", s, func(c *config) { c.fallback = s })
}

// WithTimeout sets how long each store call may take (DefaultTimeout
// unless set). It bounds the call with context.WithTimeout on a context
// that keeps the request's values but not its cancellation: a client that
// goes away (or half-closes its connection) does not cut a decision short,
// since a decision must not depend on the client's connection. The Store
// must honour its context. d must be positive.
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
// store and of the fallback, before the failure mode applies, and when
// the circuit skips the store (wrapping ErrCircuitOpen); r is nil when the
// call came from Allow, AllowN, Wait, WaitN, AllowUpTo, Refund or Reset.
// The error wraps the store's, and context.DeadlineExceeded when the
// timeout expired. It also reports a request whose cost exceeds the
// capacity of its policy (ErrCostOverCapacity). fn runs on the request's
// goroutine and must be safe for concurrent use.
func WithErrorHook(fn func(r *http.Request, err error)) Option {
	return required("WithErrorHook", "function", fn, func(c *config) { c.errHook = fn })
}

// WithLogger sets where the Limiter logs; the default is slog.Default().
// It logs an outage of the store, not each error: one line at level Error
// when the store starts failing, with the error and what the Limiter does
// meanwhile (decides with the fallback store, admits unlimited, or
// refuses); while it lasts, at most one summary a minute at level Warn,
// with the counts since the previous line; and one line at level Info once
// the store has answered again for a second without failing, with the
// outage's length and how many requests the fallback decided, passed
// unlimited or refused. A caller's mistake (a cost above the policy's
// capacity, an invalid request, an operation the store lacks) is no
// outage: it is logged at level Error, at most once a minute, with the
// count of those left unlogged. Keys are never logged. Every error still
// goes to the error hook (WithErrorHook) and the observers, one by one.
func WithLogger(l *slog.Logger) Option {
	return required("WithLogger", "logger", l, func(c *config) { c.logger = l })
}

// WithDeniedHandler sets the handler that answers a denied request; the
// default is DefaultDeniedHandler(). It finds the Result in r.Context() (see
// FromContext). When it runs, the rate-limit headers, Retry-After and
// "Cache-Control: no-store" are already set on w. The response is a 429
// unless the handler writes another status itself: a handler that writes
// only a body, or nothing, answers 429 all the same.
func WithDeniedHandler(h http.Handler) Option {
	return required("WithDeniedHandler", "handler", h, func(c *config) { c.denied = h })
}

// WithDecisionHook sets a function that sees every decision: allowed,
// denied, store failures (Result.Err set) and dry runs, for metrics or
// audit. It runs before the response is written, with the request that
// carries the Result in its context; r is nil when the call came from
// Allow, AllowN, Wait, WaitN or AllowUpTo. Requests that no identifier
// applies to are not decided, so they are not seen. fn runs on the
// request's goroutine and must be safe for concurrent use. For several
// subscribers, and store latency and circuit state, see WithObserver.
func WithDecisionHook(fn func(r *http.Request, res Result)) Option {
	return required("WithDecisionHook", "function", fn, func(c *config) { c.decHook = fn })
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
// HeadersNone sends none of them, not even Retry-After (on a 429, or on
// FailClosed's 503). A denied response still carries "Cache-Control:
// no-store", and the default denied handler's body still names the limit
// and the wait: to tell clients nothing about the limits, also set
// WithDeniedHandler. Bits that name no style are an error.
func WithHeaders(style HeaderStyle) Option {
	return func(c *config) {
		if style&^allStyles != 0 {
			c.fail("WithHeaders(%d): unknown header style bits", style)
			return
		}
		c.style = style
	}
}

// WithMaxDelay makes Handler hold a request that can be admitted within d
// instead of refusing it (a leaky bucket with a queue of d): it is served
// when its turn comes, with headers describing the state at that time;
// beyond d it gets 429 as without the option. A client that disconnects
// while held gives its place back (its charge is refunded). Where the
// policy can reserve (exact logs and the token bucket; docs/recipes.md),
// the place in line is reserved in the store call itself: held requests
// are served in order and never more than the limit admits at the time
// each is served. Under other policies (sub-buckets, fixed window,
// approximation) a request is held for the Retry-After the store gave,
// then asked for again, as long as d allows: no order is kept among held
// requests. At most WithMaxHeld requests are held at once. d = 0 turns
// holding off; d must not be negative nor above MaxSpan.
//
// Without the option, Handler holds a request only when the store denied
// it with a wait below one second (which Retry-After, in whole seconds,
// cannot say: a client told "1" for 50ms would get a fraction of its
// rate), asking for its place in line after that denial. A policy with a
// penalty (BlockFor) is never held, with or without the option: its
// denial starts the penalty, and a request during it is refused however
// soon it ends.
func WithMaxDelay(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxSpan {
			c.fail("WithMaxDelay(%s): want a delay from 0 to %s", d, MaxSpan)
			return
		}
		c.maxDelay, c.reserveFirst = d, d > 0
	}
}

// WithIdempotencyKey makes a request carrying the named header (IETF
// draft "The Idempotency-Key HTTP Header Field") count once: a retry with
// the same value, for the same keys under the same policy within the
// policy's longest Period, is answered with the first decision and not
// charged again (Decision.Repeated), at most MaxRepeats times; after that
// it is charged like any request, so one value is never a free pass. The
// value is hashed before it reaches the store; values longer than 1024
// bytes are ignored (the request counts as usual). The Limiter does not
// store responses: every repeat runs the handler. Only admitted requests
// are remembered, so the retry of a denied request is decided afresh.
// Under a policy with a Concurrent limit every repeat is decided and
// charged anew, since every run of the handler holds a slot. The store
// must know request IDs (the memory and Redis stores do; others charge
// every repeat).
func WithIdempotencyKey(header string) Option {
	return func(c *config) {
		if err := validHeaderName(header); err != nil {
			c.fail("WithIdempotencyKey: header name %q: %v", header, err)
			return
		}
		c.idHeader = http.CanonicalHeaderKey(header)
	}
}

// WithSkip exempts the requests fn reports true for: they are served
// unlimited, uncharged and without rate-limit headers, as if no identifier
// applied. For health checks and internal networks (see ClientIn). fn must
// be safe for concurrent use.
func WithSkip(fn func(r *http.Request) bool) Option {
	return required("WithSkip", "function", fn, func(c *config) { c.skip = fn })
}

// holdBelow is the default hold: waits below one second, what Retry-After
// cannot say.
const holdBelow = time.Second - time.Microsecond

// WithMaxHeld bounds how many requests the Limiter's Handler holds at once
// (see WithMaxDelay), so that holding cannot be turned into a resource
// attack: beyond n, a request that would be held gets 429 at once. n = 0
// turns holding off; the default is DefaultMaxHeld.
func WithMaxHeld(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.fail("WithMaxHeld(%d): want 0 or more", n)
			return
		}
		c.maxHeld = n
	}
}

// WithObserver subscribes o to the Limiter's decisions, store calls and
// circuit changes. It may be given several times: every observer gets
// every event, in the order given, after the error and decision hooks.
// o must not be nil.
func WithObserver(o Observer) Option {
	return required("WithObserver", "observer", o, func(c *config) { c.observers = append(c.observers, o) })
}

// WithRefundIf gives a request's charge back after the handler answered,
// when fn says so, given the status the handler wrote (200 if it wrote
// none; 0 if it hijacked the connection). Typical uses: count only failed
// logins (refund when status < 400), do not charge server errors (status
// ≥ 500). The refund is exact (Refunder): it takes back what the charge
// still counts, never below zero, never another request's units; a charge
// is refunded at most once, whatever else asks (stacked Limiters, a held
// request whose client left, Limiter.Refund). The status is captured
// without hiding http.Flusher, http.Hijacker or http.ResponseController
// from the handler. fn must be safe for concurrent use; the store must be
// a Refunder (the memory and Redis stores are), or New fails.
func WithRefundIf(fn func(r *http.Request, status int) bool) Option {
	return required("WithRefundIf", "function", fn, func(c *config) { c.refundIf = fn })
}

// WithCostAfter settles each admitted request's charge, after the handler
// answered, to the cost fn returns (Limiter.Settle), given the status the
// handler wrote (as WithRefundIf gives it) and the bytes of body it wrote:
// for APIs metered by what a response turned out to cost (tokens
// generated, bytes sent). The request is charged its up-front cost
// (WithCost, WithCostFunc: an estimate) and the headers tell that; the
// settle charges the difference or gives it back, once. Usage past a
// limit is debt: later requests of the identity are denied until the
// limits have room again. A cost below 0 settles to 0, above MaxSettle to
// MaxSettle. When WithRefundIf refunds a request, it is not settled; a
// handler that panics keeps its up-front charge. A store error goes to
// the error hook and the log. fn must be safe for concurrent use; the
// store must be a Settler (the memory and Redis stores are), or New
// fails.
func WithCostAfter(fn func(r *http.Request, status int, written int64) int64) Option {
	return required("WithCostAfter", "function", fn, func(c *config) { c.costAfter = fn })
}

// WithCircuitBreaker makes the Limiter stop asking a store that keeps
// failing, so an outage does not cost every request the whole timeout:
// after failures consecutive store errors (timeouts included; requests
// whose client went away do not count) spanning at least cooldown (or at
// once, if the store has never answered), the circuit opens and requests
// go straight to the fallback store or the failure mode, without waiting.
//
// The time condition keeps a partial outage from stopping all limiting:
// in a Redis Cluster with one master down, the requests of identities on
// that master fail (each within the timeout, then fallback or failure
// mode) while the other masters keep answering, so the circuit stays
// closed and those identities keep being limited.
// After cooldown, one request probes the store with the normal timeout:
// if it answers, the circuit closes and limiting resumes; if not, the
// circuit stays open for another cooldown. The default is
// DefaultCircuitFailures (5) and DefaultCircuitCooldown (1s); failures 0
// turns the breaker off. A negative count or a non-positive cooldown with
// failures > 0 makes New fail.
func WithCircuitBreaker(failures int, cooldown time.Duration) Option {
	return func(c *config) {
		if failures < 0 || failures > 0 && cooldown <= 0 {
			c.fail("WithCircuitBreaker(%d, %s): want failures ≥ 0 and, when > 0, a positive cooldown", failures, cooldown)
			return
		}
		c.breaker = breaker.Breaker{Threshold: int64(failures), Cooldown: int64(cooldown), Quiet: true}
	}
}

// required returns an Option that calls set, or makes New fail when v is
// nil (see isNil): "name: nil what".
func required(name, what string, v any, set func(*config)) Option {
	return func(c *config) {
		if isNil(v) {
			c.fail("%s: nil %s", name, what)
			return
		}
		set(c)
	}
}

// isNil reports whether v is nil, or a nil pointer or func in an interface:
// a store or handler that would panic when called.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Func) && rv.IsNil()
}

// sameStore reports whether a and b are the same store, without risking
// the panic of comparing uncomparable values.
func sameStore(a, b Store) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Kind() == reflect.Pointer && a == b
}
