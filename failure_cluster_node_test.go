package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// TestClusterNodeLoss kills one master of a 3-master Redis Cluster. An
// identity whose key lives on the dead master gets the failure mode within
// the budget; an identity on a live master keeps being limited by Redis,
// as before.
func TestClusterNodeLoss(t *testing.T) {
	const timeout = 100 * time.Millisecond
	cl := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 cl.Addrs,
		ContextTimeoutEnabled: true,
		DialTimeout:           100 * time.Millisecond,
	})
	t.Cleanup(func() { _ = cc.Close() })
	p := ratelimit.MustParsePolicy("3/h", ratelimit.Named("nodeloss"))
	var errs outageErrCounter
	lim := outageLimiter(t, cc, p, timeout, &errs, ratelimit.WithFailureMode(ratelimit.FailClosed))
	h := lim.Handler(okHandler)
	guard := timeout + outageHangSlack

	// The key the store builds: prefix, the identifier as the hash tag (only
	// [A-Za-z0-9.:], so nothing is escaped), the policy's ID.
	keyOf := func(ip string) string { return "rl:{ip:" + ip + "}:" + p.ID() }
	ipOn := map[int]string{}
	for i := 0; i < 4096 && (ipOn[0] == "" || ipOn[1] == ""); i++ {
		ip := fmt.Sprintf("10.20.%d.%d", i/250, i%250+1)
		if n := cl.NodeForKey(keyOf(ip)); ipOn[n] == "" {
			ipOn[n] = ip
		}
	}
	if ipOn[0] == "" || ipOn[1] == "" {
		t.Fatalf("no identity found on masters 0 and 1: %v", ipOn)
	}
	dead, alive := ipOn[0], ipOn[1]

	for _, ip := range []string{dead, alive} {
		var codes []int
		for range 4 {
			w, _ := timedServe(h, outageGet(ip))
			codes = append(codes, w.Code)
		}
		if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
			t.Fatalf("%s on 3/h before the kill: %v, want %v", ip, codes, want)
		}
	}
	// The keys are where NodeForKey says: the test's key matches the store's.
	for node, ip := range map[int]string{0: dead, 1: alive} {
		c := redis.NewClient(&redis.Options{Addr: cl.Addrs[node]})
		n, err := c.Exists(context.Background(), keyOf(ip)).Result()
		_ = c.Close()
		if err != nil || n != 1 {
			t.Fatalf("EXISTS %s on master %d = %d, %v; want 1", keyOf(ip), node, n, err)
		}
	}
	t.Logf("identity %s lives on master 0 (%s), %s on master 1 (%s)", dead, cl.Addrs[0], alive, cl.Addrs[1])

	cl.Kill(t, 0)

	check := func(t *testing.T, rounds, deadBurst int) {
		var deadLats, aliveLats []time.Duration
		for r := 0; r < rounds; r++ {
			for range deadBurst {
				w, took := timedServe(h, outageGet(dead))
				deadLats = append(deadLats, took)
				if w.Code != http.StatusServiceUnavailable || outageHasLimitHeaders(w) {
					t.Errorf("identity on the dead master: status %d, headers %v; want 503 (fail closed)", w.Code, w.Header())
				}
				if took > guard {
					t.Errorf("identity on the dead master answered after %v, over the guard %v", took, guard)
				}
			}
			skips := errs.skipped.Load()
			w, took := timedServe(h, outageGet(alive))
			aliveLats = append(aliveLats, took)
			if w.Code != http.StatusTooManyRequests || !outageHasLimitHeaders(w) {
				why := ""
				if errs.skipped.Load() > skips {
					why = " (ErrCircuitOpen: the Limiter's one circuit breaker, opened by the dead master's failures, skipped the store for every identity)"
				}
				t.Errorf("round %d: identity on the live master: status %d%s; want 429 with rate-limit headers: another master's failure must not affect it",
					r, w.Code, why)
			}
			if took > guard {
				t.Errorf("identity on the live master answered after %v, over the guard %v", took, guard)
			}
		}
		t.Logf("dead master's identity: %d requests, latency p50 %v, max %v; live master's identity: %d requests, p50 %v, max %v; store errors %d, circuit skips %d so far",
			len(deadLats), percentile(deadLats, 0.5), percentile(deadLats, 1),
			len(aliveLats), percentile(aliveLats, 0.5), percentile(aliveLats, 1), errs.failed.Load(), errs.skipped.Load())
	}
	// Alternating: the dead master's failures never come
	// DefaultCircuitFailures in a row, so the circuit stays closed.
	t.Run("alternating", func(t *testing.T) { check(t, 8, 1) })
	// A client retrying its 503s: more failures in a row than the circuit
	// breaker's threshold, all for the dead master's slots.
	t.Run("burst on the dead master", func(t *testing.T) { check(t, 3, ratelimit.DefaultCircuitFailures+1) })
}
