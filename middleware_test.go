package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratelimitkit/ratelimit"
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

func newTestClock() *testClock { return &testClock{now: clockStart} }

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

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }

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

// A check is one assertion about a response.
type check func(t *testing.T, w *httptest.ResponseRecorder)

func hasStatus(code int) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		if w.Code != code {
			t.Errorf("status %d, want %d (body %q)", w.Code, code, w.Body.String())
		}
	}
}

func hasHeader(name, want string) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		if got, ok := w.Header()[http.CanonicalHeaderKey(name)]; !ok || len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

// hasHeaderSet checks that the header is present, whatever its value.
func hasHeaderSet(name string) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		if w.Header().Get(name) == "" {
			t.Errorf("header %s missing", name)
		}
	}
}

func hasNoHeader(name string) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		if got, ok := w.Header()[http.CanonicalHeaderKey(name)]; ok {
			t.Errorf("header %s = %q, want none", name, got)
		}
	}
}

// hasNoRateLimitHeaders checks that no header of any style is present.
func hasNoRateLimitHeaders() check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		for k, v := range w.Header() {
			if strings.Contains(strings.ToLower(k), "ratelimit") || k == "Retry-After" {
				t.Errorf("header %s = %q, want none", k, v)
			}
		}
	}
}

func hasBody(substr string) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		if !strings.Contains(w.Body.String(), substr) {
			t.Errorf("body %q, want it to contain %q", w.Body.String(), substr)
		}
	}
}

func lacksBody(substr string) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		if strings.Contains(w.Body.String(), substr) {
			t.Errorf("body %q, want it without %q", w.Body.String(), substr)
		}
	}
}

// Checks shared by many cases.
var (
	isAllowed     = []check{hasStatus(http.StatusOK), hasBody("ok"), hasHeaderSet("RateLimit"), hasHeaderSet("RateLimit-Policy"), hasNoHeader("Retry-After"), hasNoHeader("Cache-Control")}
	isDenied      = []check{hasStatus(http.StatusTooManyRequests), lacksBody("ok"), hasHeaderSet("RateLimit"), hasHeaderSet("RateLimit-Policy"), hasHeaderSet("Retry-After"), hasHeader("Cache-Control", "no-store"), hasHeader("Content-Type", "application/problem+json")}
	isUnlimited   = []check{hasStatus(http.StatusOK), hasBody("ok"), hasNoRateLimitHeaders()}
	isUnavailable = []check{hasStatus(http.StatusServiceUnavailable), lacksBody("ok"), hasHeader("Retry-After", "1"), hasHeader("Cache-Control", "no-store"), hasNoHeader("RateLimit")}
)

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

// newLimiter builds a Limiter or fails the test.
func newLimiter(t testing.TB, s ratelimit.Store, p *ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
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

const (
	ipA = "203.0.113.7:4711"
	ipB = "198.51.100.9:5000"
)

func TestHandlerDefaults(t *testing.T) {
	st, clk := memoryStore()
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("2/m"))
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "first", req: getFrom(ipA), want: isAllowed},
		{name: "second", req: getFrom(ipA), want: isAllowed},
		{name: "third is denied", req: getFrom(ipA), want: isDenied},
		{name: "other IP has its own budget", req: getFrom(ipB), want: isAllowed},
		{name: "same IP, other port", req: getFrom("203.0.113.7:1"), want: isDenied},
		{name: "forwarded header not trusted", req: getFrom(ipA, "X-Forwarded-For", "192.0.2.1"), want: isDenied},
		{name: "much later", advance: 2 * time.Minute, req: getFrom(ipA), want: isAllowed},
	})
}

func TestHandlerRouters(t *testing.T) {
	routers := []struct {
		name  string
		build func(lim *ratelimit.Limiter) http.Handler
	}{
		{"chi With", func(lim *ratelimit.Limiter) http.Handler {
			r := chi.NewRouter()
			r.With(lim.Handler).Get("/limited", okHandler)
			r.Get("/free", okHandler)
			return r
		}},
		{"chi Use in Group", func(lim *ratelimit.Limiter) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) {
				r.Use(lim.Handler)
				r.Get("/limited", okHandler)
			})
			r.Get("/free", okHandler)
			return r
		}},
		{"ServeMux", func(lim *ratelimit.Limiter) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /limited", lim.Handler(okHandler))
			mux.Handle("GET /free", okHandler)
			return mux
		}},
		{"whole ServeMux wrapped", func(lim *ratelimit.Limiter) http.Handler {
			limited := http.NewServeMux()
			limited.Handle("GET /limited", okHandler)
			mux := http.NewServeMux()
			mux.Handle("/limited", lim.Handler(limited))
			mux.Handle("GET /free", okHandler)
			return mux
		}},
	}
	for _, rt := range routers {
		t.Run(rt.name, func(t *testing.T) {
			st, clk := memoryStore()
			h := rt.build(newLimiter(t, st, ratelimit.MustParsePolicy("1/s")))
			at := func(path string) *http.Request {
				r := getFrom(ipA)
				r.URL.Path = path
				return r
			}
			runSteps(t, h, clk, []step{
				{name: "limited", req: at("/limited"), want: isAllowed},
				{name: "limited again", req: at("/limited"), want: isDenied},
				{name: "free route", req: at("/free"), want: isUnlimited},
				{name: "much later", advance: 2 * time.Second, req: at("/limited"), want: isAllowed},
			})
		})
	}
}

func mustID(t testing.TB) func(ratelimit.Identifier, error) ratelimit.Identifier {
	return func(id ratelimit.Identifier, err error) ratelimit.Identifier {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
}

func TestHandlerIdentifiers(t *testing.T) {
	must := mustID(t)
	user := ratelimit.ByUser(func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-Test-User")
		return u, u != ""
	})
	same := ratelimit.IdentifierFunc(func(*http.Request) (string, bool) { return "same", true })
	empty := ratelimit.IdentifierFunc(func(*http.Request) (string, bool) { return "", true })
	tests := []struct {
		name     string
		ids      []ratelimit.Identifier
		req      *http.Request
		wantKeys []int // number of keys of each store call
		want     []check
	}{
		{"IP and API key in one call", []ratelimit.Identifier{must(ratelimit.ByIP()), must(ratelimit.ByHeader("X-API-Key"))},
			getFrom(ipA, "X-API-Key", "secret"), []int{2}, isAllowed},
		{"no API key: IP only", []ratelimit.Identifier{must(ratelimit.ByIP()), must(ratelimit.ByHeader("X-API-Key"))},
			getFrom(ipA), []int{1}, isAllowed},
		{"anonymous user skipped", []ratelimit.Identifier{user, must(ratelimit.ByIP())},
			getFrom(ipA), []int{1}, isAllowed},
		{"user and IP", []ratelimit.Identifier{user, must(ratelimit.ByIP())},
			getFrom(ipA, "X-Test-User", "42"), []int{2}, isAllowed},
		{"none applies: unlimited", []ratelimit.Identifier{user},
			getFrom(ipA), nil, isUnlimited},
		{"empty key skipped", []ratelimit.Identifier{empty},
			getFrom(ipA), nil, isUnlimited},
		{"duplicate keys merged", []ratelimit.Identifier{same, same},
			getFrom(ipA), []int{1}, isAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recStore{}
			var h hookRecorder
			var inNext bool
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, inNext = ratelimit.FromContext(r.Context())
				okHandler(w, r)
			})
			lim := newLimiter(t, rec, ratelimit.MustParsePolicy("10/s"),
				append(h.options(), ratelimit.WithIdentifiers(tt.ids...))...)
			w := httptest.NewRecorder()
			lim.Handler(next).ServeHTTP(w, tt.req)
			for _, c := range tt.want {
				c(t, w)
			}
			reqs := rec.requests()
			var got []int
			for _, r := range reqs {
				got = append(got, len(r.Keys))
			}
			if !slices.Equal(got, tt.wantKeys) {
				t.Fatalf("store calls with %v keys, want %v (requests %+v)", got, tt.wantKeys, reqs)
			}
			if len(reqs) == 0 {
				if inNext || len(h.results) != 0 {
					t.Errorf("unlimited request: Result in context %v, decision hook calls %d; want none", inNext, len(h.results))
				}
				return
			}
			if !inNext {
				t.Error("next handler: no Result in context")
			}
			if res := h.last(); !slices.Equal(res.Keys, reqs[0].Keys) {
				t.Errorf("Result.Keys %q, store saw %q", res.Keys, reqs[0].Keys)
			}
		})
	}
}

// TestHandlerIdentifiersShareOneCall pins that every key is limited: the
// API key's budget is spent from two IPs, and then neither gets through.
func TestHandlerIdentifiersShareOneCall(t *testing.T) {
	must := mustID(t)
	st, clk := memoryStore()
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("2/m"),
		ratelimit.WithIdentifiers(must(ratelimit.ByIP()), must(ratelimit.ByHeader("X-API-Key"))))
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "key k from A", req: getFrom(ipA, "X-API-Key", "k"), want: isAllowed},
		{name: "key k from B", req: getFrom(ipB, "X-API-Key", "k"), want: isAllowed},
		{name: "key k spent", req: getFrom(ipA, "X-API-Key", "k"), want: isDenied},
		{name: "A without key still has 1", req: getFrom(ipA), want: isAllowed},
		{name: "A spent", req: getFrom(ipA), want: isDenied},
		{name: "other key from A: A spent", req: getFrom(ipA, "X-API-Key", "other"), want: isDenied},
	})
}

func TestHandlerPolicyFunc(t *testing.T) {
	free := ratelimit.MustParsePolicy("1/m", ratelimit.Named("free"))
	pro := ratelimit.MustParsePolicy("3/m", ratelimit.Named("pro"))
	byPlan := ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy {
		if r.Header.Get("X-Plan") == "pro" {
			return pro
		}
		return nil // the default: free
	})
	st, clk := memoryStore()
	var h hookRecorder
	lim := newLimiter(t, st, free, byPlan, ratelimit.WithDecisionHook(h.onDecision))
	policyIs := func(want *ratelimit.Policy) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			if got := h.last().Policy; got != want {
				t.Errorf("policy %v, want %v", got.Name(), want.Name())
			}
		}
	}
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "free", req: getFrom(ipA), want: append(isAllowed, policyIs(free))},
		{name: "free spent", req: getFrom(ipA), want: append(isDenied, policyIs(free))},
		{name: "pro 1", req: getFrom(ipB, "X-Plan", "pro"), want: append(isAllowed, policyIs(pro))},
		{name: "pro 2", req: getFrom(ipB, "X-Plan", "pro"), want: isAllowed},
		{name: "pro 3", req: getFrom(ipB, "X-Plan", "pro"), want: isAllowed},
		{name: "pro spent", req: getFrom(ipB, "X-Plan", "pro"), want: append(isDenied, policyIs(pro))},
		{name: "policies count apart", req: getFrom(ipA, "X-Plan", "pro"), want: isAllowed},
	})
}

func TestHandlerCost(t *testing.T) {
	weight := func(r *http.Request) int64 {
		n, _ := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		return n
	}
	remainingIs := func(h *hookRecorder, want int64) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			if got := h.last().Decision.Remaining; got != want {
				t.Errorf("remaining %d, want %d", got, want)
			}
		}
	}
	costIs := func(h *hookRecorder, want int64) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			if got := h.last().Cost; got != want {
				t.Errorf("cost %d, want %d", got, want)
			}
		}
	}
	peek := []check{hasStatus(http.StatusOK), hasBody("ok"), hasHeaderSet("RateLimit"), hasNoHeader("Retry-After"), hasNoHeader("Cache-Control")}
	t.Run("fixed", func(t *testing.T) {
		st, clk := memoryStore()
		var h hookRecorder
		lim := newLimiter(t, st, ratelimit.MustParsePolicy("5/m"), ratelimit.WithCost(2), ratelimit.WithDecisionHook(h.onDecision))
		runSteps(t, lim.Handler(okHandler), clk, []step{
			{name: "2 of 5", req: getFrom(ipA), want: append(isAllowed, costIs(&h, 2))},
			{name: "4 of 5", req: getFrom(ipA), want: isAllowed},
			{name: "6 of 5", req: getFrom(ipA), want: isDenied},
		})
	})
	t.Run("zero", func(t *testing.T) {
		rec := &recStore{answer: func(ratelimit.Request) ratelimit.Decision {
			return ratelimit.Decision{RetryAfter: time.Second, Limits: []ratelimit.LimitStatus{{RetryAfter: time.Second, ResetAfter: time.Second}}}
		}}
		lim := newLimiter(t, rec, ratelimit.MustParsePolicy("5/m"), ratelimit.WithCost(0))
		runSteps(t, lim.Handler(okHandler), nil, []step{
			{name: "store says no, cost 0 passes with headers", req: getFrom(ipA), want: peek},
		})
		if reqs := rec.requests(); len(reqs) != 1 || reqs[0].Cost != 0 {
			t.Errorf("store requests %+v, want one of cost 0", reqs)
		}
	})
	t.Run("func", func(t *testing.T) {
		st, clk := memoryStore()
		var h hookRecorder
		lim := newLimiter(t, st, ratelimit.MustParsePolicy("5/m"), ratelimit.WithCostFunc(weight), ratelimit.WithDecisionHook(h.onDecision))
		runSteps(t, lim.Handler(okHandler), clk, []step{
			{name: "cost 3", req: getFrom(ipA, "X-Cost", "3"), want: append(isAllowed, costIs(&h, 3), remainingIs(&h, 2))},
			{name: "cost 3 does not fit", req: getFrom(ipA, "X-Cost", "3"), want: append(isDenied, costIs(&h, 3))},
			{name: "cost 2 fits", req: getFrom(ipA, "X-Cost", "2"), want: append(isAllowed, costIs(&h, 2))},
			{name: "negative counts as 0", req: getFrom(ipA, "X-Cost", "-7"), want: append(peek, costIs(&h, 0))},
			{name: "cost 0 when spent", req: getFrom(ipA, "X-Cost", "0"), want: append(peek, costIs(&h, 0))},
			{name: "cost 1 when spent", req: getFrom(ipA, "X-Cost", "1"), want: isDenied},
			{name: "above capacity: 429 without Retry-After", advance: time.Hour, req: getFrom(ipA, "X-Cost", "6"),
				want: []check{hasStatus(http.StatusTooManyRequests), hasNoHeader("Retry-After"), hasHeader("Cache-Control", "no-store"), hasHeaderSet("RateLimit")}},
			{name: "above capacity charged nothing", req: getFrom(ipA, "X-Cost", "5"), want: isAllowed},
		})
	})
}

// headersMatch checks that the response carries exactly the headers that
// SetHeaders writes for the last decision h saw.
func headersMatch(h *hookRecorder, style ratelimit.HeaderStyle) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		res := h.last()
		want := http.Header{}
		ratelimit.SetHeaders(want, style, res.Policy, res.Decision)
		for k, v := range want {
			if got := w.Header()[k]; !slices.Equal(got, v) {
				t.Errorf("header %s = %q, want %q", k, got, v)
			}
		}
		if style == ratelimit.HeadersNone {
			hasNoRateLimitHeaders()(t, w)
		}
	}
}

func TestHandlerDenied(t *testing.T) {
	st, clk := memoryStore()
	var h hookRecorder
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("2/m, 3/h"), ratelimit.WithDecisionHook(h.onDecision))
	srv := lim.Handler(okHandler)
	retryAfterMatches := func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		want := http.Header{}
		ratelimit.SetRetryAfter(want, h.last().Decision)
		if got := w.Header().Get("Retry-After"); got != want.Get("Retry-After") || got == "" {
			t.Errorf("Retry-After %q, want %q", got, want.Get("Retry-After"))
		}
	}
	deniedNow := append(slices.Clone(isDenied), headersMatch(&h, ratelimit.HeadersIETF), retryAfterMatches)
	runSteps(t, srv, clk, []step{
		{name: "1", req: getFrom(ipA), want: append(isAllowed, headersMatch(&h, ratelimit.HeadersIETF))},
		{name: "2", req: getFrom(ipA), want: isAllowed},
		{name: "minute limit", req: getFrom(ipA), want: deniedNow},
	})

	// Advancing the clock by exactly the Decision's RetryAfter lets the
	// next request through, and the header says no less than that.
	after := h.last().Decision.RetryAfter
	if after <= 0 {
		t.Fatalf("denied with RetryAfter %v", after)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, getFrom(ipA))
	if secs, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || time.Duration(secs)*time.Second < after {
		t.Errorf("Retry-After %q, want whole seconds ≥ %v", w.Header().Get("Retry-After"), after)
	}
	runSteps(t, srv, clk, []step{
		{name: "after RetryAfter", advance: after, req: getFrom(ipA), want: isAllowed},
		{name: "hour limit", req: getFrom(ipA), want: deniedNow},
	})
	after = h.last().Decision.RetryAfter
	runSteps(t, srv, clk, []step{
		{name: "just before RetryAfter", advance: after - time.Millisecond, req: getFrom(ipA), want: isDenied},
		{name: "at RetryAfter", advance: time.Millisecond, req: getFrom(ipA), want: isAllowed},
	})
}

func TestHandlerTwoLimitersShareStore(t *testing.T) {
	st, clk := memoryStore()
	p := ratelimit.MustParsePolicy("3/m")
	a := newLimiter(t, st, p).Handler(okHandler)
	b := newLimiter(t, st, ratelimit.MustParsePolicy("3/m")).Handler(okHandler) // same definition, same counters
	runSteps(t, a, clk, []step{{name: "a", req: getFrom(ipA), want: isAllowed}})
	runSteps(t, b, clk, []step{{name: "b", req: getFrom(ipA), want: isAllowed}})
	runSteps(t, a, clk, []step{{name: "a", req: getFrom(ipA), want: isAllowed}})
	runSteps(t, b, clk, []step{{name: "b spent", req: getFrom(ipA), want: isDenied}})
	runSteps(t, a, clk, []step{{name: "a spent", req: getFrom(ipA), want: isDenied}})
}

var errBoom = errors.New("boom: redis at 10.0.0.5:6379 refused")

func TestHandlerStoreFailure(t *testing.T) {
	tests := []struct {
		name      string
		opts      []ratelimit.Option
		fallback  func() ratelimit.Store // nil: none
		steps     int                    // requests to make; the last is checked
		want      []check
		wantNext  bool
		wantHooks int  // error hook calls per request
		wantErr   bool // Result.Err set: the failure mode decided
	}{
		{name: "fail open by default", steps: 1, want: isUnlimited, wantNext: true, wantHooks: 1, wantErr: true},
		{name: "fail open", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)},
			steps: 1, want: isUnlimited, wantNext: true, wantHooks: 1, wantErr: true},
		{name: "fail closed", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)},
			steps: 1, want: append(isUnavailable, lacksBody("boom"), lacksBody("10.0.0.5")), wantHooks: 1, wantErr: true},
		{name: "fail closed, cost 0 served", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithCost(0)},
			steps: 1, want: isUnlimited, wantNext: true, wantHooks: 1, wantErr: true},
		{name: "fail closed, dry run served", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithDryRun(true)},
			steps: 1, want: isUnlimited, wantNext: true, wantHooks: 1, wantErr: true},
		{name: "fallback decides: allowed", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)},
			fallback: func() ratelimit.Store { return store.NewMemory() },
			steps:    2, want: isAllowed, wantNext: true, wantHooks: 1},
		{name: "fallback decides: denied", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)},
			fallback: func() ratelimit.Store { return store.NewMemory() },
			steps:    3, want: isDenied, wantHooks: 1},
		{name: "fallback fails too: fail open", fallback: func() ratelimit.Store { return &failStore{err: io.ErrUnexpectedEOF} },
			steps: 1, want: isUnlimited, wantNext: true, wantHooks: 2, wantErr: true},
		{name: "fallback fails too: fail closed", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)},
			fallback: func() ratelimit.Store { return &failStore{err: io.ErrUnexpectedEOF} },
			steps:    1, want: isUnavailable, wantHooks: 2, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h hookRecorder
			logs := &logRecorder{}
			var nextRes ratelimit.Result
			var nextCalls int
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				nextCalls++
				nextRes, _ = ratelimit.FromContext(r.Context())
				okHandler(w, r)
			})
			opts := append(h.options(), ratelimit.WithLogger(slog.New(logs)))
			opts = append(opts, tt.opts...)
			if tt.fallback != nil {
				opts = append(opts, ratelimit.WithFallback(tt.fallback()))
			}
			primary := &failStore{err: errBoom}
			lim := newLimiter(t, primary, ratelimit.MustParsePolicy("2/m"), opts...)
			var w *httptest.ResponseRecorder
			for range tt.steps {
				nextCalls = 0
				w = httptest.NewRecorder()
				lim.Handler(next).ServeHTTP(w, getFrom(ipA))
			}
			for _, c := range tt.want {
				c(t, w)
			}
			if got := nextCalls == 1; got != tt.wantNext {
				t.Errorf("next handler called: %v, want %v", got, tt.wantNext)
			}
			if got := primary.calls.Load(); got != int64(tt.steps) {
				t.Errorf("store calls %d, want %d", got, tt.steps)
			}
			errs := h.errors()
			if len(errs) != tt.wantHooks*tt.steps {
				t.Fatalf("error hook calls %d, want %d: %v", len(errs), tt.wantHooks*tt.steps, errs)
			}
			for _, err := range errs {
				if !strings.HasPrefix(err.Error(), "ratelimit: ") {
					t.Errorf("hook error %q lacks the package prefix", err)
				}
			}
			if !errors.Is(errs[0], errBoom) {
				t.Errorf("hook error %v does not wrap the store's", errs[0])
			}
			for _, r := range h.errReqs {
				if r == nil {
					t.Error("error hook got a nil request from Handler")
				}
			}
			res := h.last()
			if got := res.Err != nil; got != tt.wantErr || tt.wantErr && !errors.Is(res.Err, errBoom) {
				t.Errorf("Result.Err = %v, want error %v wrapping %v", res.Err, tt.wantErr, errBoom)
			}
			if tt.wantNext && (nextRes.Policy == nil || nextRes.Err != res.Err) {
				t.Errorf("next handler's Result %+v, want the hook's %+v", nextRes, res)
			}
			// One error log (the first is never throttled), at level
			// Error, with the store error in it.
			recs := logs.at(slog.LevelError)
			if len(recs) != 1 {
				t.Fatalf("%d error logs, want 1", len(recs))
			}
			if v, _ := attrOf(recs[0], "error"); !strings.Contains(v.String(), "boom") {
				t.Errorf("logged error %q, want the store's", v)
			}
			if v, _ := attrOf(recs[0], "suppressed"); v.Int64() != 0 {
				t.Errorf("suppressed = %v, want 0", v)
			}
		})
	}
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

func TestHandlerTimeout(t *testing.T) {
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			slow, slowFallback := &blockStore{}, &blockStore{}
			var h hookRecorder
			lim := newLimiter(t, slow, ratelimit.MustParsePolicy("2/m"), append(h.options(),
				ratelimit.WithTimeout(time.Millisecond), ratelimit.WithFailureMode(mode),
				ratelimit.WithFallback(slowFallback), ratelimit.WithLogger(discardLogger))...)
			w := httptest.NewRecorder()
			returnsWithin(t, func() { lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA)) })
			want := isUnlimited
			if mode == ratelimit.FailClosed {
				want = isUnavailable
			}
			for _, c := range want {
				c(t, w)
			}
			for _, s := range []*blockStore{slow, slowFallback} {
				calls, deadlines, errs := s.seen()
				if calls != 1 || deadlines != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
					t.Errorf("store saw %d calls, %d with a deadline, ended by %v; want 1, 1, deadline exceeded", calls, deadlines, errs)
				}
			}
			errs := h.errors()
			if len(errs) != 2 {
				t.Fatalf("error hook calls %d, want 2", len(errs))
			}
			for _, err := range errs {
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 1ms") {
					t.Errorf("hook error %q, want a timeout", err)
				}
			}
		})
	}
}

// timeoutStore ignores its context deadline's error value and reports a
// network-style timeout instead, as a Redis client may.
type timeoutStore struct{}

func (timeoutStore) Take(ctx context.Context, _ ratelimit.Request) (ratelimit.Decision, error) {
	<-ctx.Done()
	return ratelimit.Decision{}, errors.New("i/o timeout")
}

func TestHandlerTimeoutWrapsDeadline(t *testing.T) {
	var h hookRecorder
	lim := newLimiter(t, timeoutStore{}, ratelimit.MustParsePolicy("2/m"), append(h.options(),
		ratelimit.WithTimeout(time.Millisecond), ratelimit.WithLogger(discardLogger))...)
	returnsWithin(t, func() { lim.Handler(okHandler).ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) })
	errs := h.errors()
	if len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) || !strings.Contains(errs[0].Error(), "i/o timeout") {
		t.Errorf("hook errors %v, want the store's wrapped with the deadline", errs)
	}
}

// TestHandlerClientGone: a client that went away (its request's context
// is canceled) does not decide the request: the store still gets its own
// timeout, its failure goes to the fallback, and the answer is the same as
// for a client that stayed.
func TestHandlerClientGone(t *testing.T) {
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			var h hookRecorder
			fallback := &recStore{}
			lim := newLimiter(t, &blockStore{}, ratelimit.MustParsePolicy("2/m"), append(h.options(),
				ratelimit.WithFailureMode(mode), ratelimit.WithFallback(fallback), ratelimit.WithTimeout(20*time.Millisecond),
				ratelimit.WithLogger(discardLogger))...)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			w := httptest.NewRecorder()
			returnsWithin(t, func() { lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA).WithContext(ctx)) })
			if w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
				t.Errorf("status %d, RateLimit %q: want the fallback's admission, with headers", w.Code, w.Header().Get("RateLimit"))
			}
			if n := len(fallback.requests()); n != 1 {
				t.Errorf("fallback asked %d times, want 1", n)
			}
			if errs := h.errors(); len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) || errors.Is(errs[0], context.Canceled) {
				t.Errorf("hook errors %v, want one timeout, no cancellation", errs)
			}
		})
	}
}

func TestHandlerLogThrottle(t *testing.T) {
	logs := &logRecorder{}
	clk := newTestClock()
	lim := newLimiter(t, &failStore{err: errBoom}, ratelimit.MustParsePolicy("2/m"), ratelimit.WithLogger(slog.New(logs)),
		ratelimit.WithCircuitBreaker(0, 0)) // every request reaches the store
	ratelimit.SetLogClock(lim, clk.Now)
	srv := lim.Handler(okHandler)
	steps := []struct {
		advance        time.Duration
		requests       int
		wantLogs       int
		wantSuppressed int64 // of the last log
	}{
		{0, 1, 1, 0},
		{0, 3, 1, 0},
		{999 * time.Millisecond, 1, 1, 0},
		{time.Millisecond, 1, 2, 4},
		{time.Hour, 1, 3, 0},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		for range s.requests {
			srv.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
		}
		recs := logs.at(slog.LevelError)
		if len(recs) != s.wantLogs {
			t.Fatalf("step %d: %d logs, want %d", i, len(recs), s.wantLogs)
		}
		if v, _ := attrOf(recs[len(recs)-1], "suppressed"); v.Int64() != s.wantSuppressed {
			t.Errorf("step %d: suppressed = %v, want %d", i, v, s.wantSuppressed)
		}
	}
}

func TestHandlerDryRun(t *testing.T) {
	st, clk := memoryStore()
	var h hookRecorder
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("1/m"), ratelimit.WithDryRun(true), ratelimit.WithDecisionHook(h.onDecision))
	reported := func(allowed bool) check {
		return func(t *testing.T, _ *httptest.ResponseRecorder) {
			t.Helper()
			res := h.last()
			if !res.DryRun || res.Decision.Allowed != allowed {
				t.Errorf("Result DryRun %v, Allowed %v; want true, %v", res.DryRun, res.Decision.Allowed, allowed)
			}
		}
	}
	servedButDenied := []check{hasStatus(http.StatusOK), hasBody("ok"), hasHeaderSet("Retry-After"), hasNoHeader("Cache-Control"), headersMatch(&h, ratelimit.HeadersIETF), reported(false)}
	srv := lim.Handler(okHandler)
	runSteps(t, srv, clk, []step{
		{name: "allowed", req: getFrom(ipA), want: append(isAllowed, reported(true))},
		{name: "would be denied", req: getFrom(ipA), want: servedButDenied},
		{name: "still served", req: getFrom(ipA), want: servedButDenied},
	})
	// Had the served denials been charged, waiting their RetryAfter
	// would not be enough.
	runSteps(t, srv, clk, []step{
		{name: "after RetryAfter", advance: h.last().Decision.RetryAfter, req: getFrom(ipA), want: append(isAllowed, reported(true))},
	})
}

func TestHandlerHeaderStyles(t *testing.T) {
	styles := []struct {
		name  string
		style ratelimit.HeaderStyle
	}{
		{"IETF", ratelimit.HeadersIETF},
		{"draft 06", ratelimit.HeadersDraft06},
		{"X-RateLimit", ratelimit.HeadersXRateLimit},
		{"IETF and X-RateLimit", ratelimit.HeadersIETF | ratelimit.HeadersXRateLimit},
		{"none", ratelimit.HeadersNone},
	}
	for _, tc := range styles {
		style := tc.style
		t.Run(tc.name, func(t *testing.T) {
			st, clk := memoryStore()
			var h hookRecorder
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("1/m"), ratelimit.WithHeaders(style), ratelimit.WithDecisionHook(h.onDecision))
			deniedWant := []check{hasStatus(http.StatusTooManyRequests), hasHeader("Cache-Control", "no-store"), headersMatch(&h, style)}
			if style == ratelimit.HeadersNone {
				deniedWant = append(deniedWant, hasNoHeader("Retry-After"))
			} else {
				deniedWant = append(deniedWant, hasHeaderSet("Retry-After"))
			}
			runSteps(t, lim.Handler(okHandler), clk, []step{
				{name: "allowed", req: getFrom(ipA), want: []check{hasStatus(http.StatusOK), headersMatch(&h, style)}},
				{name: "denied", req: getFrom(ipA), want: deniedWant},
			})
		})
	}
}

func TestHandlerDeniedHandler(t *testing.T) {
	st, clk := memoryStore()
	var seen ratelimit.Result
	custom := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = ratelimit.FromContext(r.Context())
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "slow down")
	})
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("1/m", ratelimit.Named("custom")), ratelimit.WithDeniedHandler(custom))
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "allowed", req: getFrom(ipA), want: isAllowed},
		{name: "denied by the custom handler", req: getFrom(ipA), want: []check{
			hasStatus(http.StatusTooManyRequests), hasBody("slow down"), hasHeader("Content-Type", "text/plain"),
			hasHeaderSet("Retry-After"), hasHeader("Cache-Control", "no-store"), hasHeaderSet("RateLimit"),
		}},
	})
	if seen.Policy == nil || seen.Policy.Name() != "custom" || seen.Decision.Allowed || seen.Cost != 1 || len(seen.Keys) != 1 {
		t.Errorf("denied handler saw Result %+v", seen)
	}
}

func TestHandlerResultInContext(t *testing.T) {
	rec := &recStore{}
	p := ratelimit.MustParsePolicy("10/s")
	var got ratelimit.Result
	var found bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, found = ratelimit.FromContext(r.Context()) })
	lim := newLimiter(t, rec, p, ratelimit.WithCost(3))
	lim.Handler(next).ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	if !found || got.Policy != p || got.Cost != 3 || len(got.Keys) != 1 || !strings.Contains(got.Keys[0], "203.0.113.7") ||
		!got.Decision.Allowed || got.Err != nil || got.DryRun {
		t.Errorf("FromContext = %+v, %v", got, found)
	}
	if reqs := rec.requests(); len(reqs) != 1 || reqs[0].Policy != p || reqs[0].Cost != 3 || !slices.Equal(reqs[0].Keys, got.Keys) {
		t.Errorf("store requests %+v", reqs)
	}
}

// badStore answers decisions that point outside the request.
type badStore struct{}

func (badStore) Take(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 5, Key: 3}, nil
}

func TestHandlerInvalidDecision(t *testing.T) {
	var h hookRecorder
	lim := newLimiter(t, badStore{}, ratelimit.MustParsePolicy("1/s"), append(h.options(), ratelimit.WithLogger(discardLogger))...)
	w := httptest.NewRecorder()
	lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
	for _, c := range isUnlimited {
		c(t, w)
	}
	if errs := h.errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "invalid decision") {
		t.Errorf("hook errors %v, want an invalid decision", errs)
	}
}

func TestHandlerDecisionHook(t *testing.T) {
	st, clk := memoryStore()
	var h hookRecorder
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("1/m"), ratelimit.WithDecisionHook(h.onDecision))
	runSteps(t, lim.Handler(okHandler), clk, []step{
		{name: "allowed", req: getFrom(ipA), want: isAllowed},
		{name: "denied", req: getFrom(ipA), want: isDenied},
	})
	if len(h.results) != 2 || !h.results[0].Decision.Allowed || h.results[1].Decision.Allowed {
		t.Errorf("hook saw %+v, want an allowed and a denied decision", h.results)
	}
}

// TestHandlerConcurrent pins that concurrent requests never get more than
// the limit through (run with -race).
func TestHandlerConcurrent(t *testing.T) {
	const limit, clients = 50, 200
	st := store.NewMemory()
	lim := newLimiter(t, st, ratelimit.MustParsePolicy(fmt.Sprintf("%d/h", limit)))
	srv := lim.Handler(okHandler)
	var admitted, rejected atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, getFrom(ipA))
			switch w.Code {
			case http.StatusOK:
				admitted.Add(1)
			case http.StatusTooManyRequests:
				rejected.Add(1)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != limit || rejected.Load() != clients-limit {
		t.Errorf("admitted %d, rejected %d; want %d, %d", admitted.Load(), rejected.Load(), limit, clients-limit)
	}
}

func TestLimiterFailureModeString(t *testing.T) {
	for m, want := range map[ratelimit.FailureMode]string{ratelimit.FailOpen: "fail-open", ratelimit.FailClosed: "fail-closed", 7: "failure-mode(7)"} {
		if got := m.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(m), got, want)
		}
	}
}
