// Package ratelimitotel records what a ratelimit.Limiter does as
// OpenTelemetry metrics: its decisions, the latency and errors of its store
// calls, and the state of its store's circuit breaker.
//
// An [Observer] makes its instruments from a metric.Meter you pass in (it
// never touches the global MeterProvider) and is a ratelimit.Observer:
//
//	obs, err := ratelimitotel.New(provider.Meter("github.com/ratelimitkit/ratelimit"))
//	...
//	defer obs.Close()
//	lim, err := ratelimit.New(st, policy, ratelimit.WithObserver(obs))
//
// # Instruments
//
// With the default prefix "ratelimit":
//
//   - ratelimit.decisions (Int64Counter, {decision}): decided requests, with
//     the attributes policy, outcome ("allowed", "denied",
//     "dry_run_denied", "failed_open", "failed_closed" or "abandoned") and fallback
//     (bool: the fallback store decided).
//   - ratelimit.store.duration (Float64Histogram, s): store call latency,
//     with op (ratelimit.StoreEvent.Op: "take", "lease", "refund", ...) and
//     store ("main" or "fallback"). Calls the open circuit answered are
//     not recorded: they took no time and would hide the store's latency.
//   - ratelimit.store.errors (Int64Counter, {error}): failed store calls,
//     with op, store and kind (ratelimit.StoreEvent.ErrorKind: "timeout",
//     "circuit_open", "invalid_request", "unsupported" or "error").
//   - ratelimit.circuit.open (Int64ObservableGauge, 1): 1 while the store's
//     circuit is open, 0 while it is closed.
//   - ratelimit.circuit.openings (Int64Counter, {opening}): circuit
//     openings.
//   - ratelimit.hold.requests (Int64Counter, {request}): requests held for
//     their turn (WithMaxDelay), with outcome "served", "refused" (still
//     denied at the end of the hold), "gave_up" (the client left) or
//     "queue_full" (refused at once: MaxHeld requests were held).
//   - ratelimit.hold.wait (Float64Histogram, s): how long each held
//     request waited.
//
// The hold.requests series and store.errors of op "take", each store and
// the kinds timeout, circuit_open and error are recorded at 0 when the
// Observer is made, so that a dashboard or an alert over them reads 0
// rather than no data until the first hold or outage.
//
// An OpenTelemetry-to-Prometheus exporter turns these into
// ratelimit_decisions_total and so on, like the metrics/prometheus module.
//
// # Cardinality
//
// No attribute carries a key, an address or an error text. The policy
// attribute takes the policy's name, which the program chooses. A program
// whose WithPolicyFunc builds policies from request data would make a
// series per name: the Observer therefore gives at most
// [DefaultMaxPolicies] distinct names an attribute value of their own
// ([WithMaxPolicies]) and records any further policy as "other"
// ([OtherPolicy]); [WithoutPolicyAttribute] drops the attribute.
//
// # Several Limiters
//
// One Observer may serve several Limiters: their decisions and store
// calls add up, and the circuit gauge shows the last change any of them
// reported. To watch each Limiter's circuit, give each its own Observer
// with distinct WithAttributes (say limiter="api" and limiter="jobs").
package ratelimitotel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimitkit/ratelimit"
)

// DefaultPrefix begins every instrument name unless WithPrefix says
// otherwise.
const DefaultPrefix = "ratelimit"

// DefaultMaxPolicies is how many distinct policy names an Observer records
// unless WithMaxPolicies says otherwise.
const DefaultMaxPolicies = 100

// OtherPolicy is the policy attribute of the decisions of policies beyond
// the cap (WithMaxPolicies). A policy of your own named "other" shares it.
const OtherPolicy = "other"

// UnknownPolicy is the policy attribute of a decision without a policy
// (only a Result built by hand has none).
const UnknownPolicy = "unknown"

// DefaultBuckets are the explicit bucket boundaries, in seconds, of the
// store latency histogram: from 100µs (a Redis on the same host) to 1s
// (well past the Limiter's default 100ms timeout).
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// Option configures an Observer.
type Option func(*config)

type config struct {
	prefix      string
	attrs       []attribute.KeyValue
	buckets     []float64
	maxPolicies int
	noPolicy    bool
	errs        []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// instrumentPrefix is what an instrument name may begin with (the name
// syntax of the OpenTelemetry specification, less the length: with the
// suffixes, names stay within 255 characters for a prefix of at most 200).
var instrumentPrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_./-]{0,199}$`)

// WithPrefix sets what every instrument name begins with (DefaultPrefix,
// "ratelimit", by default): the names are prefix + ".decisions" and so on.
// It must begin with an ASCII letter and hold only letters, digits, "_",
// ".", "-" and "/", at most 200 characters; else New fails.
func WithPrefix(prefix string) Option {
	return func(c *config) {
		if !instrumentPrefix.MatchString(prefix) {
			c.fail("WithPrefix(%q): want an ASCII letter, then letters, digits, _ . - or /, at most 200 characters", prefix)
			return
		}
		c.prefix = prefix
	}
}

// ownAttributes are the keys of the Observer's own attributes.
var ownAttributes = []string{"policy", "outcome", "fallback", "op", "store", "kind"}

// WithAttributes adds attributes to every measurement, for example
// limiter="api" when several Limiters each have an Observer on one Meter.
// Their keys must be non-empty and not those the Observer uses (policy,
// outcome, fallback, op, store, kind); else New fails. Later options add
// to earlier ones.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) {
		for _, a := range attrs {
			k := string(a.Key)
			switch {
			case !a.Valid():
				c.fail("WithAttributes: attribute %q is invalid (empty key or no value)", k)
			case slices.Contains(ownAttributes, k):
				c.fail("WithAttributes: key %q is one of the Observer's own", k)
			default:
				c.attrs = append(c.attrs, a)
			}
		}
	}
}

// WithBuckets sets the explicit bucket boundaries, in seconds, of the store
// latency histogram (DefaultBuckets by default). They must be finite and
// strictly increasing, and there must be at least one; else New fails. A
// View of the MeterProvider may still override them.
func WithBuckets(bounds ...float64) Option {
	return func(c *config) {
		if len(bounds) == 0 {
			c.fail("WithBuckets: no bucket boundaries")
			return
		}
		for i, b := range bounds {
			if math.IsNaN(b) || math.IsInf(b, 0) {
				c.fail("WithBuckets: boundary %d is %v, want a finite number of seconds", i, b)
				return
			}
			if i > 0 && b <= bounds[i-1] {
				c.fail("WithBuckets: boundary %d (%v) is not above boundary %d (%v); boundaries must increase", i, b, i-1, bounds[i-1])
				return
			}
		}
		c.buckets = append([]float64(nil), bounds...)
	}
}

// WithMaxPolicies sets how many distinct policy names get a policy
// attribute of their own (DefaultMaxPolicies by default): the first n
// names seen keep theirs for the Observer's life, and the decisions of any
// other policy are recorded as OtherPolicy. n must be at least 1; else New
// fails. To drop the attribute, use WithoutPolicyAttribute.
func WithMaxPolicies(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("WithMaxPolicies(%d): want at least 1 (WithoutPolicyAttribute drops the attribute)", n)
			return
		}
		c.maxPolicies = n
	}
}

// WithoutPolicyAttribute drops the policy attribute from the decisions
// counter: decisions are recorded by outcome and fallback only.
func WithoutPolicyAttribute() Option {
	return func(c *config) { c.noPolicy = true }
}

// Observer records a Limiter's decisions, store calls and circuit changes
// with OpenTelemetry instruments (see the package doc for their names and
// attributes). It implements ratelimit.Observer and is safe for concurrent
// use. Build it with New; Close it when the Limiter is gone.
type Observer struct {
	attrs       []attribute.KeyValue
	noPolicy    bool
	maxPolicies int

	decisions metric.Int64Counter
	duration  metric.Float64Histogram
	errors    metric.Int64Counter
	openings  metric.Int64Counter
	held      metric.Int64Counter
	wait      metric.Float64Histogram
	gauge     metric.Int64ObservableGauge
	reg       metric.Registration
	open      atomic.Int64

	// opts caches the measurement options (attribute sets) of each
	// combination of attribute values: a bounded set, thanks to the
	// policy cap.
	opts sync.Map // optKey → metric.MeasurementOption

	// policies holds the names that have an attribute value of their own;
	// full is set once it holds maxPolicies of them.
	policies sync.Map // string → struct{}
	mu       sync.Mutex
	n        int
	full     atomic.Bool
}

var _ ratelimit.Observer = (*Observer)(nil)

// optKey names one attribute set: kind 'd' (decision: a policy, b outcome,
// c fallback), 's' (store call: a op, b store), 'e' (store error: a op,
// b store, c kind), 'h' (held request: a outcome), 'w' (hold wait: none)
// or 'c' (circuit opening: none).
type optKey struct {
	kind    byte
	a, b, c string
}

// New makes the Observer's instruments with meter, and registers the
// callback of the circuit gauge. It returns an error, prefixed
// "ratelimitotel: ", for a nil meter, a bad option, or an instrument the
// meter refused.
func New(meter metric.Meter, opts ...Option) (*Observer, error) {
	if meter == nil {
		return nil, errors.New("ratelimitotel: nil meter")
	}
	cfg := config{prefix: DefaultPrefix, buckets: DefaultBuckets, maxPolicies: DefaultMaxPolicies}
	for _, o := range opts {
		if o == nil {
			cfg.fail("nil option")
			continue
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("ratelimitotel: %w", errors.Join(cfg.errs...))
	}
	o := &Observer{attrs: cfg.attrs, noPolicy: cfg.noPolicy, maxPolicies: cfg.maxPolicies}
	p := cfg.prefix
	var err error
	var errs []error
	o.decisions, err = meter.Int64Counter(p+".decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Requests decided by the rate limiter, by policy, outcome (allowed, denied, dry_run_denied, failed_open, failed_closed, abandoned) and whether the fallback store decided."))
	errs = append(errs, err)
	o.duration, err = meter.Float64Histogram(p+".store.duration", metric.WithUnit("s"),
		metric.WithDescription("Latency of the rate limiter's store calls, by operation and store (main or fallback); calls skipped by the open circuit are not recorded."),
		metric.WithExplicitBucketBoundaries(cfg.buckets...))
	errs = append(errs, err)
	o.errors, err = meter.Int64Counter(p+".store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed store calls of the rate limiter, by operation, store (main or fallback) and kind (timeout, circuit_open, invalid_request, unsupported, error)."))
	errs = append(errs, err)
	o.openings, err = meter.Int64Counter(p+".circuit.openings", metric.WithUnit("{opening}"),
		metric.WithDescription("Times the rate limiter's store circuit opened."))
	errs = append(errs, err)
	o.held, err = meter.Int64Counter(p+".hold.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests the rate limiter held for their turn (WithMaxDelay), by outcome: served, refused (still denied at the end), gave_up (the client left) or queue_full (refused at once: MaxHeld were held)."))
	errs = append(errs, err)
	o.wait, err = meter.Float64Histogram(p+".hold.wait", metric.WithUnit("s"),
		metric.WithDescription("How long the rate limiter held each held request before it was served, refused or its client left."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	errs = append(errs, err)
	o.gauge, err = meter.Int64ObservableGauge(p+".circuit.open", metric.WithUnit("1"),
		metric.WithDescription("1 while the rate limiter's store circuit is open (the store is skipped), 0 while it is closed."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ratelimitotel: %w", err)
	}
	constant := metric.WithAttributeSet(attribute.NewSet(o.attrs...))
	o.reg, err = meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		ob.ObserveInt64(o.gauge, o.open.Load(), constant)
		return nil
	}, o.gauge)
	if err != nil {
		return nil, fmt.Errorf("ratelimitotel: register the circuit gauge's callback: %w", err)
	}
	// Every series a dashboard or an alert reads exists from the start, at
	// 0: a rate over it then says 0, not "no data", until the first hold
	// or the first outage.
	ctx := context.Background()
	for _, h := range holdOutcomes {
		o.held.Add(ctx, 0, o.option(optKey{kind: 'h', a: h}))
	}
	for _, store := range []string{"main", "fallback"} {
		for _, kind := range []string{"timeout", "circuit_open", "error"} {
			o.errors.Add(ctx, 0, o.option(optKey{kind: 'e', a: "take", b: store, c: kind}))
		}
	}
	return o, nil
}

// holdBuckets are the bucket boundaries of the hold.wait histogram: a
// Limiter holds a request below a second by default (WithMaxDelay).
var holdBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// holdOutcomes are the values of the hold.requests outcome attribute.
var holdOutcomes = []string{"served", "refused", "gave_up", "queue_full"}

// Close unregisters the circuit gauge's callback, so that the Meter no
// longer reports it. The counters and the histogram keep what they
// recorded. Close is safe to call more than once.
func (o *Observer) Close() error {
	if o.reg == nil {
		return nil
	}
	if err := o.reg.Unregister(); err != nil {
		return fmt.Errorf("ratelimitotel: unregister the circuit gauge's callback: %w", err)
	}
	return nil
}

// ObserveDecision counts one decision under its policy, outcome and
// fallback attributes, and a held request under its hold's outcome, with
// its wait.
func (o *Observer) ObserveDecision(ev ratelimit.DecisionEvent) {
	if h := ev.Hold; h != "" {
		o.held.Add(context.Background(), 1, o.option(optKey{kind: 'h', a: h}))
		if ev.Held > 0 {
			o.wait.Record(context.Background(), ev.Held.Seconds(), o.option(optKey{kind: 'w'}))
		}
	}
	k := optKey{kind: 'd', b: ev.Outcome.String(), c: "false"}
	if ev.Fallback {
		k.c = "true"
	}
	if !o.noPolicy {
		k.a = o.policyValue(ev.Result.Policy)
	}
	o.decisions.Add(context.Background(), 1, o.option(k))
}

// ObserveStore records one store call's latency (unless the open circuit
// answered) and, if it failed, counts its error kind.
func (o *Observer) ObserveStore(ev ratelimit.StoreEvent) {
	store := "main"
	if ev.Fallback {
		store = "fallback"
	}
	kind := ev.ErrorKind
	ctx := context.Background()
	if kind != "circuit_open" {
		o.duration.Record(ctx, ev.Duration.Seconds(), o.option(optKey{kind: 's', a: ev.Op, b: store}))
	}
	if kind != "" {
		o.errors.Add(ctx, 1, o.option(optKey{kind: 'e', a: ev.Op, b: store, c: kind}))
	}
}

// ObserveCircuit sets the circuit gauge, and counts an opening.
func (o *Observer) ObserveCircuit(ev ratelimit.CircuitEvent) {
	if ev.Open {
		o.open.Store(1)
		o.openings.Add(context.Background(), 1, o.option(optKey{kind: 'c'}))
		return
	}
	o.open.Store(0)
}

// option returns the measurement option of k's attribute set, built once.
func (o *Observer) option(k optKey) metric.MeasurementOption {
	if v, ok := o.opts.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	kv := append([]attribute.KeyValue(nil), o.attrs...)
	switch k.kind {
	case 'd':
		if !o.noPolicy {
			kv = append(kv, attribute.String("policy", k.a))
		}
		kv = append(kv, attribute.String("outcome", k.b), attribute.Bool("fallback", k.c == "true"))
	case 's':
		kv = append(kv, attribute.String("op", k.a), attribute.String("store", k.b))
	case 'e':
		kv = append(kv, attribute.String("op", k.a), attribute.String("store", k.b), attribute.String("kind", k.c))
	case 'h':
		kv = append(kv, attribute.String("outcome", k.a))
	}
	v, _ := o.opts.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return v.(metric.MeasurementOption)
}

// policyValue returns the policy attribute of p: its name while the cap
// allows, OtherPolicy past it.
func (o *Observer) policyValue(p *ratelimit.Policy) string {
	if p == nil {
		return UnknownPolicy
	}
	name := p.Name()
	if _, ok := o.policies.Load(name); ok {
		return name
	}
	if o.full.Load() {
		return OtherPolicy
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.policies.Load(name); ok {
		return name
	}
	if o.n >= o.maxPolicies {
		return OtherPolicy
	}
	o.policies.Store(name, struct{}{})
	o.n++
	if o.n >= o.maxPolicies {
		o.full.Store(true)
	}
	return name
}
