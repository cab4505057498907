package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMetricsServedByTheAdapter: /metrics is the metrics/prometheus
// adapter's scrape: the decisions the routes made, counted by policy and
// outcome, and the series a dashboard needs (held requests, store errors)
// present at 0 before anything happened to them.
func TestMetricsServedByTheAdapter(t *testing.T) {
	s := newLoginServer(t)
	for step := range 12 { // /api/hello admits 10 a second per client
		r := httptest.NewRequest(http.MethodGet, "/api/hello", nil)
		r.RemoteAddr = "192.0.2.7:1234"
		w := httptest.NewRecorder()
		s.h.ServeHTTP(w, r)
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[step < 10]; w.Code != want {
			t.Fatalf("step %d: GET /api/hello: %d, want %d", step, w.Code, want)
		}
	}
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := w.Body.String()
	for step, want := range []string{
		`ratelimit_decisions_total{fallback="false",outcome="allowed",policy="hello"} 10`,
		`ratelimit_decisions_total{fallback="false",outcome="denied",policy="hello"} 2`,
		`ratelimit_held_requests_total{outcome="served"} 0`,
		`ratelimit_store_errors_total{kind="timeout",op="take",store="main"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("step %d: /metrics lacks %q:\n%s", step, want, body)
		}
	}
}
