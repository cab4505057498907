package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestHandlerHoldsWaitsBelowASecond: by default a request denied with a
// wait below one second (which Retry-After cannot say) is held for it and
// served; a wait of a second or more, a penalty, a dry run, WithMaxDelay(0)
// and WithMaxHeld(0) answer 429 at once, as before.
func TestHandlerHoldsWaitsBelowASecond(t *testing.T) {
	tb := func(rate int64, burst int64, opts ...ratelimit.PolicyOption) *ratelimit.Policy {
		return ratelimit.MustParsePolicy(fmt.Sprintf("%d/s", rate), append([]ratelimit.PolicyOption{
			ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(burst)}, opts...)...)
	}
	const denied = http.StatusTooManyRequests
	tests := []struct {
		name   string
		policy *ratelimit.Policy
		opts   []ratelimit.Option
		status int           // of the request after the quota
		held   time.Duration // how long it was held
	}{
		{name: "a 50ms wait is held", policy: tb(20, 1), status: http.StatusOK, held: 50 * time.Millisecond},
		{name: "a policy that cannot reserve is held too: a fixed window of 10/500ms", policy: ratelimit.MustParsePolicy("10/500ms", ratelimit.WithAlgorithm(ratelimit.FixedWindow)),
			status: http.StatusOK, held: 500 * time.Millisecond},
		{name: "a wait of one second is said by Retry-After", policy: tb(1, 1), status: denied},
		{name: "a penalty is not held", policy: tb(20, 1, ratelimit.BlockFor(time.Minute)), status: denied},
		{name: "WithMaxDelay(0) turns holding off", policy: tb(20, 1), opts: []ratelimit.Option{ratelimit.WithMaxDelay(0)}, status: denied},
		{name: "WithMaxHeld(0) turns holding off", policy: tb(20, 1), opts: []ratelimit.Option{ratelimit.WithMaxHeld(0)}, status: denied},
		{name: "a dry run is served without a hold", policy: tb(20, 1), opts: []ratelimit.Option{ratelimit.WithDryRun(true)}, status: http.StatusOK},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, clk := memoryStore()
			lim := newLimiter(t, st, tc.policy, tc.opts...)
			var slept time.Duration
			ratelimit.SetSleep(lim, func(_ context.Context, d time.Duration) error {
				slept += d
				clk.Advance(d)
				return nil
			})
			srv := lim.Handler(okHandler)
			n := int(tc.policy.MaxCost())
			if per := tc.policy.Limits()[0].Period.Microseconds(); tc.policy.Algorithm() == ratelimit.FixedWindow {
				clk.Advance(time.Duration(per-clk.Now().UnixMicro()%per) * time.Microsecond) // a window's start
			}
			for k := 0; k < n; k++ {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, getFrom(ipA))
				if w.Code != http.StatusOK {
					t.Fatalf("step %d: request %d of the quota: status %d", i, k, w.Code)
				}
			}
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, getFrom(ipA))
			if w.Code != tc.status || slept != tc.held {
				t.Errorf("step %d: status %d after a hold of %v; want %d after %v", i, w.Code, slept, tc.status, tc.held)
			}
			if tc.status == denied && w.Header().Get("Retry-After") == "" {
				t.Errorf("step %d: 429 without Retry-After", i)
			}
		})
	}
}

// TestHandlerHoldsBoundedRequests: WithMaxHeld(n) holds at most n requests
// at once; the next one that would be held gets 429 at once, and once a
// held request is served, holding resumes.
func TestHandlerHoldsBoundedRequests(t *testing.T) {
	st, clk := memoryStore()
	p := ratelimit.MustParsePolicy("20/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(1))
	lim := newLimiter(t, st, p, ratelimit.WithMaxHeld(1), ratelimit.WithIdentifiers(ratelimit.ByUser(func(r *http.Request) (string, bool) {
		return r.Header.Get("X-User"), true
	})))
	asleep, wake := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	ratelimit.SetSleep(lim, func(_ context.Context, d time.Duration) error {
		asleep <- struct{}{}
		<-wake
		mu.Lock()
		clk.Advance(d)
		mu.Unlock()
		return nil
	})
	srv := lim.Handler(okHandler)
	serve := func(user string) int {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, getFrom(ipA, "X-User", user))
		return w.Code
	}
	for step, user := range []string{"a", "b"} {
		if code := serve(user); code != http.StatusOK {
			t.Fatalf("step %d: first request of %s: status %d", step, user, code)
		}
	}
	first := make(chan int)
	go func() { first <- serve("a") }() // held: its bucket refills in 50ms
	<-asleep
	if code := serve("b"); code != http.StatusTooManyRequests {
		t.Errorf("step 2: a second request to hold while one is held: status %d, want 429", code)
	}
	close(wake)
	if code := <-first; code != http.StatusOK {
		t.Errorf("step 3: the held request: status %d, want 200", code)
	}
	go func() {
		for range asleep {
		}
	}()
	if code := serve("b"); code != http.StatusOK {
		t.Errorf("step 4: once the held request left, another is held and served: status %d, want 200", code)
	}
	close(asleep)
}

// TestHandlerHoldsNoPenalty: a policy with BlockFor is never held, not
// even a microsecond before its penalty ends, with or without
// WithMaxDelay: the request gets 429 and the penalty's Retry-After.
func TestHandlerHoldsNoPenalty(t *testing.T) {
	tests := []struct {
		name string
		opts []ratelimit.Option
	}{
		{name: "default holding"},
		{name: "WithMaxDelay(2s)", opts: []ratelimit.Option{ratelimit.WithMaxDelay(2 * time.Second)}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, clk := memoryStore()
			p := ratelimit.MustParsePolicy("2/s", ratelimit.BlockFor(90*time.Second))
			lim := newLimiter(t, st, p, tc.opts...)
			slept := time.Duration(0)
			ratelimit.SetSleep(lim, func(_ context.Context, d time.Duration) error {
				slept += d
				clk.Advance(d)
				return nil
			})
			srv := lim.Handler(okHandler)
			serve := func() *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, getFrom(ipA))
				return w
			}
			for k := range 2 {
				if w := serve(); w.Code != http.StatusOK {
					t.Fatalf("step %d: request %d of the quota: status %d", i, k, w.Code)
				}
			}
			if w := serve(); w.Code != http.StatusTooManyRequests {
				t.Fatalf("step %d: the request past the quota: status %d, want 429 (the penalty starts)", i, w.Code)
			}
			clk.Advance(90*time.Second - time.Microsecond)
			w := serve()
			if w.Code != http.StatusTooManyRequests || slept != 0 {
				t.Errorf("step %d: a microsecond before the penalty ends: status %d after a hold of %v, want 429 at once", i, w.Code, slept)
			}
			if got := w.Header().Get("Retry-After"); got != "1" {
				t.Errorf("step %d: Retry-After %q, want \"1\"", i, got)
			}
		})
	}
}
