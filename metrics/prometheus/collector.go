// Package ratelimitprom exports what a ratelimit.Limiter does as Prometheus
// metrics: its decisions, the latency and errors of its store calls, and
// the state of its store's circuit breaker.
//
// A [Collector] is both a prometheus.Collector and a ratelimit.Observer:
// build one with [New], register it on your registry, and give it to the
// Limiter with ratelimit.WithObserver:
//
//	col, err := ratelimitprom.New()
//	...
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	lim, err := ratelimit.New(st, policy, ratelimit.WithObserver(col))
//	...
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The package is named ratelimitprom so that it does not clash with
// client_golang's prometheus package; import it under that name.
//
// # Metrics
//
// With the default namespace "ratelimit":
//
//   - ratelimit_decisions_total{policy, outcome, fallback}: counter of
//     decided requests. outcome is "allowed", "denied", "dry_run_denied",
//     "failed_open", "failed_closed" or "abandoned" (the client left while
//     held) (ratelimit.Outcome); fallback is
//     "true" when the fallback store decided (WithFallback), else "false".
//   - ratelimit_store_call_duration_seconds{op, store}: histogram of store
//     call latency. op is ratelimit.StoreEvent.Op ("take", "reserve",
//     "take_up_to", "lease", "refund", "reset", ...); store is "main" or "fallback". Calls the open circuit
//     answered are not observed: they took no time and would hide the
//     store's real latency.
//   - ratelimit_store_errors_total{op, store, kind}: counter of failed
//     store calls; kind is ratelimit.StoreEvent.ErrorKind ("timeout",
//     "circuit_open", "invalid_request", "unsupported" or "error").
//   - ratelimit_circuit_open: gauge, 1 while the store's circuit is open
//     (the store is skipped), 0 while it is closed.
//   - ratelimit_circuit_openings_total: counter of circuit openings.
//   - ratelimit_held_requests_total{outcome}: counter of requests held for
//     their turn (WithMaxDelay): "served", "refused" (still denied at the
//     end of the hold), "gave_up" (the client left) or "queue_full"
//     (refused at once: MaxHeld requests were held).
//   - ratelimit_hold_wait_seconds: histogram of how long each held request
//     waited.
//
// The held-request series and ratelimit_store_errors_total{op="take"}
// of each store and of the kinds timeout, circuit_open and error exist
// from the start, at 0, so that a dashboard or an alert over them reads 0
// rather than no data until the first hold or outage.
//
// # Dashboard
//
// dashboard.json in this module's directory is a Grafana dashboard of
// these metrics (default namespace; a "job" variable): decisions by
// outcome, denials by policy, held requests and their waits, store
// latency and errors, outages (the circuit) and fallback decisions.
// TestDashboard checks that every metric it queries is one the Collector
// exports. Import it in Grafana (Dashboards, New, Import) and pick the
// Prometheus data source.
//
// # Cardinality
//
// No label carries a key, an address or an error text. The policy label
// takes the policy's name, which the program chooses: a handful of
// policies make a handful of series. A program whose WithPolicyFunc builds
// policies from request data (one per customer, say) would make a series
// per name; the Collector therefore labels at most [DefaultMaxPolicies]
// distinct names (see [WithMaxPolicies]) and counts the decisions of any
// further policy under policy="other" ([OtherPolicy]). [WithoutPolicyLabel]
// drops the label altogether.
//
// # Several Limiters
//
// One Collector may observe several Limiters: their decisions and store
// calls add up. The circuit gauge then shows the last change reported by
// any of them; to watch each Limiter's circuit, give each its own
// Collector with distinct WithConstLabels (say limiter="api" and
// limiter="jobs") and register them all.
package ratelimitprom

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitkit/ratelimit"
)

// DefaultNamespace prefixes every metric name unless WithNamespace says
// otherwise.
const DefaultNamespace = "ratelimit"

// DefaultMaxPolicies is how many distinct policy names a Collector labels
// unless WithMaxPolicies says otherwise.
const DefaultMaxPolicies = 100

// OtherPolicy is the policy label of the decisions of policies beyond the
// cap (WithMaxPolicies). A policy of your own named "other" shares it.
const OtherPolicy = "other"

// UnknownPolicy is the policy label of a decision without a policy (only a
// Result built by hand has none).
const UnknownPolicy = "unknown"

// DefaultBuckets are the upper bounds, in seconds, of the store latency
// histogram: from 100µs (a Redis on the same host) to 1s (well past the
// Limiter's default 100ms timeout).
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// Label values of the store label.
const (
	storeMain     = "main"
	storeFallback = "fallback"
)

// Option configures a Collector.
type Option func(*config)

type config struct {
	namespace   string
	constLabels prometheus.Labels
	buckets     []float64
	maxPolicies int
	noPolicy    bool
	errs        []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// WithNamespace sets the prefix of every metric name (DefaultNamespace,
// "ratelimit", by default). An empty namespace leaves the names bare
// ("decisions_total"). A namespace must be a classic Prometheus name
// (ASCII letters, digits, underscores and colons, not starting with a
// digit), which every Prometheus server can scrape; else New fails.
func WithNamespace(ns string) Option {
	return func(c *config) {
		if ns != "" && !metricName.MatchString(ns) {
			c.fail("WithNamespace(%q): want ASCII letters, digits, _ and :, not starting with a digit", ns)
			return
		}
		c.namespace = ns
	}
}

// WithConstLabels adds labels with fixed values to every metric, for
// example limiter="api" when several Limiters each have a Collector on one
// registry. Names are classic Prometheus label names (ASCII letters,
// digits and underscores, not starting with a digit or "__") other than
// those the Collector uses (policy, outcome, fallback, op, store, kind);
// values are valid UTF-8. Else New fails.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) {
		c.constLabels = make(prometheus.Labels, len(labels))
		for k, v := range labels {
			if !labelName.MatchString(k) || strings.HasPrefix(k, "__") {
				c.fail("WithConstLabels: label name %q: want ASCII letters, digits and _, not starting with a digit or __", k)
				continue
			}
			if slices.Contains(ownLabels, k) {
				c.fail("WithConstLabels: label name %q is one of the Collector's own (%s)", k, strings.Join(ownLabels, ", "))
				continue
			}
			if !utf8.ValidString(v) {
				c.fail("WithConstLabels: value of %q is not valid UTF-8", k)
				continue
			}
			c.constLabels[k] = v
		}
	}
}

// ownLabels are the names of the Collector's variable labels.
var ownLabels = []string{"policy", "outcome", "fallback", "op", "store", "kind"}

// Classic Prometheus metric and label names.
var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// WithBuckets sets the upper bounds, in seconds, of the store latency
// histogram (DefaultBuckets by default). They must be finite and strictly
// increasing, and there must be at least one; else New fails.
func WithBuckets(bounds ...float64) Option {
	return func(c *config) {
		if len(bounds) == 0 {
			c.fail("WithBuckets: no bucket bounds")
			return
		}
		for i, b := range bounds {
			if math.IsNaN(b) || math.IsInf(b, 0) {
				c.fail("WithBuckets: bound %d is %v, want a finite number of seconds", i, b)
				return
			}
			if i > 0 && b <= bounds[i-1] {
				c.fail("WithBuckets: bound %d (%v) is not above bound %d (%v); bounds must increase", i, b, i-1, bounds[i-1])
				return
			}
		}
		c.buckets = append([]float64(nil), bounds...)
	}
}

// WithMaxPolicies sets how many distinct policy names get a policy label
// of their own (DefaultMaxPolicies by default): the first n names seen
// keep theirs for the Collector's life, and the decisions of any other
// policy are counted under OtherPolicy. n must be at least 1; else New
// fails. To drop the label altogether, use WithoutPolicyLabel.
func WithMaxPolicies(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("WithMaxPolicies(%d): want at least 1 (WithoutPolicyLabel drops the label)", n)
			return
		}
		c.maxPolicies = n
	}
}

// WithoutPolicyLabel drops the policy label from the decisions counter:
// decisions are counted by outcome and fallback only.
func WithoutPolicyLabel() Option {
	return func(c *config) { c.noPolicy = true }
}

// Collector counts a Limiter's decisions, store calls and circuit changes,
// and exports them as Prometheus metrics (see the package doc for the
// names and labels). It implements prometheus.Collector and
// ratelimit.Observer, and is safe for concurrent use. Build it with New.
type Collector struct {
	noPolicy    bool
	maxPolicies int

	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	open      prometheus.Gauge
	openings  prometheus.Counter
	held      *prometheus.CounterVec
	wait      prometheus.Histogram

	// policies holds the names that have a label of their own; full is
	// set once it holds maxPolicies of them (then a name not in it is
	// OtherPolicy without taking mu).
	policies sync.Map // string → struct{}
	mu       sync.Mutex
	n        int
	full     atomic.Bool
}

var (
	_ prometheus.Collector = (*Collector)(nil)
	_ ratelimit.Observer   = (*Collector)(nil)
)

// New returns a Collector configured by opts, not yet registered: register
// it on your registry (reg.MustRegister(col)) and subscribe it to a
// Limiter (ratelimit.WithObserver(col)). It returns an error, prefixed
// "ratelimitprom: ", for a bad option: an invalid namespace or label name,
// a const label that clashes with the Collector's own, bad buckets, a cap
// below 1.
func New(opts ...Option) (*Collector, error) {
	cfg := config{namespace: DefaultNamespace, buckets: DefaultBuckets, maxPolicies: DefaultMaxPolicies}
	for _, o := range opts {
		if o == nil {
			cfg.fail("nil option")
			continue
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, fmt.Errorf("ratelimitprom: %w", errors.Join(cfg.errs...))
	}
	decisionLabels := []string{"policy", "outcome", "fallback"}
	if cfg.noPolicy {
		decisionLabels = decisionLabels[1:]
	}
	c := &Collector{
		noPolicy:    cfg.noPolicy,
		maxPolicies: cfg.maxPolicies,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "decisions_total",
			Help:        "Requests decided by the rate limiter, by policy, outcome (allowed, denied, dry_run_denied, failed_open, failed_closed, abandoned) and whether the fallback store decided.",
			ConstLabels: cfg.constLabels,
		}, decisionLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:   cfg.namespace,
			Name:        "store_call_duration_seconds",
			Help:        "Latency of the rate limiter's store calls, by operation and store (main or fallback); calls skipped by the open circuit are not observed.",
			ConstLabels: cfg.constLabels,
			Buckets:     cfg.buckets,
		}, []string{"op", "store"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "store_errors_total",
			Help:        "Failed store calls of the rate limiter, by operation, store (main or fallback) and kind (timeout, circuit_open, invalid_request, unsupported, error).",
			ConstLabels: cfg.constLabels,
		}, []string{"op", "store", "kind"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace:   cfg.namespace,
			Name:        "circuit_open",
			Help:        "1 while the rate limiter's store circuit is open (the store is skipped), 0 while it is closed.",
			ConstLabels: cfg.constLabels,
		}),
		openings: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "circuit_openings_total",
			Help:        "Times the rate limiter's store circuit opened.",
			ConstLabels: cfg.constLabels,
		}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace:   cfg.namespace,
			Name:        "held_requests_total",
			Help:        "Requests the rate limiter held for their turn (WithMaxDelay), by outcome: served, refused (still denied at the end), gave_up (the client left) or queue_full (refused at once: MaxHeld were held).",
			ConstLabels: cfg.constLabels,
		}, []string{"outcome"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace:   cfg.namespace,
			Name:        "hold_wait_seconds",
			Help:        "How long the rate limiter held each held request before it was served, refused or its client left.",
			ConstLabels: cfg.constLabels,
			Buckets:     holdBuckets,
		}),
	}
	// Every series a dashboard or an alert reads exists from the start, at
	// 0: a rate over it then says 0, not "no data", until the first hold
	// or the first outage.
	for _, o := range holdOutcomes {
		c.held.WithLabelValues(o)
	}
	for _, store := range []string{storeMain, storeFallback} {
		for _, kind := range []string{"timeout", "circuit_open", "error"} {
			c.errors.WithLabelValues("take", store, kind)
		}
	}
	// A throwaway registry checks every name and label, and reports a
	// const label that clashes with a variable one, before any metric is
	// used.
	if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
		return nil, fmt.Errorf("ratelimitprom: %w", err)
	}
	return c, nil
}

// Describe sends the descriptors of the Collector's metrics to ch.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.duration.Describe(ch)
	c.errors.Describe(ch)
	c.open.Describe(ch)
	c.openings.Describe(ch)
	c.held.Describe(ch)
	c.wait.Describe(ch)
}

// Collect sends the Collector's current metrics to ch.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.duration.Collect(ch)
	c.errors.Collect(ch)
	c.open.Collect(ch)
	c.openings.Collect(ch)
	c.held.Collect(ch)
	c.wait.Collect(ch)
}

// ObserveDecision counts one decision under its policy, outcome and
// fallback labels, and a held request under its hold's outcome, with its
// wait.
func (c *Collector) ObserveDecision(ev ratelimit.DecisionEvent) {
	if o := ev.Hold; o != "" {
		c.held.WithLabelValues(o).Inc()
		if ev.Held > 0 {
			c.wait.Observe(ev.Held.Seconds())
		}
	}
	fallback := "false"
	if ev.Fallback {
		fallback = "true"
	}
	if c.noPolicy {
		c.decisions.WithLabelValues(ev.Outcome.String(), fallback).Inc()
		return
	}
	c.decisions.WithLabelValues(c.policyLabel(ev.Result.Policy), ev.Outcome.String(), fallback).Inc()
}

// ObserveStore records one store call's latency (unless the open circuit
// answered) and, if it failed, counts its error kind.
func (c *Collector) ObserveStore(ev ratelimit.StoreEvent) {
	store := storeMain
	if ev.Fallback {
		store = storeFallback
	}
	kind := ev.ErrorKind
	if kind != "circuit_open" {
		c.duration.WithLabelValues(ev.Op, store).Observe(ev.Duration.Seconds())
	}
	if kind != "" {
		c.errors.WithLabelValues(ev.Op, store, kind).Inc()
	}
}

// ObserveCircuit sets the circuit gauge, and counts an opening.
func (c *Collector) ObserveCircuit(ev ratelimit.CircuitEvent) {
	if ev.Open {
		c.open.Set(1)
		c.openings.Inc()
		return
	}
	c.open.Set(0)
}

// policyLabel returns the policy label of p: its name while the cap allows,
// OtherPolicy past it.
func (c *Collector) policyLabel(p *ratelimit.Policy) string {
	if p == nil {
		return UnknownPolicy
	}
	name := p.Name()
	if _, ok := c.policies.Load(name); ok {
		return name
	}
	if c.full.Load() {
		return OtherPolicy
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.policies.Load(name); ok {
		return name
	}
	if c.n >= c.maxPolicies {
		return OtherPolicy
	}
	c.policies.Store(name, struct{}{})
	c.n++
	if c.n >= c.maxPolicies {
		c.full.Store(true)
	}
	return name
}

// holdBuckets are the buckets of hold_wait_seconds: a Limiter holds a
// request below a second by default (WithMaxDelay).
var holdBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// holdOutcomes are the values of held_requests_total's outcome label.
var holdOutcomes = []string{"served", "refused", "gave_up", "queue_full"}
