package ratelimitotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimitkit/ratelimit"
	ratelimitotel "github.com/ratelimitkit/ratelimit/metrics/otel"
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

// setup returns an Observer on a fresh MeterProvider read by a
// ManualReader.
func setup(t *testing.T, opts ...ratelimitotel.Option) (*ratelimitotel.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	obs, err := ratelimitotel.New(provider.Meter("ratelimit-test"), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := obs.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return obs, reader
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

// snapshot is one collection: per instrument name, per attribute set
// (encoded "k=v,k=v", keys sorted), the value of a sum or gauge, or the
// count of a histogram.
type snapshot map[string]map[string]float64

func collect(t *testing.T, r *sdkmetric.ManualReader) snapshot {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	s := snapshot{}
	enc := attribute.DefaultEncoder()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			series := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: want a cumulative monotonic sum", m.Name)
				}
				for _, p := range d.DataPoints {
					series[p.Attributes.Encoded(enc)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					series[p.Attributes.Encoded(enc)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					series[p.Attributes.Encoded(enc)] = float64(p.Count)
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			s[m.Name] = series
		}
	}
	return s
}

// want checks that instrument name has exactly the series in want, those
// at 0 that want does not name aside (New records some at 0).
func (s snapshot) want(t *testing.T, name string, want map[string]float64) {
	t.Helper()
	got := maps.Clone(s[name])
	for k, v := range got {
		if _, named := want[k]; v == 0 && !named {
			delete(got, k) // a series made at 0 (New records them) that want does not name
		}
	}
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s:\n got  %s\n want %s", name, show(got), show(want))
	}
}

func show(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("{%s} %v", k, m[k]))
	}
	return strings.Join(parts, "; ")
}

// TestDecisions drives a Limiter through Handler, AllowN and dry run and
// checks the decisions counter by policy and outcome.
func TestDecisions(t *testing.T) {
	obs, reader := setup(t)
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("3/h", ratelimit.Named("api")), ratelimit.WithObserver(obs))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 5), 200, 200, 200, 429, 429)
	for i, cost := range []int64{2, 2, 1} {
		want := i != 1
		d, err := lim.AllowN(context.Background(), cost, "job:1")
		if err != nil || d.Allowed != want {
			t.Fatalf("AllowN #%d (cost %d): allowed %v, err %v; want %v, nil", i, cost, d.Allowed, err, want)
		}
	}
	dry := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/h", ratelimit.Named("rollout")),
		ratelimit.WithObserver(obs), ratelimit.WithDryRun(true))
	wantCodes(t, serve(dry.Handler(ok), "203.0.113.7", 3), 200, 200, 200)

	s := collect(t, reader)
	s.want(t, "ratelimit.decisions", map[string]float64{
		"fallback=false,outcome=allowed,policy=api":            5,
		"fallback=false,outcome=denied,policy=api":             3,
		"fallback=false,outcome=allowed,policy=rollout":        1,
		"fallback=false,outcome=dry_run_denied,policy=rollout": 2,
	})
	s.want(t, "ratelimit.store.duration", map[string]float64{"op=take,store=main": 11})
	s.want(t, "ratelimit.store.errors", nil)
	s.want(t, "ratelimit.circuit.open", map[string]float64{"": 0})
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
			obs, reader := setup(t)
			st := newFlaky(true)
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("10/h", ratelimit.Named("api")), ratelimit.WithObserver(obs),
				ratelimit.WithFailureMode(tc.mode), ratelimit.WithCircuitBreaker(0, 0))
			wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 3), tc.code, tc.code, tc.code)
			if _, err := lim.AllowN(context.Background(), 1, "job:1"); err == nil {
				t.Fatal("AllowN on a failing store: nil error")
			}
			s := collect(t, reader)
			s.want(t, "ratelimit.decisions", map[string]float64{"fallback=false,outcome=" + tc.outcome + ",policy=api": 4})
			s.want(t, "ratelimit.store.errors", map[string]float64{"kind=error,op=take,store=main": 4})
			s.want(t, "ratelimit.store.duration", map[string]float64{"op=take,store=main": 4})
			s.want(t, "ratelimit.circuit.openings", nil)
			if st.calls.Load() != 4 {
				t.Errorf("store calls %d, want 4", st.calls.Load())
			}
		})
	}
}

// TestFallback: the main store fails, the fallback decides with its own
// counters; decisions carry fallback=true.
func TestFallback(t *testing.T) {
	obs, reader := setup(t)
	lim := newLimiter(t, newFlaky(true), ratelimit.MustParsePolicy("2/h", ratelimit.Named("api")), ratelimit.WithObserver(obs),
		ratelimit.WithFallback(store.NewMemory()), ratelimit.WithCircuitBreaker(0, 0))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 3), 200, 200, 429)
	s := collect(t, reader)
	s.want(t, "ratelimit.decisions", map[string]float64{
		"fallback=true,outcome=allowed,policy=api": 2,
		"fallback=true,outcome=denied,policy=api":  1,
	})
	s.want(t, "ratelimit.store.errors", map[string]float64{"kind=error,op=take,store=main": 3})
	s.want(t, "ratelimit.store.duration", map[string]float64{"op=take,store=main": 3, "op=take,store=fallback": 3})
}

// TestCircuitOpens: with WithCircuitBreaker(1, time.Hour) the first
// failure opens the circuit; the store is then skipped, and those
// skipped calls count as circuit_open errors, not latency samples.
func TestCircuitOpens(t *testing.T) {
	obs, reader := setup(t)
	st := newFlaky(true)
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("10/h", ratelimit.Named("api")), ratelimit.WithObserver(obs),
		ratelimit.WithFallback(store.NewMemory()), ratelimit.WithCircuitBreaker(1, time.Hour))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 4), 200, 200, 200, 200)
	if st.calls.Load() != 1 {
		t.Fatalf("store calls %d, want 1: the first failure opens the circuit", st.calls.Load())
	}
	s := collect(t, reader)
	s.want(t, "ratelimit.circuit.open", map[string]float64{"": 1})
	s.want(t, "ratelimit.circuit.openings", map[string]float64{"": 1})
	s.want(t, "ratelimit.decisions", map[string]float64{"fallback=true,outcome=allowed,policy=api": 4})
	s.want(t, "ratelimit.store.errors", map[string]float64{
		"kind=error,op=take,store=main":        1,
		"kind=circuit_open,op=take,store=main": 3,
	})
	s.want(t, "ratelimit.store.duration", map[string]float64{"op=take,store=main": 1, "op=take,store=fallback": 4})
}

// TestCircuitCloses: with a 1ns cooldown the next request after an opening
// probes the store; when it answers, the gauge drops to 0, and a new run
// of failures opens the circuit again.
func TestCircuitCloses(t *testing.T) {
	obs, reader := setup(t)
	st := newFlaky(true)
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("10/h", ratelimit.Named("api")), ratelimit.WithObserver(obs),
		ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithCircuitBreaker(1, time.Nanosecond))
	h := lim.Handler(ok)

	wantCodes(t, serve(h, "203.0.113.7", 1), 503)
	collect(t, reader).want(t, "ratelimit.circuit.open", map[string]float64{"": 1})
	st.down.Store(false)
	wantCodes(t, serve(h, "203.0.113.7", 1), 200) // the probe
	collect(t, reader).want(t, "ratelimit.circuit.open", map[string]float64{"": 0})
	st.down.Store(true)
	// The store has answered once, so the circuit opens only when the run
	// of failures spans the cooldown: on the second failure.
	wantCodes(t, serve(h, "203.0.113.7", 2), 503, 503)
	s := collect(t, reader)
	s.want(t, "ratelimit.circuit.open", map[string]float64{"": 1})
	s.want(t, "ratelimit.circuit.openings", map[string]float64{"": 2})
	s.want(t, "ratelimit.decisions", map[string]float64{
		"fallback=false,outcome=allowed,policy=api":       1,
		"fallback=false,outcome=failed_closed,policy=api": 3,
	})
	s.want(t, "ratelimit.store.errors", map[string]float64{"kind=error,op=take,store=main": 3})
}

// TestOps: reserve (Wait), refund and reset calls carry their op
// attribute; a stalled store gives timeouts.
func TestOps(t *testing.T) {
	obs, reader := setup(t)
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("5/h", ratelimit.Named("api")), ratelimit.WithObserver(obs))
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
	stalled := newLimiter(t, stallStore{}, ratelimit.MustParsePolicy("5/h", ratelimit.Named("slow")), ratelimit.WithObserver(obs),
		ratelimit.WithTimeout(5*time.Millisecond), ratelimit.WithCircuitBreaker(0, 0), ratelimit.WithFailureMode(ratelimit.FailOpen))
	wantCodes(t, serve(stalled.Handler(ok), "203.0.113.7", 2), 200, 200)

	s := collect(t, reader)
	s.want(t, "ratelimit.store.duration", map[string]float64{
		"op=reserve,store=main": 1,
		"op=refund,store=main":  1,
		"op=reset,store=main":   1,
		"op=take,store=main":    2,
	})
	s.want(t, "ratelimit.store.errors", map[string]float64{"kind=timeout,op=take,store=main": 2})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "ratelimit.store.duration" {
			continue
		}
		if m.Unit != "s" {
			t.Errorf("store.duration unit %q, want s", m.Unit)
		}
		for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
			if op, _ := p.Attributes.Value("op"); op.AsString() == "take" && p.Sum < 2*0.005 {
				t.Errorf("stalled take latency sum %vs, want at least the two 5ms timeouts", p.Sum)
			}
		}
	}
}

// TestPrefixAndAttributes: two Observers told apart by an attribute share
// one Meter under a prefix of one's own; Close stops the gauge's reports.
func TestPrefixAndAttributes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	meter := provider.Meter("ratelimit-test")
	var obs []*ratelimitotel.Observer
	for _, name := range []string{"api", "jobs"} {
		o, err := ratelimitotel.New(meter, ratelimitotel.WithPrefix("myapp.limiter"), ratelimitotel.WithAttributes(attribute.String("limiter", name)))
		if err != nil {
			t.Fatal(err)
		}
		obs = append(obs, o)
	}
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/h"), ratelimit.WithObserver(obs[0]))
	wantCodes(t, serve(lim.Handler(ok), "203.0.113.7", 2), 200, 429)
	obs[1].ObserveCircuit(ratelimit.CircuitEvent{Open: true, Cooldown: time.Second})
	s := collect(t, reader)
	s.want(t, "myapp.limiter.decisions", map[string]float64{
		"fallback=false,limiter=api,outcome=allowed,policy=default": 1,
		"fallback=false,limiter=api,outcome=denied,policy=default":  1,
	})
	s.want(t, "myapp.limiter.circuit.open", map[string]float64{"limiter=api": 0, "limiter=jobs": 1})
	s.want(t, "myapp.limiter.circuit.openings", map[string]float64{"limiter=jobs": 1})

	for _, o := range obs[1:] {
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
		if err := o.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	collect(t, reader).want(t, "myapp.limiter.circuit.open", map[string]float64{"limiter=api": 0})
}

// TestBuckets: WithBuckets sets the histogram's boundaries.
func TestBuckets(t *testing.T) {
	obs, reader := setup(t, ratelimitotel.WithBuckets(0.5, 2))
	obs.ObserveStore(ratelimit.StoreEvent{Op: "take", Duration: time.Second})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var got string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
			p := h.DataPoints[0]
			got = fmt.Sprint(p.Bounds, p.BucketCounts)
		}
	}
	if want := "[0.5 2] [0 1 0]"; got != want {
		t.Errorf("bounds and counts %q, want %q", got, want)
	}
}

// TestNewErrors: bad options and a nil meter are refused with a message
// that names them.
func TestNewErrors(t *testing.T) {
	meter := noop.NewMeterProvider().Meter("x")
	for _, tc := range []struct {
		name string
		opt  ratelimitotel.Option
		want string
	}{
		{"nil option", nil, "nil option"},
		{"empty prefix", ratelimitotel.WithPrefix(""), `WithPrefix("")`},
		{"bad prefix", ratelimitotel.WithPrefix("9lives"), "9lives"},
		{"clashing attribute", ratelimitotel.WithAttributes(attribute.String("outcome", "x")), `"outcome" is one of the Observer's own`},
		{"empty key", ratelimitotel.WithAttributes(attribute.String("", "x")), "invalid"},
		{"no buckets", ratelimitotel.WithBuckets(), "no bucket boundaries"},
		{"unsorted buckets", ratelimitotel.WithBuckets(1, 0.5), "must increase"},
		{"infinite bucket", ratelimitotel.WithBuckets(math.Inf(1)), "finite"},
		{"cap 0", ratelimitotel.WithMaxPolicies(0), "WithMaxPolicies(0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ratelimitotel.New(meter, tc.opt)
			if err == nil || o != nil {
				t.Fatalf("New accepted it: %v, %v", o, err)
			}
			if !strings.HasPrefix(err.Error(), "ratelimitotel: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want the prefix ratelimitotel: and %q", err, tc.want)
			}
		})
	}
	if _, err := ratelimitotel.New(nil); err == nil || !strings.Contains(err.Error(), "nil meter") {
		t.Errorf("nil meter: %v, want an error naming it", err)
	}
	if _, err := ratelimitotel.New(meter, ratelimitotel.WithPrefix("a/b-c_d.e"), ratelimitotel.WithBuckets(0.001), ratelimitotel.WithMaxPolicies(1)); err != nil {
		t.Errorf("good options refused: %v", err)
	}
}
