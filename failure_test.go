package ratelimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

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
		// A store that names no fallback (FallbackStore) refuses while it
		// fails: unlimited must be asked for.
		{name: "fail closed by default", steps: 1, want: isUnavailable, wantHooks: 1, wantErr: true},
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
		{name: "fallback fails too: fail closed by default", fallback: func() ratelimit.Store { return &failStore{err: io.ErrUnexpectedEOF} },
			steps: 1, want: isUnavailable, wantHooks: 2, wantErr: true},
		{name: "fallback fails too: fail open", opts: []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)},
			fallback: func() ratelimit.Store { return &failStore{err: io.ErrUnexpectedEOF} },
			steps:    1, want: isUnlimited, wantNext: true, wantHooks: 2, wantErr: true},
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
			// One log line, at level Error: the store started failing,
			// with the store's error in it.
			if n := len(logs.all()); n != 1 {
				t.Fatalf("%d log lines, want 1", n)
			}
			recs := logs.at(slog.LevelError)
			if len(recs) != 1 {
				t.Fatalf("%d error logs, want 1", len(recs))
			}
			if v, _ := attrOf(recs[0], "error"); !strings.Contains(v.String(), "boom") {
				t.Errorf("logged error %q, want the store's", v)
			}
		})
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

// badStore answers decisions that point outside the request.
type badStore struct{}

func (badStore) Take(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 5, Key: 3}, nil
}

// TestHandlerInvalidDecision: a decision that points outside its request
// is a store failure: reported, never used (FailClosed, the default for a
// store without a fallback, decides).
func TestHandlerInvalidDecision(t *testing.T) {
	var h hookRecorder
	lim := newLimiter(t, badStore{}, ratelimit.MustParsePolicy("1/s"), append(h.options(), ratelimit.WithLogger(discardLogger))...)
	w := httptest.NewRecorder()
	lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
	for _, c := range isUnavailable {
		c(t, w)
	}
	if errs := h.errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "invalid decision") {
		t.Errorf("hook errors %v, want an invalid decision", errs)
	}
}
