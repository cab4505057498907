package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/faultproxy"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// TestRealSlowRedis puts a proxy between go-redis and redis-server:
// (a) latency under the timeout limits normally; (b) a stalled Redis
// costs each request at most the timeout, and once the circuit opens,
// nothing; (c) when the stall ends, limiting resumes with the first probe,
// one cooldown later; (d) dropped connections are replaced without losing
// limiting. The circuit's cooldowns run on a clock the test moves, so
// probes are counted, not timed; requests that must be decided by Redis
// go through a Limiter whose timeout no scheduling delay reaches, so that
// a loaded machine cannot turn them into failures.
func TestRealSlowRedis(t *testing.T) {
	const (
		timeout  = 300 * time.Millisecond // the circuit's Limiter: a stall costs a request this much
		patience = 5 * time.Second        // the Limiter that must get Redis's answers
		failures = 5
		cooldown = 200 * time.Millisecond
	)
	srv := redistest.StartServer(t)
	px := faultproxy.New(t, srv.Addr)
	client := redis.NewClient(&redis.Options{
		Addr:                  px.Addr(),
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
	})
	t.Cleanup(func() { _ = client.Close() })
	p := ratelimit.MustParsePolicy("3/h", ratelimit.Named("slow"))
	var errs, calmErrs outageErrCounter
	lim := outageLimiter(t, client, p, timeout, &errs,
		ratelimit.WithCircuitBreaker(failures, cooldown), ratelimit.WithFailureMode(ratelimit.FailClosed))
	bclk := newTestClock() // the circuit's clock
	ratelimit.SetLogClock(lim, bclk.Now)
	calm := outageLimiter(t, client, p, patience, &calmErrs, ratelimit.WithCircuitBreaker(0, 0), ratelimit.WithFailureMode(ratelimit.FailClosed))
	serveOn := func(l *ratelimit.Limiter, budget time.Duration, ip string) *httptest.ResponseRecorder {
		t.Helper()
		w, took := timedServe(l.Handler(okHandler), outageGet(ip))
		if guard := budget + outageHangSlack; took > guard {
			t.Errorf("request from %s took %v, over the guard %v", ip, took, guard)
		}
		return w
	}
	serve := func(ip string) *httptest.ResponseRecorder { return serveOn(lim, timeout, ip) }
	decided := func(ip string) *httptest.ResponseRecorder { return serveOn(calm, patience, ip) }
	quota := func(what, ip string) {
		t.Helper()
		var codes []int
		for range 4 {
			w := decided(ip)
			if !outageHasLimitHeaders(w) {
				t.Errorf("%s: %s: status %d without rate-limit headers", what, ip, w.Code)
			}
			codes = append(codes, w.Code)
		}
		if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
			t.Errorf("%s: %s on 3/h: %v, want %v", what, ip, codes, want)
		}
	}

	// Warm up without latency: a connection in the pool, the script loaded.
	if w := decided("10.1.0.1"); w.Code != http.StatusOK || !outageHasLimitHeaders(w) {
		t.Fatalf("warm-up: status %d, headers %v", w.Code, w.Header())
	}

	t.Run("latency under the timeout", func(t *testing.T) {
		const latency = 5 * time.Millisecond
		px.SetLatency(latency)
		defer px.SetLatency(0)
		for i := range 3 {
			quota("latency", fmt.Sprintf("10.1.1.%d", i+1))
		}
		if n := calmErrs.total(); n != 0 {
			t.Errorf("%d store errors with a latency of %v each way and a timeout of %v", n, latency, patience)
		}
	})

	t.Run("stall", func(t *testing.T) {
		px.Stall(true)
		// Every request fails closed: the first ones asking the store and
		// waiting out the timeout, until failures of them opened the
		// circuit; then none asks it until a cooldown has passed, when one
		// probe does.
		for i := range failures + 3 {
			skips, fails := errs.skipped.Load(), errs.failed.Load()
			w := serve(fmt.Sprintf("10.1.2.%d", i+1))
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || outageHasLimitHeaders(w) {
				t.Errorf("request %d during the stall: status %d, headers %v; want 503, Retry-After: 1", i, w.Code, w.Header())
			}
			asked, skipped := errs.failed.Load()-fails, errs.skipped.Load()-skips
			wantAsked := int64(0) // the circuit opened
			if i < failures {
				wantAsked = 1
			}
			if asked != wantAsked || asked+skipped != 1 {
				t.Fatalf("request %d of the stall: the store asked %d times, skipped %d; want asked %d", i, asked, skipped, wantAsked)
			}
		}
		for probe := range 2 {
			bclk.Advance(cooldown)
			for i := range 3 {
				fails := errs.failed.Load()
				serve(fmt.Sprintf("10.1.2.%d", 100+3*probe+i))
				want := int64(0) // one probe a cooldown: the first request's
				if i == 0 {
					want = 1
				}
				if asked := errs.failed.Load() - fails; asked != want {
					t.Fatalf("cooldown %d, request %d: the store was asked %d times, want %d", probe+1, i, asked, want)
				}
			}
		}
	})

	t.Run("recovery", func(t *testing.T) {
		px.Stall(false)
		// The circuit is still open: until the next cooldown, nothing asks.
		if w := serve("10.1.3.1"); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("right after the stall, before a cooldown: status %d, want 503 (the circuit is open)", w.Code)
		}
		// A cooldown later, one probe asks Redis, which answers: limiting
		// resumes. The probe's call has the timeout of lim (300ms); a run
		// so loaded that it misses it tries at the next cooldown.
		resumedAt := -1
		for probe := 0; probe < 20 && resumedAt < 0; probe++ {
			bclk.Advance(cooldown)
			if w := serve(fmt.Sprintf("10.1.3.%d", probe+2)); outageHasLimitHeaders(w) {
				resumedAt = probe + 1
			}
		}
		if resumedAt < 0 {
			t.Fatal("limiting did not resume within 20 cooldowns of the end of the stall")
		}
		t.Logf("limiting resumed with the probe of cooldown %d after the stall", resumedAt)
		quota("after recovery", "10.1.4.1")
	})

	t.Run("dropped connections", func(t *testing.T) {
		before := calmErrs.total()
		px.Drop()
		quota("after a connection reset (go-redis reconnects)", "10.1.5.1")
		t.Logf("after dropping %d connections: store errors %d", px.Dropped(), calmErrs.total()-before)
	})
}
