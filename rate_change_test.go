package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// TestRateChangeKeepsCounters: Limiters of one policy name and different
// rates share an identity's counters, through the Limiter's API, on the
// memory store, miniredis and a real Redis: after 10 of "api" 10/m, 20/m
// admits exactly 10 more that minute; after 15 of 20/m, 10/m admits none
// until the window frees (the same of a token bucket); two Limiters of
// 10/m and 12/m taking turns on one identity admit at most 12 in any
// minute.
func TestRateChangeKeepsCounters(t *testing.T) {
	type backend struct {
		name string
		make func(t *testing.T) (ratelimit.Store, *testClock)
	}
	backends := []backend{
		{"memory", func(t *testing.T) (ratelimit.Store, *testClock) {
			s, clk := memoryStore()
			return s, clk
		}},
		{"miniredis", func(t *testing.T) (ratelimit.Store, *testClock) {
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { c.Close() })
			return redisOnClock(t, c)
		}},
	}
	if realRedisAvailable() {
		backends = append(backends, backend{"real Redis", func(t *testing.T) (ratelimit.Store, *testClock) {
			srv := redistest.StartServer(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { c.Close() })
			return redisOnClock(t, c)
		}})
	} else {
		t.Log("real Redis: not run (no redis-server on PATH)")
	}
	ctx := context.Background()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st, clk := b.make(t)
			limiter := func(policy string, opts ...ratelimit.PolicyOption) *ratelimit.Limiter {
				// patient: under a loaded run a store call past the default
				// timeout would be decided by the fallback, on counters of its own.
				l, err := ratelimit.New(st, ratelimit.MustParsePolicy(policy, append(opts, ratelimit.Named("api"))...), patient)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			admits := func(l *ratelimit.Limiter, key string, n int) int {
				got := 0
				for i := 0; i < n; i++ {
					d, err := l.Allow(ctx, key)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						got++
					}
				}
				return got
			}
			ten, twenty, twelve := limiter("10/m"), limiter("20/m"), limiter("12/m")
			token := ratelimit.WithAlgorithm(ratelimit.TokenBucket)
			tbTen, tbTwenty := limiter("10/m", token), limiter("20/m", token)
			for i, c := range []struct {
				first     *ratelimit.Limiter
				used      int
				then      *ratelimit.Limiter
				more      int
				afterFree int // admitted by then once the minute has passed
			}{
				{ten, 10, twenty, 10, 20},
				{twenty, 15, ten, 0, 10},
				// A token bucket (burst = rate): the debt drains at the rate
				// that last charged it, 20/m in both, so a minute clears it.
				{tbTen, 10, tbTwenty, 10, 20},
				{tbTwenty, 15, tbTen, 0, 10},
			} {
				key := "tenant-" + string(rune('a'+i))
				if got := admits(c.first, key, c.used); got != c.used {
					t.Fatalf("step %d: %d of the first %d admitted", i, got, c.used)
				}
				if got := admits(c.then, key, 30); got != c.more {
					t.Errorf("step %d: after %d charges, the other rate admitted %d more, want %d", i, c.used, got, c.more)
				}
				clk.Advance(time.Minute)
				if got := admits(c.then, key, 30); got != c.afterFree {
					t.Errorf("step %d: once the minute passed, %d admitted, want %d", i, got, c.afterFree)
				}
			}
			// Two rates taking turns, at random moments over five minutes.
			rng := rand.New(rand.NewPCG(1, 2))
			var at []time.Duration
			var now time.Duration
			for i := 0; i < 400; i++ {
				d := time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
				clk.Advance(d)
				now += d
				l := ten
				if i%2 == 1 {
					l = twelve
				}
				if admits(l, "tenant-z", 1) == 1 {
					at = append(at, now)
				}
			}
			worst := 0
			for i := range at {
				n := 0
				for j := i; j < len(at) && at[j] < at[i]+time.Minute; j++ {
					n++
				}
				worst = max(worst, n)
			}
			if worst != 12 {
				t.Fatalf("two Limiters of 10/m and 12/m admitted up to %d within a minute, want exactly 12 (the larger rate, reached)", worst)
			}
		})
	}
}

// redisOnClock is a Redis store that reads a controlled clock instead of
// Redis TIME.
func redisOnClock(t *testing.T, c redis.UniversalClient) (ratelimit.Store, *testClock) {
	t.Helper()
	clk := newTestClock()
	s, err := rlredis.New(c, rlredis.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}
