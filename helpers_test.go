package ratelimit_test

// This file holds the helpers shared by the tests of package
// ratelimit_test: clocks, stores that fail, block, record or panic,
// response checks, and the recorders of hooks and logs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

// clockStart is the start of every controlled clock: a whole hour, so that every
// window of the test policies starts with it.
var clockStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// testClock is a controlled clock for store.WithClock and SetLogClock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestClock() *testClock { return &testClock{now: clockStart} }

// failStore fails every call with err.
type failStore struct {
	err   error
	calls atomic.Int64
}

func (s *failStore) Take(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	return ratelimit.Decision{}, s.err
}

// blockStore blocks every call until its context is done, and records
// whether that context had a deadline and why it ended.
type blockStore struct {
	mu        sync.Mutex
	calls     int
	deadlines int
	errs      []error
}

func (s *blockStore) Take(ctx context.Context, _ ratelimit.Request) (ratelimit.Decision, error) {
	_, hasDeadline := ctx.Deadline()
	<-ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if hasDeadline {
		s.deadlines++
	}
	s.errs = append(s.errs, ctx.Err())
	return ratelimit.Decision{}, ctx.Err()
}

func (s *blockStore) seen() (calls, deadlines int, errs []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.deadlines, slices.Clone(s.errs)
}

// recStore records every Request and answers with answer (default: allowed,
// with the policy's whole rate remaining).
type recStore struct {
	mu     sync.Mutex
	reqs   []ratelimit.Request
	answer func(ratelimit.Request) ratelimit.Decision
}

func (s *recStore) Take(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Keys = slices.Clone(req.Keys)
	s.reqs = append(s.reqs, req)
	if s.answer != nil {
		return s.answer(req), nil
	}
	return allowAll(req), nil
}

func (s *recStore) requests() []ratelimit.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// allowAll is a Decision that admits req with every limit untouched.
func allowAll(req ratelimit.Request) ratelimit.Decision {
	d := ratelimit.Decision{Allowed: true}
	for _, l := range req.Policy.Limits() {
		d.Limits = append(d.Limits, ratelimit.LimitStatus{Allowed: true, Remaining: l.Rate, ResetAfter: l.Period})
	}
	d.Remaining, d.ResetAfter = d.Limits[0].Remaining, d.Limits[0].ResetAfter
	return d
}

type storeFunc func(context.Context, ratelimit.Request) (ratelimit.Decision, error)

func (f storeFunc) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return f(ctx, req)
}

// panicStore panics in Take while panics is set, else fails or answers.
type panicStore struct {
	mem    *store.Memory
	panics atomic.Bool
	down   atomic.Bool
	calls  atomic.Int64
}

func (s *panicStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	if s.panics.Load() {
		panic("store exploded")
	}
	if s.down.Load() {
		return ratelimit.Decision{}, errBoom
	}
	return s.mem.Take(ctx, req)
}

var errBoom = errors.New("boom: redis at 10.0.0.5:6379 refused")

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// at returns the records of level lvl.
func (h *logRecorder) at(lvl slog.Level) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range h.recs {
		if r.Level == lvl {
			out = append(out, r)
		}
	}
	return out
}

func attrOf(r slog.Record, key string) (v slog.Value, ok bool) {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, ok = a.Value, true
			return false
		}
		return true
	})
	return v, ok
}

// discardLogger is a logger for tests that do not look at the log.
var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// hookRecorder records what the error and decision hooks see.
type hookRecorder struct {
	mu      sync.Mutex
	errs    []error
	errReqs []*http.Request
	results []ratelimit.Result
}

func (h *hookRecorder) onError(r *http.Request, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
	h.errReqs = append(h.errReqs, r)
}

func (h *hookRecorder) onDecision(_ *http.Request, res ratelimit.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.results = append(h.results, res)
}

func (h *hookRecorder) errors() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.errs)
}

func (h *hookRecorder) last() ratelimit.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.results) == 0 {
		return ratelimit.Result{}
	}
	return h.results[len(h.results)-1]
}

func (h *hookRecorder) options() []ratelimit.Option {
	return []ratelimit.Option{ratelimit.WithErrorHook(h.onError), ratelimit.WithDecisionHook(h.onDecision)}
}

// okHandler is the limited handler: it answers "ok".
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// req returns a GET / from remote ("203.0.113.7:4711" style), with header
// name/value pairs.
func getFrom(remote string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

// A step is one request of a scenario, after moving the clock by advance.
type step struct {
	name    string
	advance time.Duration
	req     *http.Request
	want    []check
}

// runSteps serves the steps in order on h, moving clk (if any).
func runSteps(t *testing.T, h http.Handler, clk *testClock, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.advance != 0 {
			clk.Advance(s.advance)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, s.req)
		t.Run(fmt.Sprintf("step %d %s", i, s.name), func(t *testing.T) {
			for _, c := range s.want {
				c(t, w)
			}
		})
	}
}

// newLimiter builds a Limiter or fails the test. Over a Redis store it
// gives the store 10 s (patient) unless opts set a timeout of their own:
// under a loaded run a call to miniredis or a real Redis can take longer
// than the default 100ms, which would hand the decision to the fallback,
// on counters of its own, and change what a test counts.
func newLimiter(t testing.TB, s ratelimit.Store, p *ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	if _, ok := s.(*store.Redis); ok {
		opts = append([]ratelimit.Option{patient}, opts...)
	}
	l, err := ratelimit.New(s, p, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// memoryStore returns a memory store on a controlled clock.
func memoryStore() (*store.Memory, *testClock) {
	clk := newTestClock()
	return store.NewMemory(store.WithClock(clk.Now)), clk
}

func miniredisStore(t *testing.T) *store.Redis {
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { c.Close() })
	return mustRedis(t, c)
}

func mustRedis(t *testing.T, c redis.UniversalClient) *store.Redis {
	t.Helper()
	s, err := store.NewRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// realRedisAvailable reports whether tests should start a real
// redis-server: it is on PATH, or RATELIMIT_REQUIRE_REDIS=1 makes its
// absence a failure (redistest then fails the test).
func realRedisAvailable() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil || redistest.Require()
}

const (
	ipA = "203.0.113.7:4711"
	ipB = "198.51.100.9:5000"
)

// identifierErr returns the error New reports for a Limiter limiting by id
// (a mistake ByIP's or ByHeader's arguments made), or nil.
func identifierErr(id ratelimit.Identifier) error {
	_, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/s"), ratelimit.WithIdentifiers(id))
	return err
}

// returnsWithin runs f and fails the test if it has not returned after a
// generous 5s: a guard against hangs, not a timing assertion.
func returnsWithin(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still blocked after 5s")
	}
}

// timedServe serves r on h and returns the response and how long it took.
func timedServe(h http.Handler, r *http.Request) (*httptest.ResponseRecorder, time.Duration) {
	w := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(w, r)
	return w, time.Since(start)
}

// percentile returns the q-quantile (0..1) of ds, nearest rank.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// violations collects the first few violations seen by load goroutines,
// which must not call t.Fatal, and counts them all.
type violations struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.n++
	if len(v.first) < 10 {
		v.first = append(v.first, fmt.Sprintf(format, args...))
	}
}

// report fails t with the count of what was seen and the first ones.
func (v *violations) report(t *testing.T, what string) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.n > 0 {
		t.Errorf("%d %s, the first ones:\n  %s", v.n, what, strings.Join(v.first, "\n  "))
	}
}

// waitStopped waits for the load goroutines of wg, once told to stop, and
// fails t if they still run 5s after guard (a request's budget and slack):
// a request hangs.
func waitStopped(t *testing.T, wg *sync.WaitGroup, guard time.Duration, who string) {
	t.Helper()
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(guard + 5*time.Second):
		t.Fatalf("%s still running 5s after stop: a request hangs", who)
	}
}

// pkParam matches the pk parameter of a draft-11 item.
var pkParam = regexp.MustCompile(`;pk=:[A-Za-z0-9+/=]*:`)

// withoutPK returns field values without their pk parameters, for checks
// of the other parameters (pk has tests of its own: pk_test.go).
func withoutPK(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = pkParam.ReplaceAllString(v, "")
	}
	return out
}
