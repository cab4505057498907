package ratelimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

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
	if got := withoutPK([]string{denied.Header().Get("RateLimit-Policy")})[0]; got != wantPolicy {
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
