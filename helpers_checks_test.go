package ratelimit_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

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

// headersMatch checks that the response carries exactly the headers that
// SetHeaders writes for the last decision h saw.
func headersMatch(h *hookRecorder, style ratelimit.HeaderStyle) check {
	return func(t *testing.T, w *httptest.ResponseRecorder) {
		t.Helper()
		res := h.last()
		want := http.Header{}
		ratelimit.SetHeaders(want, style, res.Policy, res.Decision)
		for k, v := range want {
			if got := w.Header()[k]; !slices.Equal(withoutPK(got), v) {
				t.Errorf("header %s = %q, want %q (pk aside)", k, got, v)
			}
		}
		// The RateLimit item names its identity (pk), never the key.
		if rl := w.Header().Get("RateLimit"); rl != "" && res.Decision.Key < len(res.Keys) {
			if pk := ";pk=" + ratelimit.PK(res.Keys[res.Decision.Key]); !strings.HasSuffix(rl, pk) {
				t.Errorf("RateLimit %q, want the identity's %s", rl, pk)
			}
		}
		if style == ratelimit.HeadersNone {
			hasNoRateLimitHeaders()(t, w)
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
