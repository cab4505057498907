package ratelimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// scopeStep is one request of a scope test and what it must get.
type scopeStep struct {
	method, path string
	code         int
	limited      bool // the answer carries RateLimit headers: the limiter saw it
}

func runScope(t *testing.T, h http.Handler, steps []scopeStep) {
	t.Helper()
	for i, s := range steps {
		r := httptest.NewRequest(s.method, s.path, nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		limited := w.Header().Get("RateLimit-Policy") != ""
		if w.Code != s.code || limited != s.limited {
			t.Errorf("step %d: %s %s: got %d (RateLimit headers: %v), want %d (%v)",
				i, s.method, s.path, w.Code, limited, s.code, s.limited)
		}
	}
}

func scopeLimiter(t *testing.T) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/h", ratelimit.Named("scope")))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func serveOK(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }

// Wrapping a whole router limits every request it receives, and charges
// it: its own 404 (no route) and 405 (wrong method) answers included, so a
// client probing unknown paths spends the budget of the real routes.
// Wrapping only the routes (ServeMux per pattern, chi's r.With or r.Group)
// leaves the router's 404 and 405 answers unlimited and free.
func TestScopeWholeRouterChargesNotFound(t *testing.T) {
	whole := []scopeStep{
		{"GET", "/nope", http.StatusNotFound, true},
		{"POST", "/hello", http.StatusMethodNotAllowed, true},
		{"GET", "/hello", http.StatusTooManyRequests, true}, // 2/h spent on the 404 and the 405
	}
	routes := []scopeStep{
		{"GET", "/nope", http.StatusNotFound, false},
		{"POST", "/hello", http.StatusMethodNotAllowed, false},
		{"GET", "/hello", http.StatusOK, true},
		{"GET", "/hello", http.StatusOK, true},
		{"GET", "/hello", http.StatusTooManyRequests, true},
	}

	t.Run("ServeMux/whole", func(t *testing.T) {
		lim := scopeLimiter(t)
		mux := http.NewServeMux()
		mux.HandleFunc("GET /hello", serveOK)
		runScope(t, lim.Handler(mux), whole)
	})
	t.Run("ServeMux/per pattern", func(t *testing.T) {
		lim := scopeLimiter(t)
		mux := http.NewServeMux()
		mux.Handle("GET /hello", lim.Handler(http.HandlerFunc(serveOK)))
		runScope(t, mux, routes)
	})
	t.Run("chi/Use on the router", func(t *testing.T) {
		lim := scopeLimiter(t)
		r := chi.NewRouter()
		r.Use(lim.Handler)
		r.Get("/hello", serveOK)
		runScope(t, r, whole)
	})
	t.Run("chi/With", func(t *testing.T) {
		lim := scopeLimiter(t)
		r := chi.NewRouter()
		r.With(lim.Handler).Get("/hello", serveOK)
		runScope(t, r, routes)
	})
	t.Run("chi/Group", func(t *testing.T) {
		lim := scopeLimiter(t)
		r := chi.NewRouter()
		r.Group(func(r chi.Router) {
			r.Use(lim.Handler)
			r.Get("/hello", serveOK)
		})
		runScope(t, r, routes)
	})
}
