package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// settleBackends are the stores the settle and concurrency tests run on,
// each on a controlled clock: memory, miniredis and, when there is a
// redis-server, a real Redis and a local 3-master Cluster (started once
// for the test t, each store under a prefix of its own).
func settleBackends(t *testing.T) map[string]func(t *testing.T) (ratelimit.Store, *testClock) {
	b := map[string]func(t *testing.T) (ratelimit.Store, *testClock){
		"memory": func(t *testing.T) (ratelimit.Store, *testClock) {
			s, clk := memoryStore()
			return s, clk
		},
		"miniredis": func(t *testing.T) (ratelimit.Store, *testClock) {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { c.Close() })
			return redisOnClock(t, c)
		},
	}
	if realRedisAvailable() {
		b["real Redis"] = func(t *testing.T) (ratelimit.Store, *testClock) {
			srv := redistest.StartServer(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { c.Close() })
			return redisOnClock(t, c)
		}
		var cluster *redis.ClusterClient
		stores := 0
		b["Cluster"] = func(st *testing.T) (ratelimit.Store, *testClock) {
			if cluster == nil {
				cluster = redistest.StartCluster(t, 3).Client(t)
			}
			stores++
			clk := newTestClock()
			s, err := rlredis.New(cluster, rlredis.WithClock(clk.Now), rlredis.WithPrefix(fmt.Sprintf("rl%d:", stores)))
			if err != nil {
				st.Fatal(err)
			}
			return s, clk
		}
	} else {
		t.Log("real Redis: not run (no redis-server on PATH)")
	}
	return b
}

// patient gives a Limiter's store calls 10 s: these tests check what the
// stores decide, and under a loaded -race run a call to miniredis can take
// longer than the default 100ms, which would hand it to the fallback.
var patient = ratelimit.WithTimeout(10 * time.Second)

// TestSettleChargesTheDifference: a charge settled above its cost owes the
// difference (debt: denied, with a Retry-After that waiting exactly
// admits), below it gives the difference back, and the stores agree, for
// a window, a log and a token bucket.
func TestSettleChargesTheDifference(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		policy   string
		opts     []ratelimit.PolicyOption
		cost     int64 // charged up front, at the start
		actual   int64 // settled to, one second later
		then     int64 // the cost asked right after the settle
		admitted bool  // whether it is admitted
		retry    time.Duration
	}{
		{"window debt", "10/m", nil, 2, 15, 1, false, time.Minute},
		{"window debt far past the rate", "10/m", nil, 2, 1 << 30, 1, false, time.Minute},
		{"window give back", "10/m", nil, 8, 3, 7, true, 0},
		{"window settle to 0", "10/m", nil, 10, 0, 10, true, 0},
		{"sub-buckets debt", "100/m", nil, 50, 130, 1, false, time.Minute}, // one sub-bucket holds both, its latest admission the debt
		{"log debt", "5/m", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingLog)}, 1, 9, 1, false, time.Minute},
		{"fixed debt", "10/m", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.FixedWindow)}, 1, 12, 1, false, 59 * time.Second},
		// 10/s, burst 10: a TAT of +0.1s, drained by +1s, then +3.4s after
		// 24 tokens of debt; one more fits when it is 0.9s ahead: at +2.5s.
		{"token debt", "10/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket)}, 1, 25, 1, false, 1500 * time.Millisecond},
		{"token give back", "10/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket)}, 10, 4, 6, true, 0},
	}
	for name, mk := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			for i, c := range cases {
				st, clk := mk(t)
				pol := ratelimit.MustParsePolicy(c.policy, append(c.opts, ratelimit.Named("s"+strings.ReplaceAll(c.name, " ", "_")))...)
				lim := newLimiter(t, st, pol, patient)
				d, err := lim.AllowN(ctx, c.cost, "k")
				if err != nil || !d.Allowed {
					t.Fatalf("step %d (%s): up-front charge: %+v %v", i, c.name, d, err)
				}
				clk.Advance(time.Second)
				if err := lim.Settle(ctx, d, c.actual); err != nil {
					t.Fatalf("step %d (%s): settle: %v", i, c.name, err)
				}
				got, err := lim.AllowN(ctx, 0, "k") // a peek: what the limit says now
				if err != nil {
					t.Fatal(err)
				}
				if got.Remaining < 0 {
					t.Fatalf("step %d (%s): Remaining %d", i, c.name, got.Remaining)
				}
				got, err = lim.AllowN(ctx, c.then, "k")
				if err != nil {
					t.Fatal(err)
				}
				if got.Allowed != c.admitted || got.RetryAfter != c.retry {
					t.Fatalf("step %d (%s): cost %d after settling %d to %d: allowed %v, RetryAfter %s; want %v, %s",
						i, c.name, c.then, c.cost, c.actual, got.Allowed, got.RetryAfter, c.admitted, c.retry)
				}
				if c.admitted {
					continue
				}
				if got.Remaining != 0 {
					t.Fatalf("step %d (%s): a debt reports Remaining %d, want 0", i, c.name, got.Remaining)
				}
				// Waiting exactly RetryAfter admits; a microsecond less does not.
				clk.Advance(got.RetryAfter - time.Microsecond)
				if d, _ := lim.AllowN(ctx, c.then, "k"); d.Allowed {
					t.Fatalf("step %d (%s): admitted 1µs before RetryAfter", i, c.name)
				}
				clk.Advance(time.Microsecond)
				if d, _ := lim.AllowN(ctx, c.then, "k"); !d.Allowed {
					t.Fatalf("step %d (%s): denied after RetryAfter: %+v", i, c.name, d)
				}
			}
		})
	}
}

// TestSettleOnce: a charge is settled at most once, and a settled charge
// is not refunded; a Decision that charged nothing settles to nothing;
// bad costs are refused; a Reset forgets a debt.
func TestSettleOnce(t *testing.T) {
	ctx := context.Background()
	for name, mk := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			st, _ := mk(t)
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("10/h", ratelimit.Named("once")), patient)
			remaining := func(step int, want int64) {
				t.Helper()
				d, err := lim.AllowN(ctx, 0, "k")
				if err != nil || d.Remaining != want {
					t.Fatalf("step %d: Remaining %d (%v), want %d", step, d.Remaining, err, want)
				}
			}
			d, _ := lim.AllowN(ctx, 4, "k")
			if err := lim.Settle(ctx, d, 2); err != nil {
				t.Fatal(err)
			}
			remaining(1, 8)
			if err := lim.Settle(ctx, d, 9); !errors.Is(err, ratelimit.ErrSettled) {
				t.Fatalf("step 2: second settle: %v, want ErrSettled", err)
			}
			if err := lim.Refund(ctx, d); err != nil {
				t.Fatalf("step 3: refund after settle: %v", err)
			}
			remaining(3, 8) // neither the second settle nor the refund did anything
			d2, _ := lim.AllowN(ctx, 3, "k")
			if err := lim.Refund(ctx, d2); err != nil {
				t.Fatal(err)
			}
			if err := lim.Settle(ctx, d2, 0); !errors.Is(err, ratelimit.ErrSettled) {
				t.Fatalf("step 4: settle after refund: %v, want ErrSettled", err)
			}
			remaining(4, 8)
			denied, _ := lim.AllowN(ctx, 20, "k")
			if denied.Allowed {
				t.Fatal("step 5: cost 20 of 10/h admitted")
			}
			if err := lim.Settle(ctx, denied, 50); err != nil {
				t.Fatalf("step 5: settle of a denial: %v", err)
			}
			remaining(5, 8)
			for _, bad := range []int64{-1, ratelimit.MaxSettle + 1} {
				d3, _ := lim.AllowN(ctx, 1, "k")
				if err := lim.Settle(ctx, d3, bad); err == nil {
					t.Fatalf("step 6: settle to %d accepted", bad)
				}
				if err := lim.Refund(ctx, d3); err != nil { // the charge was not claimed
					t.Fatal(err)
				}
			}
			remaining(6, 8)
			d4, _ := lim.AllowN(ctx, 1, "k")
			if err := lim.Settle(ctx, d4, 100); err != nil {
				t.Fatal(err)
			}
			remaining(7, 0)
			if err := lim.Reset(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			remaining(8, 10)
		})
	}
}

// TestSettleGoesToTheStoreThatCharged: a charge the fallback store made
// (the store failed) is settled there.
func TestSettleGoesToTheStoreThatCharged(t *testing.T) {
	ctx := context.Background()
	fb, _ := memoryStore()
	lim := newLimiter(t, &failStore{err: errors.New("down")}, ratelimit.MustParsePolicy("10/h"), ratelimit.WithFallback(fb))
	d, err := lim.AllowN(ctx, 2, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("fallback charge: %+v %v", d, err)
	}
	if err := lim.Settle(ctx, d, 12); err != nil {
		t.Fatalf("settle on the fallback: %v", err)
	}
	if got, _ := fb.Take(ctx, ratelimit.Request{Policy: ratelimit.MustParsePolicy("10/h"), Keys: []string{"k"}}); got.Allowed || got.Remaining != 0 {
		t.Fatalf("the fallback after a debt of 2: %+v, want denied with nothing left", got)
	}
}

// TestCostAfter: the Handler settles each response to what WithCostAfter
// says of it (here its bytes): a response larger than the quota leaves the
// identity in debt, denied with 429 and a Retry-After until the window has
// room; a refund by WithRefundIf is not settled; a panicking handler keeps
// its up-front charge.
func TestCostAfter(t *testing.T) {
	for name, mk := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			st, clk := mk(t)
			body := strings.Repeat("x", 700)
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("1000/m", ratelimit.Named("bytes")), patient,
				ratelimit.WithCost(100),
				ratelimit.WithCostAfter(func(_ *http.Request, status int, written int64) int64 { return written }),
				ratelimit.WithRefundIf(func(_ *http.Request, status int) bool { return status >= 500 }))
			status := http.StatusOK
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				io.WriteString(w, body)
			}))
			serve := func() *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
				return rec
			}
			steps := []struct {
				status     int
				wantCode   int
				wantRemain string // the RateLimit header's r, as charged up front
			}{
				{200, 200, "r=900"}, // 100 up front, settled to 700
				{500, 500, "r=200"}, // refunded: not settled, charges nothing
				{200, 200, "r=200"}, // 700 + 100: settled to 1400, 400 in debt
				{200, 429, "r=0"},
			}
			for i, s := range steps {
				status = s.status
				rec := serve()
				if rec.Code != s.wantCode || !strings.Contains(rec.Header().Get("RateLimit"), s.wantRemain) {
					t.Fatalf("step %d: %d %q, want %d and %s", i, rec.Code, rec.Header().Get("RateLimit"), s.wantCode, s.wantRemain)
				}
				if s.wantCode == 429 && rec.Header().Get("Retry-After") != "60" {
					t.Fatalf("step %d: Retry-After %q, want 60 (the debt leaves with its window)", i, rec.Header().Get("Retry-After"))
				}
			}
			clk.Advance(time.Minute)
			if rec := serve(); rec.Code != 200 {
				t.Fatalf("after the window: %d", rec.Code)
			}
			// A handler that panics keeps its up-front charge, and is not settled.
			clk.Advance(time.Minute)
			ph := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, body)
				panic(http.ErrAbortHandler)
			}))
			func() {
				defer func() { _ = recover() }()
				ph.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			}()
			d, err := lim.AllowN(context.Background(), 0, "ip:192.0.2.1")
			if err != nil || d.Remaining != 900 {
				t.Fatalf("after a panic: Remaining %d (%v), want 900", d.Remaining, err)
			}
		})
	}
}
