package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// flakyStore fails while down is set, else answers from a memory store,
// and counts its calls.
type flakyStore struct {
	down  atomic.Bool
	calls atomic.Int64
	mem   *store.Memory
}

func (s *flakyStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return ratelimit.Decision{}, errors.New("connection refused")
	}
	return s.mem.Take(ctx, req)
}

// TestCircuitBreaker: after 5 failures the store is no longer asked;
// after the cooldown exactly one request probes it; a failed probe keeps
// the circuit open, a good one closes it and limiting resumes.
func TestCircuitBreaker(t *testing.T) {
	fs := &flakyStore{mem: store.NewMemory()}
	fs.down.Store(true)
	clk := newTestClock()
	var hookErrs []error
	lim := newLimiter(t, fs, ratelimit.MustParsePolicy("3/h"), ratelimit.WithFailureMode(ratelimit.FailClosed),
		ratelimit.WithErrorHook(func(_ *http.Request, err error) { hookErrs = append(hookErrs, err) }))
	ratelimit.SetLogClock(lim, clk.Now)
	srv := lim.Handler(okHandler)
	serve := func() int {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, getFrom(ipA))
		return w.Code
	}
	steps := []struct {
		name      string
		advance   time.Duration
		down      bool
		requests  int
		wantCalls int64 // store calls so far
		wantCode  int   // of the last request
	}{
		{"failures reach the store", 0, true, 5, 5, http.StatusServiceUnavailable},
		{"open: the store is skipped", 0, true, 20, 5, http.StatusServiceUnavailable},
		{"still open just before the cooldown", ratelimit.DefaultCircuitCooldown - time.Nanosecond, true, 3, 5, http.StatusServiceUnavailable},
		{"one probe after the cooldown, which fails", time.Nanosecond, true, 4, 6, http.StatusServiceUnavailable},
		{"reopened for another cooldown", ratelimit.DefaultCircuitCooldown / 2, false, 3, 6, http.StatusServiceUnavailable},
		{"probe succeeds and closes the circuit", ratelimit.DefaultCircuitCooldown / 2, false, 1, 7, http.StatusOK},
		{"limiting resumes", 0, false, 3, 10, http.StatusTooManyRequests},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		fs.down.Store(s.down)
		code := 0
		for range s.requests {
			code = serve()
		}
		if got := fs.calls.Load(); got != s.wantCalls || code != s.wantCode {
			t.Fatalf("step %d (%s): %d store calls, last status %d; want %d and %d", i, s.name, got, code, s.wantCalls, s.wantCode)
		}
	}
	open := 0
	for _, err := range hookErrs {
		if errors.Is(err, ratelimit.ErrCircuitOpen) {
			open++
		}
	}
	if open != 20+3+3+3 {
		t.Errorf("error hook saw %d ErrCircuitOpen, want %d", open, 20+3+3+3)
	}
}

// TestCircuitBreakerFallback: while the circuit is open the fallback
// decides at once. (A client that went away changes nothing: its store
// call runs on a context the client's leaving does not cancel.)
func TestCircuitBreakerFallback(t *testing.T) {
	fs := &flakyStore{mem: store.NewMemory()}
	fs.down.Store(true)
	lim := newLimiter(t, fs, ratelimit.MustParsePolicy("2/h"), ratelimit.WithFallback(store.NewMemory()),
		ratelimit.WithCircuitBreaker(2, time.Hour))
	srv := lim.Handler(okHandler)
	codes := []int{}
	for range 4 {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, getFrom(ipA))
		codes = append(codes, w.Code)
	}
	if fs.calls.Load() != 2 {
		t.Fatalf("%d store calls, want 2: two failures open the circuit", fs.calls.Load())
	}
	want := []int{200, 200, 429, 429} // the fallback's own counters: 2/h
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("statuses %v, want %v", codes, want)
		}
	}
}

func TestCircuitBreakerOptions(t *testing.T) {
	for _, o := range []ratelimit.Option{ratelimit.WithCircuitBreaker(-1, time.Second), ratelimit.WithCircuitBreaker(3, 0)} {
		if _, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/s"), o); err == nil {
			t.Error("invalid WithCircuitBreaker accepted")
		}
	}
}

// shardStore fails for one identity (its shard is down) and answers for
// the others, like a Redis Cluster with one master lost.
type shardStore struct {
	mem  *store.Memory
	dead string
}

func (s *shardStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	for _, k := range req.Keys {
		if k == s.dead {
			return ratelimit.Decision{}, errors.New("i/o timeout")
		}
	}
	return s.mem.Take(ctx, req)
}

// TestCircuitBreakerPartialOutage: a burst of failures for identities on a
// dead shard does not open the circuit while the store keeps answering for
// others within the cooldown; a total outage still opens it.
func TestCircuitBreakerPartialOutage(t *testing.T) {
	ss := &shardStore{mem: store.NewMemory(), dead: "ip:203.0.113.66"}
	clk := newTestClock()
	lim := newLimiter(t, ss, ratelimit.MustParsePolicy("100/h"), ratelimit.WithFailureMode(ratelimit.FailClosed))
	ratelimit.SetLogClock(lim, clk.Now)
	srv := lim.Handler(okHandler)
	serve := func(remote string) int {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, getFrom(remote))
		return w.Code
	}
	if code := serve(ipA); code != http.StatusOK {
		t.Fatalf("healthy identity: %d", code)
	}
	for i := 0; i < 20; i++ { // a burst on the dead shard, within the cooldown of that success
		clk.Advance(10 * time.Millisecond)
		if code := serve("203.0.113.66:1"); code != http.StatusServiceUnavailable {
			t.Fatalf("dead shard request %d: %d, want 503", i, code)
		}
	}
	if code := serve(ipA); code != http.StatusOK {
		t.Fatalf("healthy identity after a burst on the dead shard: %d, want 200 (circuit must stay closed)", code)
	}
	// Total outage: failures alone, for a whole cooldown, open it.
	for i := 0; i < ratelimit.DefaultCircuitFailures; i++ {
		serve("203.0.113.66:1")
		clk.Advance(ratelimit.DefaultCircuitCooldown / (ratelimit.DefaultCircuitFailures - 1))
	}
	if code := serve("203.0.113.66:1"); code != http.StatusServiceUnavailable {
		t.Fatalf("dead shard: %d", code)
	}
	ss.dead = "" // even a healthy store is not asked while the circuit is open
	ss.mem = nil
	if code := serve(ipA); code != http.StatusServiceUnavailable {
		t.Fatalf("after a cooldown without success and %d failures: %d, want 503 from the open circuit", ratelimit.DefaultCircuitFailures, code)
	}
}

// invalidStore answers every call with ErrInvalidRequest, as a store does
// for a malformed Request.
type invalidStore struct{ calls atomic.Int64 }

func (s *invalidStore) Take(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	return ratelimit.Decision{}, fmt.Errorf("store: %w: bad", ratelimit.ErrInvalidRequest)
}

// TestInvalidRequestNotAnOutage: a caller's bug (ErrInvalidRequest) never
// opens the circuit nor goes to the fallback, and AllowN rejects more than
// MaxKeys keys before asking the store.
func TestInvalidRequestNotAnOutage(t *testing.T) {
	st := &invalidStore{}
	fallback := &flakyStore{mem: store.NewMemory()}
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("5/h"), ratelimit.WithFallback(fallback), ratelimit.WithCircuitBreaker(2, time.Nanosecond))
	for i := 0; i < 10; i++ {
		if _, err := lim.Allow(context.Background(), "k"); !errors.Is(err, ratelimit.ErrInvalidRequest) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if st.calls.Load() != 10 || fallback.calls.Load() != 0 {
		t.Fatalf("store calls %d (want 10: the circuit never opened), fallback calls %d (want 0)", st.calls.Load(), fallback.calls.Load())
	}
	keys := make([]string, ratelimit.MaxKeys+1)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	if d, err := lim.Allow(context.Background(), keys...); err == nil || d.Allowed || st.calls.Load() != 10 {
		t.Fatalf("AllowN with %d keys: %+v, %v; want an error before the store", len(keys), d, err)
	}
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
