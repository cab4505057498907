package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

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

// servePanics serves r through h and reports whether the handler panicked
// (as net/http would see it).
func servePanics(h http.Handler, r *http.Request) (code int, panicked bool) {
	w := httptest.NewRecorder()
	func() {
		defer func() { panicked = recover() != nil }()
		h.ServeHTTP(w, r)
	}()
	return w.Code, panicked
}

// TestCircuitSurvivesPanics: when the store or the error hook panics during
// the circuit's half-open probe, the panic reaches net/http and the probe
// is released: after the next cooldown the store is asked again (before
// the fix, the breaker stayed "probing" for the life of the process:
// FailClosed a permanent outage, FailOpen permanently unlimited).
func TestCircuitSurvivesPanics(t *testing.T) {
	for _, culprit := range []string{"store", "error hook"} {
		t.Run(culprit, func(t *testing.T) {
			clk := newTestClock()
			s := &panicStore{mem: store.NewMemory(store.WithClock(clk.Now))}
			s.down.Store(true)
			var hookPanics atomic.Bool
			lim := newLimiter(t, s, ratelimit.MustParsePolicy("100/h"),
				ratelimit.WithCircuitBreaker(2, time.Second), ratelimit.WithFailureMode(ratelimit.FailClosed),
				ratelimit.WithLogger(discardLogger),
				ratelimit.WithErrorHook(func(*http.Request, error) {
					if hookPanics.Load() {
						panic("hook exploded") // a WithLabelValues with the wrong label count, say
					}
				}))
			ratelimit.SetLogClock(lim, clk.Now)
			h := lim.Handler(okHandler)
			for i := 0; i < 2; i++ { // two failures open the circuit
				servePanics(h, getFrom(ipA))
			}
			if code, _ := servePanics(h, getFrom(ipA)); code != http.StatusServiceUnavailable || s.calls.Load() != 2 {
				t.Fatalf("circuit open: status %d after %d store calls, want 503 after 2", code, s.calls.Load())
			}
			for cooldown := 1; cooldown <= 20; cooldown++ {
				clk.Advance(time.Second)
				if culprit == "store" {
					s.panics.Store(true)
				} else {
					hookPanics.Store(true)
				}
				if _, panicked := servePanics(h, getFrom(ipA)); !panicked {
					t.Fatalf("cooldown %d: the probe's panic did not reach net/http", cooldown)
				}
				s.panics.Store(false)
				hookPanics.Store(false)
			}
			// The store recovers: the next probe reaches it and closes the circuit.
			s.down.Store(false)
			before := s.calls.Load()
			clk.Advance(time.Second)
			if code, _ := servePanics(h, getFrom(ipA)); code != http.StatusOK || s.calls.Load() != before+1 {
				t.Fatalf("after 20 panicking probes: status %d, %d store calls since; want 200 from the store: the circuit is wedged", code, s.calls.Load()-before)
			}
			if code, _ := servePanics(h, getFrom(ipA)); code != http.StatusOK || s.calls.Load() != before+2 {
				t.Fatalf("circuit closed: status %d, want 200 from the store", code)
			}
		})
	}
}

// TestDeniedHandlerStatus: a custom denied handler that writes no status
// (nothing at all, or only a body) still answers 429; one that chooses
// another status keeps it; Flush before any status sends the 429.
func TestDeniedHandlerStatus(t *testing.T) {
	cases := []struct {
		name string
		h    http.HandlerFunc
		want int
		body string
	}{
		{"writes nothing", func(http.ResponseWriter, *http.Request) {}, 429, ""},
		{"writes a body only", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "slow down") }, 429, "slow down"},
		{"flushes first", func(w http.ResponseWriter, _ *http.Request) {
			http.NewResponseController(w).Flush()
			io.WriteString(w, "later")
		}, 429, "later"},
		{"chooses 503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, 503, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/h"), ratelimit.WithDeniedHandler(c.h))
			srv := httptest.NewServer(lim.Handler(okHandler))
			defer srv.Close()
			http.Get(srv.URL)
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want || string(body) != c.body || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("status %d body %q Retry-After %q; want %d, %q and a Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"), c.want, c.body)
			}
		})
	}
}

// stackedRouter is the pattern of the chi example: a global Limiter on the
// router, a stricter one on a route.
func stackedRouter(t *testing.T, global, login *ratelimit.Limiter, seen *[][]ratelimit.Result) http.Handler {
	r := chi.NewRouter()
	r.Use(global.Handler)
	r.Get("/other", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "other") })
	r.With(login.Handler).Post("/login", func(w http.ResponseWriter, r *http.Request) {
		*seen = append(*seen, ratelimit.AllFromContext(r.Context()))
		io.WriteString(w, "welcome")
	})
	return r
}

// TestStackedLimiters: a global 6/m on the router and a stricter 2/m on
// /login. Requests /login denies are given back to the global limit (it
// was not served), so unrelated routes keep their budget; both limits
// appear in RateLimit-Policy and RateLimit; a 429's Retry-After is the
// denying limiter's, and waiting it succeeds; handlers see both Results.
func TestStackedLimiters(t *testing.T) {
	mem, clk := memoryStore()
	global := newLimiter(t, mem, ratelimit.MustParsePolicy("6/m", ratelimit.Named("global")))
	login := newLimiter(t, mem, ratelimit.MustParsePolicy("2/m", ratelimit.Named("login")))
	var seen [][]ratelimit.Result
	h := stackedRouter(t, global, login, &seen)
	post := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := getFrom(ipA)
		r.Method, r.URL.Path = http.MethodPost, "/login"
		h.ServeHTTP(w, r)
		return w
	}
	for i := 0; i < 2; i++ {
		if w := post(); w.Code != 200 {
			t.Fatalf("login %d: %d", i, w.Code)
		}
	}
	if len(seen) != 2 || len(seen[1]) != 2 || seen[1][0].Policy.Name() != "global" || seen[1][1].Policy.Name() != "login" {
		t.Fatalf("AllFromContext in the handler: %+v, want global then login", seen)
	}
	var denied *httptest.ResponseRecorder
	for i := 0; i < 20; i++ { // 20 denied logins must not use up the global limit
		denied = post()
		if denied.Code != http.StatusTooManyRequests {
			t.Fatalf("denied login %d: %d", i, denied.Code)
		}
	}
	wantPolicy := `"global-1m";q=6;w=60, "login-1m";q=2;w=60`
	if got := denied.Header().Get("RateLimit-Policy"); got != wantPolicy {
		t.Errorf("RateLimit-Policy %q, want %q", got, wantPolicy)
	}
	if got := denied.Header().Get("RateLimit"); !strings.HasPrefix(got, `"global-1m";r=`) || !strings.Contains(got, `, "login-1m";r=0;t=60`) {
		t.Errorf("RateLimit %q, want both limits, login's with r=0", got)
	}
	if got := denied.Header().Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After %q, want login's 60", got)
	}
	for i := 0; i < 5; i++ { // the global limit has 4 left: 6 minus the 2 served logins
		r := getFrom(ipA)
		r.URL.Path = "/other"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if want := map[bool]int{true: 200, false: 429}[i < 4]; w.Code != want {
			t.Fatalf("/other %d: %d, want %d (RateLimit %q): denied logins must not be charged to the global limit", i, w.Code, want, w.Header().Get("RateLimit"))
		}
	}
	clk.Advance(60 * time.Second) // Retry-After
	if w := post(); w.Code != 200 {
		t.Fatalf("after waiting Retry-After: %d, RateLimit %q", w.Code, w.Header().Get("RateLimit"))
	}
}

// TestStackedDryRunNoLeak: an outer dry run's Retry-After does not leak
// onto an inner 429 that can never be admitted (no Retry-After at all).
func TestStackedDryRunNoLeak(t *testing.T) {
	mem := store.NewMemory()
	outer := newLimiter(t, mem, ratelimit.MustParsePolicy("1/h", ratelimit.Named("outer")), ratelimit.WithDryRun(true))
	inner := newLimiter(t, mem, ratelimit.MustParsePolicy("5/h", ratelimit.Named("inner")),
		ratelimit.WithCostFunc(func(*http.Request) int64 { return 10 })) // above 5: never admitted
	h := outer.Handler(inner.Handler(okHandler))
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, getFrom(ipA))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "" {
		t.Fatalf("status %d Retry-After %q; want 429 without Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
}

// TestStackedRefundOnce: a request that the inner Limiter denies is given
// back to the outer one exactly once, even when the outer also refunds by
// outcome (WithRefundIf on the 429).
func TestStackedRefundOnce(t *testing.T) {
	mem := store.NewMemory()
	outer := newLimiter(t, mem, ratelimit.MustParsePolicy("10/h", ratelimit.Named("outer")),
		ratelimit.WithRefundIf(func(_ *http.Request, status int) bool { return status == http.StatusTooManyRequests }))
	inner := newLimiter(t, mem, ratelimit.MustParsePolicy("1/h", ratelimit.Named("inner")))
	h := outer.Handler(inner.Handler(okHandler))
	for i := 0; i < 5; i++ {
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	}
	// One served request is charged to outer; four denied ones are refunded once each.
	d, _ := outer.AllowN(context.Background(), 0, "ip:203.0.113.7")
	if d.Remaining != 9 {
		t.Fatalf("outer has %d left, want 9 (one served; refunds never twice)", d.Remaining)
	}
}

// TestRetryAfterAgreesWithBody: a store's denial with RetryAfter ≤ 0
// sends Retry-After: 1, as the problem document's retry_after says.
func TestRetryAfterAgreesWithBody(t *testing.T) {
	s := storeFunc(func(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		return ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, req.Policy.NumLimits())}, nil // denied, RetryAfter 0
	})
	lim := newLimiter(t, s, ratelimit.MustParsePolicy("1/s"))
	w := httptest.NewRecorder()
	lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"retry_after":1`) {
		t.Fatalf("status %d Retry-After %q body %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

type storeFunc func(context.Context, ratelimit.Request) (ratelimit.Decision, error)

func (f storeFunc) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return f(ctx, req)
}

// TestCircuitOpenCountsSuppressed: requests the open circuit answers count
// in the next error log's "suppressed".
func TestCircuitOpenCountsSuppressed(t *testing.T) {
	logs := &logRecorder{}
	clk := newTestClock()
	lim := newLimiter(t, &failStore{err: errBoom}, ratelimit.MustParsePolicy("2/m"), ratelimit.WithLogger(slog.New(logs)),
		ratelimit.WithCircuitBreaker(1, time.Hour))
	ratelimit.SetLogClock(lim, clk.Now)
	h := lim.Handler(okHandler)
	for i := 0; i < 10; i++ { // 1 store failure, then 9 answered by the open circuit
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	}
	clk.Advance(2 * time.Second)
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	errs := logs.at(slog.LevelError)
	if len(errs) != 2 {
		t.Fatalf("%d error logs, want 2", len(errs))
	}
	if v, _ := attrOf(errs[1], "suppressed"); v.Int64() != 9 {
		t.Fatalf("suppressed %v, want 9 (the circuit's answers)", v)
	}
}

// TestHeadersNoneFailClosed: HeadersNone sends no Retry-After on the
// FailClosed 503 either, as documented.
func TestHeadersNoneFailClosed(t *testing.T) {
	lim := newLimiter(t, &failStore{err: errBoom}, ratelimit.MustParsePolicy("2/m"), ratelimit.WithLogger(discardLogger),
		ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithHeaders(ratelimit.HeadersNone))
	w := httptest.NewRecorder()
	lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
	if w.Code != 503 || w.Header().Get("Retry-After") != "" {
		t.Fatalf("status %d Retry-After %q; want 503 without it", w.Code, w.Header().Get("Retry-After"))
	}
}

// TestCostOverTierCapacity: a fixed cost above a cheaper tier's capacity
// (chosen per request) is reported to the error hook, not denied silently.
func TestCostOverTierCapacity(t *testing.T) {
	var h hookRecorder
	free := ratelimit.MustParsePolicy("3/m", ratelimit.Named("free"))
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("100/m", ratelimit.Named("paid")), append(h.options(),
		ratelimit.WithCost(5), ratelimit.WithLogger(discardLogger),
		ratelimit.WithPolicyFunc(func(*http.Request) *ratelimit.Policy { return free }))...)
	w := httptest.NewRecorder()
	lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
	errs := h.errors()
	if w.Code != 429 || len(errs) != 1 || !errors.Is(errs[0], ratelimit.ErrCostOverCapacity) {
		t.Fatalf("status %d, hook errors %v; want 429 and one ErrCostOverCapacity", w.Code, errs)
	}
}

// TestAllowNDedupesBeforeMaxKeys: repeated keys count once against MaxKeys.
func TestAllowNDedupesBeforeMaxKeys(t *testing.T) {
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("5/s"))
	keys := make([]string, 0, 2*ratelimit.MaxKeys)
	for i := 0; i < 2*ratelimit.MaxKeys; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i%ratelimit.MaxKeys))
	}
	if d, err := lim.AllowN(context.Background(), 1, keys...); err != nil || !d.Allowed {
		t.Fatalf("%d keys, %d distinct: %+v %v", len(keys), ratelimit.MaxKeys, d, err)
	}
}
