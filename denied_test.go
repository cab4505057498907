package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func TestHandlerDenied(t *testing.T) {
	st, clk := memoryStore()
	var h hookRecorder
	// No holding: this pins the store's answers (hold_test.go pins holding).
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("2/m, 3/h"), ratelimit.WithDecisionHook(h.onDecision), ratelimit.WithMaxDelay(0))
	srv := lim.Handler(okHandler)
	retryAfterMatches := func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		want := http.Header{}
		ratelimit.SetHeaders(want, ratelimit.HeadersIETF, h.last().Policy, h.last().Decision)
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

// TestRetryAfterAgreesWithBody: a store's denial with RetryAfter ≤ 0
// sends Retry-After: 1, as the problem document's retry_after says.
func TestRetryAfterAgreesWithBody(t *testing.T) {
	s := storeFunc(func(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		return ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, len(req.Policy.Limits()))}, nil // denied, RetryAfter 0
	})
	lim := newLimiter(t, s, ratelimit.MustParsePolicy("1/s"))
	w := httptest.NewRecorder()
	lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"retry_after":1`) {
		t.Fatalf("status %d Retry-After %q body %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
}

// TestBlockForHeaders: once denied, a key stays denied for the penalty:
// Retry-After and the RateLimit header's t say so.
func TestBlockForHeaders(t *testing.T) {
	mem, clk := memoryStore()
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(10*time.Minute), ratelimit.Named("login")))
	h := lim.Handler(okHandler)
	for i := 0; i < 2; i++ {
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, getFrom(ipA))
	if w.Code != 429 || w.Header().Get("Retry-After") != "600" || withoutPK([]string{w.Header().Get("RateLimit")})[0] != `"login-1m";r=0;t=600` {
		t.Fatalf("denied: %d, Retry-After %q, RateLimit %q; want 600s", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
	clk.Advance(2 * time.Minute) // the minute limit has room, the block runs on
	w = httptest.NewRecorder()
	h.ServeHTTP(w, getFrom(ipA))
	if w.Code != 429 || w.Header().Get("Retry-After") != "480" {
		t.Fatalf("blocked: %d, Retry-After %q; want 429 and 480s", w.Code, w.Header().Get("Retry-After"))
	}
	clk.Advance(8 * time.Minute)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, getFrom(ipA))
	if w.Code != 200 {
		t.Fatalf("after the block: %d", w.Code)
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
