package ratelimitprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratelimitkit/ratelimit"
	ratelimitprom "github.com/ratelimitkit/ratelimit/metrics/prometheus"
	"github.com/ratelimitkit/ratelimit/store"
)

// flakyStore fails while down is set, else answers from a memory store;
// it counts the calls that reached it.
type flakyStore struct {
	down  atomic.Bool
	calls atomic.Int64
	mem   *store.Memory
}

func newFlaky(down bool) *flakyStore {
	s := &flakyStore{mem: store.NewMemory()}
	s.down.Store(down)
	return s
}

func (s *flakyStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return ratelimit.Decision{}, errors.New("connection refused")
	}
	return s.mem.Take(ctx, req)
}

// stallStore never answers: each call ends at its context's deadline.
type stallStore struct{}

func (stallStore) Take(ctx context.Context, _ ratelimit.Request) (ratelimit.Decision, error) {
	<-ctx.Done()
	return ratelimit.Decision{}, ctx.Err()
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// setup returns a Collector registered on a fresh pedantic registry (it
// checks every Collect against Describe).
func setup(t *testing.T, opts ...ratelimitprom.Option) (*ratelimitprom.Collector, *prometheus.Registry) {
	t.Helper()
	col, err := ratelimitprom.New(opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(col); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return col, reg
}

func newLimiter(t *testing.T, st ratelimit.Store, p *ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(st, p, append([]ratelimit.Option{ratelimit.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("ratelimit.New: %v", err)
	}
	return lim
}

// serve sends n GETs from ip through h and returns their statuses.
func serve(h http.Handler, ip string, n int, header ...string) []int {
	var codes []int
	for range n {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = ip + ":40000"
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	return codes
}

func wantCodes(t *testing.T, got []int, want ...int) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
}

// zeroSeries are the series a Collector makes at 0 when it is built
// (with the default namespace): compare expects them unless want gives
// them a value.
func zeroSeries() map[string][]string {
	z := map[string][]string{}
	for _, store := range []string{"fallback", "main"} {
		for _, kind := range []string{"circuit_open", "error", "timeout"} {
			z["ratelimit_store_errors_total"] = append(z["ratelimit_store_errors_total"],
				fmt.Sprintf(`ratelimit_store_errors_total{kind=%q,op="take",store=%q}`, kind, store))
		}
	}
	for _, o := range []string{"gave_up", "queue_full", "refused", "served"} {
		z["ratelimit_held_requests_total"] = append(z["ratelimit_held_requests_total"], fmt.Sprintf(`ratelimit_held_requests_total{outcome=%q}`, o))
	}
	return z
}

// compare checks the named metric families of reg against want, sample
// lines of the exposition format (HELP and TYPE lines are taken from the
// live families; the series made at 0 are implied: zeroSeries). A family
// named but absent fails, as does a line of a family not named.
func compare(t *testing.T, reg *prometheus.Registry, want string, names ...string) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	lines := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, _, _ := strings.Cut(strings.Fields(line)[0], "{")
		if !slices.Contains(names, name) {
			t.Fatalf("compare: line %q is of no family named (%v)", line, names)
		}
		lines[name] = append(lines[name], line)
	}
	for name, series := range zeroSeries() {
		if !slices.Contains(names, name) {
			continue
		}
		for _, z := range series {
			if !slices.ContainsFunc(lines[name], func(l string) bool { return strings.Fields(l)[0] == z }) {
				lines[name] = append(lines[name], z+" 0")
			}
		}
	}
	var b strings.Builder
	for _, n := range names {
		i := slices.IndexFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == n })
		if i < 0 {
			t.Fatalf("no metric family %s; want:\n%s", n, strings.Join(lines[n], "\n"))
		}
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", n, mfs[i].GetHelp(), n, strings.ToLower(mfs[i].GetType().String()))
		for _, l := range lines[n] {
			b.WriteString(l + "\n")
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(b.String()), names...); err != nil {
		t.Fatal(err)
	}
}

// metric returns the metric of family name whose labels include want, or
// nil.
func metric(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// histCount returns the sample count of the store latency histogram for op
// and store (0 if it has no series).
func histCount(t *testing.T, reg *prometheus.Registry, op, st string) uint64 {
	t.Helper()
	m := metric(t, reg, "ratelimit_store_call_duration_seconds", map[string]string{"op": op, "store": st})
	if m == nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	m := metric(t, reg, name, nil)
	if m == nil {
		t.Fatalf("no %s", name)
	}
	if m.GetGauge() != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// TestDecisions drives a Limiter through Handler, AllowN and dry run and
// checks the decisions counter by policy and outcome.
func TestDecisions(t *testing.T) {
	col, reg := setup(t)
	api := ratelimit.MustParsePolicy("3/h", ratelimit.Named("api"))
	lim := newLimiter(t, store.NewMemory(), api, ratelimit.WithObserver(col))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 5), 200, 200, 200, 429, 429)

	ctx := context.Background()
	for i, want := range []bool{true, false, true} { // cost 2, 2, 1 of 3
		cost := []int64{2, 2, 1}[i]
		d, err := lim.AllowN(ctx, cost, "job:1")
		if err != nil || d.Allowed != want {
			t.Fatalf("AllowN #%d (cost %d): allowed %v, err %v; want %v, nil", i, cost, d.Allowed, err, want)
		}
	}

	dry := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/h", ratelimit.Named("rollout")),
		ratelimit.WithObserver(col), ratelimit.WithDryRun(true))
	wantCodes(t, serve(dry.Handler(ok), "203.0.113.7", 3), 200, 200, 200)

	compare(t, reg, `
		ratelimit_decisions_total{fallback="false",outcome="allowed",policy="api"} 5
		ratelimit_decisions_total{fallback="false",outcome="denied",policy="api"} 3
		ratelimit_decisions_total{fallback="false",outcome="allowed",policy="rollout"} 1
		ratelimit_decisions_total{fallback="false",outcome="dry_run_denied",policy="rollout"} 2
	`, "ratelimit_decisions_total")
	// Every decision above cost one main-store take, none failed.
	if got := histCount(t, reg, "take", "main"); got != 5+3+3 {
		t.Errorf("take latency samples %d, want 11", got)
	}
	compare(t, reg, ``, "ratelimit_store_errors_total") // only the series made at 0, at 0
	if v := gauge(t, reg, "ratelimit_circuit_open"); v != 0 {
		t.Errorf("circuit_open %v, want 0", v)
	}
}

// TestFailureModes: a failing store, no circuit, no fallback: the failure
// mode decides, and each failure is one store error and one latency
// sample.
func TestFailureModes(t *testing.T) {
	for _, tc := range []struct {
		mode    ratelimit.FailureMode
		code    int
		outcome string
	}{
		{ratelimit.FailOpen, http.StatusOK, "failed_open"},
		{ratelimit.FailClosed, http.StatusServiceUnavailable, "failed_closed"},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			col, reg := setup(t)
			st := newFlaky(true)
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("10/h", ratelimit.Named("api")), ratelimit.WithObserver(col),
				ratelimit.WithFailureMode(tc.mode), ratelimit.WithCircuitBreaker(0, 0))
			wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 3), tc.code, tc.code, tc.code)
			if _, err := lim.AllowN(context.Background(), 1, "job:1"); err == nil {
				t.Fatal("AllowN on a failing store: nil error")
			}
			compare(t, reg, fmt.Sprintf(`
				ratelimit_decisions_total{fallback="false",outcome=%q,policy="api"} 4
				ratelimit_store_errors_total{kind="error",op="take",store="main"} 4
				ratelimit_circuit_openings_total 0
			`, tc.outcome), "ratelimit_decisions_total", "ratelimit_store_errors_total", "ratelimit_circuit_openings_total")
			if got := histCount(t, reg, "take", "main"); got != 4 {
				t.Errorf("take latency samples %d, want 4", got)
			}
			if st.calls.Load() != 4 {
				t.Errorf("store calls %d, want 4", st.calls.Load())
			}
		})
	}
}

// TestFallback: the main store fails, the fallback decides with its own
// counters; decisions carry fallback="true".
func TestFallback(t *testing.T) {
	col, reg := setup(t)
	lim := newLimiter(t, newFlaky(true), ratelimit.MustParsePolicy("2/h", ratelimit.Named("api")), ratelimit.WithObserver(col),
		ratelimit.WithFallback(store.NewMemory()), ratelimit.WithCircuitBreaker(0, 0))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 3), 200, 200, 429)
	compare(t, reg, `
		ratelimit_decisions_total{fallback="true",outcome="allowed",policy="api"} 2
		ratelimit_decisions_total{fallback="true",outcome="denied",policy="api"} 1
		ratelimit_store_errors_total{kind="error",op="take",store="main"} 3
	`, "ratelimit_decisions_total", "ratelimit_store_errors_total")
	for _, st := range []string{"main", "fallback"} {
		if got := histCount(t, reg, "take", st); got != 3 {
			t.Errorf("take latency samples of the %s store: %d, want 3", st, got)
		}
	}
}

// TestCircuitOpens: with WithCircuitBreaker(1, time.Hour) the first
// failure opens the circuit; the store is then skipped, and those
// skipped calls count as circuit_open errors, not latency samples.
func TestCircuitOpens(t *testing.T) {
	col, reg := setup(t)
	st := newFlaky(true)
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("10/h", ratelimit.Named("api")), ratelimit.WithObserver(col),
		ratelimit.WithFallback(store.NewMemory()), ratelimit.WithCircuitBreaker(1, time.Hour))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 4), 200, 200, 200, 200)
	if st.calls.Load() != 1 {
		t.Fatalf("store calls %d, want 1: the first failure opens the circuit", st.calls.Load())
	}
	compare(t, reg, `
		ratelimit_circuit_open 1
		ratelimit_circuit_openings_total 1
		ratelimit_decisions_total{fallback="true",outcome="allowed",policy="api"} 4
		ratelimit_store_errors_total{kind="error",op="take",store="main"} 1
		ratelimit_store_errors_total{kind="circuit_open",op="take",store="main"} 3
	`, "ratelimit_circuit_open", "ratelimit_circuit_openings_total", "ratelimit_decisions_total", "ratelimit_store_errors_total")
	if got := histCount(t, reg, "take", "main"); got != 1 {
		t.Errorf("main take latency samples %d, want 1 (skipped calls are not observed)", got)
	}
	if got := histCount(t, reg, "take", "fallback"); got != 4 {
		t.Errorf("fallback take latency samples %d, want 4", got)
	}
}

// TestCircuitCloses: with a 1ns cooldown the next request after an opening
// probes the store; when it answers, the gauge drops to 0, and a new run
// of failures opens the circuit again.
func TestCircuitCloses(t *testing.T) {
	col, reg := setup(t)
	st := newFlaky(true)
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("10/h", ratelimit.Named("api")), ratelimit.WithObserver(col),
		ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithCircuitBreaker(1, time.Nanosecond))
	h := lim.Handler(ok)

	wantCodes(t, serve(h, "203.0.113.7", 1), 503)
	if v := gauge(t, reg, "ratelimit_circuit_open"); v != 1 {
		t.Fatalf("after the first failure: circuit_open %v, want 1", v)
	}
	st.down.Store(false)
	wantCodes(t, serve(h, "203.0.113.7", 1), 200) // the probe
	if v := gauge(t, reg, "ratelimit_circuit_open"); v != 0 {
		t.Fatalf("after a good probe: circuit_open %v, want 0", v)
	}
	st.down.Store(true)
	// The store has answered once, so the circuit opens only when the run
	// of failures spans the cooldown: on the second failure.
	wantCodes(t, serve(h, "203.0.113.7", 2), 503, 503)
	compare(t, reg, `
		ratelimit_circuit_open 1
		ratelimit_circuit_openings_total 2
		ratelimit_decisions_total{fallback="false",outcome="allowed",policy="api"} 1
		ratelimit_decisions_total{fallback="false",outcome="failed_closed",policy="api"} 3
		ratelimit_store_errors_total{kind="error",op="take",store="main"} 3
	`, "ratelimit_circuit_open", "ratelimit_circuit_openings_total", "ratelimit_decisions_total", "ratelimit_store_errors_total")
}

// TestOps: reserve (Wait), refund and reset calls carry their op label;
// a stalled store gives timeouts.
func TestOps(t *testing.T) {
	col, reg := setup(t)
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("5/h", ratelimit.Named("api")), ratelimit.WithObserver(col))
	ctx := context.Background()
	d, err := lim.Wait(ctx, "job:1")
	if err != nil || !d.Allowed {
		t.Fatalf("Wait: %+v, %v", d, err)
	}
	if err := lim.Refund(ctx, d); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if err := lim.Reset(ctx, "job:1"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	for _, op := range []string{"reserve", "refund", "reset"} {
		if got := histCount(t, reg, op, "main"); got != 1 {
			t.Errorf("%s latency samples %d, want 1", op, got)
		}
	}
	if got := histCount(t, reg, "take", "main"); got != 0 {
		t.Errorf("take latency samples %d, want 0", got)
	}

	stalled := newLimiter(t, stallStore{}, ratelimit.MustParsePolicy("5/h", ratelimit.Named("slow")), ratelimit.WithObserver(col),
		ratelimit.WithTimeout(5*time.Millisecond), ratelimit.WithCircuitBreaker(0, 0), ratelimit.WithFailureMode(ratelimit.FailOpen))
	wantCodes(t, serve(stalled.Handler(ok), "203.0.113.7", 2), 200, 200)
	compare(t, reg, `
		ratelimit_store_errors_total{kind="timeout",op="take",store="main"} 2
	`, "ratelimit_store_errors_total")
	m := metric(t, reg, "ratelimit_store_call_duration_seconds", map[string]string{"op": "take"})
	if m == nil || m.GetHistogram().GetSampleCount() != 2 || m.GetHistogram().GetSampleSum() < 2*0.005 {
		t.Errorf("stalled take latency: %v, want 2 samples summing to at least the two 5ms timeouts", m.GetHistogram())
	}
}

// TestNamespaceAndConstLabels: two Collectors told apart by a const label
// share one registry under a namespace of one's own.
func TestNamespaceAndConstLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var cols []*ratelimitprom.Collector
	for _, name := range []string{"api", "jobs"} {
		col, err := ratelimitprom.New(ratelimitprom.WithNamespace("myapp"), ratelimitprom.WithConstLabels(prometheus.Labels{"limiter": name}))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(col); err != nil {
			t.Fatalf("register the %s collector: %v", name, err)
		}
		cols = append(cols, col)
	}
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/h"), ratelimit.WithObserver(cols[0]))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 2), 200, 429)
	cols[1].ObserveCircuit(ratelimit.CircuitEvent{Open: true, Cooldown: time.Second})
	compare(t, reg, `
		myapp_decisions_total{fallback="false",limiter="api",outcome="allowed",policy="default"} 1
		myapp_decisions_total{fallback="false",limiter="api",outcome="denied",policy="default"} 1
		myapp_circuit_open{limiter="api"} 0
		myapp_circuit_open{limiter="jobs"} 1
	`, "myapp_decisions_total", "myapp_circuit_open")
}

// TestNewErrors: bad options are refused with a message that names them.
func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  ratelimitprom.Option
		want string
	}{
		{"nil option", nil, "nil option"},
		{"bad namespace", ratelimitprom.WithNamespace("my-app"), "my-app"},
		{"clashing const label", ratelimitprom.WithConstLabels(prometheus.Labels{"policy": "x"}), `"policy" is one of the Collector's own`},
		{"reserved const label", ratelimitprom.WithConstLabels(prometheus.Labels{"__name": "x"}), "__name"},
		{"bad const label value", ratelimitprom.WithConstLabels(prometheus.Labels{"a": "\xff"}), "not valid UTF-8"},
		{"bad const label name", ratelimitprom.WithConstLabels(prometheus.Labels{"a-b": "x"}), "a-b"},
		{"no buckets", ratelimitprom.WithBuckets(), "no bucket bounds"},
		{"unsorted buckets", ratelimitprom.WithBuckets(0.1, 0.1), "must increase"},
		{"NaN bucket", ratelimitprom.WithBuckets(math.NaN()), "finite"},
		{"cap 0", ratelimitprom.WithMaxPolicies(0), "WithMaxPolicies(0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			col, err := ratelimitprom.New(tc.opt)
			if err == nil || col != nil {
				t.Fatalf("New accepted it: %v, %v", col, err)
			}
			if !strings.HasPrefix(err.Error(), "ratelimitprom: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want the prefix ratelimitprom: and %q", err, tc.want)
			}
		})
	}
	if _, err := ratelimitprom.New(ratelimitprom.WithNamespace(""), ratelimitprom.WithBuckets(0.001, 0.01), ratelimitprom.WithMaxPolicies(1)); err != nil {
		t.Errorf("good options refused: %v", err)
	}
}

// TestBuckets: WithBuckets sets the histogram's bounds.
func TestBuckets(t *testing.T) {
	col, reg := setup(t, ratelimitprom.WithBuckets(0.5, 2))
	col.ObserveStore(ratelimit.StoreEvent{Op: "take", Duration: time.Second})
	m := metric(t, reg, "ratelimit_store_call_duration_seconds", nil)
	if m == nil {
		t.Fatal("no histogram")
	}
	var got []string
	for _, b := range m.GetHistogram().GetBucket() {
		got = append(got, fmt.Sprintf("%v:%d", b.GetUpperBound(), b.GetCumulativeCount()))
	}
	if want := "[0.5:0 2:1]"; fmt.Sprint(got) != want {
		t.Errorf("buckets %v, want %s", got, want)
	}
}
