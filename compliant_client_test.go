package ratelimit_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/clientsim"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestCompliantClient: a client that bursts and, after every 429, waits
// exactly the whole seconds of Retry-After gets the rate its policy states
// (10/s: at least 95%, told "Retry-After: 1" and t=1; the example's
// "10/s, 120/m, 240/h": 114 or more of the first 12 s's 120; 120/m: at
// least 95%, told 60), a client pacing itself at 95ms on 10/s gets at least
// 95 of the 100 an exact window admits in 10 s, and no window of any
// limit's Period admits more than its Rate. Through Limiter.Handler, on the
// memory store and on miniredis (the Redis store's scripts), both on a
// controlled clock; store.TestRealCompliantClient runs the same on a real
// Redis. Without RATELIMIT_FULL=1, miniredis runs every other scenario (the
// first, the third, ...) and the real Redis the others: the memory store
// runs them all, and the conformance suite holds the scripts to its
// decisions.
func TestCompliantClient(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) (ratelimit.Store, func(time.Duration))
	}{
		{"memory", func(t *testing.T) (ratelimit.Store, func(time.Duration)) {
			clk := newTestClock()
			return store.NewMemory(store.WithClock(clk.Now)), clk.Advance
		}},
		{"miniredis", func(t *testing.T) (ratelimit.Store, func(time.Duration)) {
			m := miniredis.RunT(t)
			now := clockStart
			m.SetTime(now)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { client.Close() })
			st, err := store.NewRedis(client)
			if err != nil {
				t.Fatal(err)
			}
			return st, func(d time.Duration) {
				now = now.Add(d)
				m.SetTime(now)   // the scripts' TIME
				m.FastForward(d) // and the keys' expiry
			}
		}},
	}
	for _, s := range stores {
		for i, sc := range clientsim.Scenarios() {
			t.Run(s.name+"/"+sc.Name, func(t *testing.T) {
				if s.name == "miniredis" && i%2 == 1 {
					testmode.SkipUnlessFull(t)
				}
				st, advance := s.open(t)
				out, err := sc.Check(st, advance)
				t.Logf("%s %q: %v", sc.Name, sc.Policy, out)
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
