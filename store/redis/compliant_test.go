package redis

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/testkit/clientsim"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
)

// TestRealCompliantClient runs the root package's TestCompliantClient
// scenarios (a client that honours Retry-After gets the rate it was
// promised; no window admits more than its Rate) through Limiter.Handler on
// a real Redis, the scripts reading the test's clock instead of TIME.
// Without RATELIMIT_FULL=1 it runs every other scenario (the second, the
// fourth, ...): those TestCompliantClient leaves out on miniredis.
func TestRealCompliantClient(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	for i, sc := range clientsim.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			if i%2 == 0 {
				testmode.SkipUnlessFull(t)
			}
			clk := &clock{t: t0}
			st, err := New(client, WithClock(clk.Now), WithPrefix("compliant"+string(rune('a'+i))+":"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := sc.Check(st, func(d time.Duration) { clk.Set(clk.Now().Add(d)) })
			t.Logf("%s %q: %v", sc.Name, sc.Policy, out)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
