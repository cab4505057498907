package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
)

// lastExactDay is a day shortly before the stores' times stop being exact
// in Redis Lua's doubles (see ratelimit.MaxSpan): 2^53 − 2.25 × 2^50 µs.
var lastExactDay = time.UnixMicro(1<<53 - 9<<48 + 1).Add(-24 * time.Hour) // odd: no sum rounds to an even double by luck

// TestExactUntilMaxSpanDate replays the policies that reach furthest
// ahead of the clock (a token bucket and a log whose burst or wait is
// about MaxSpan, a penalty of MaxSpan, reservations of up to MaxSpan) on
// the day before the bound runs out, through the memory store (int64)
// and the Redis store (doubles): every decision must be identical, so no
// sum of times lost precision in the scripts.
func TestExactUntilMaxSpanDate(t *testing.T) {
	at := lastExactDay.Sub(t0)
	span := ratelimit.MaxSpan
	year := 366 * 24 * time.Hour
	policies := []*ratelimit.Policy{
		ratelimit.MustParsePolicy("1/366d", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(35), ratelimit.Named("far-tb")),
		ratelimit.MustParsePolicy("2/366d", ratelimit.WithAlgorithm(ratelimit.SlidingLog), ratelimit.Named("far-log")),
		ratelimit.MustParsePolicy("1/366d", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(35), ratelimit.BlockFor(span), ratelimit.Named("far-block")),
	}
	trace := []step{
		{at: at, keys: []string{"k"}, cost: 35},
		{at: at + time.Microsecond, keys: []string{"k"}, cost: 1},
		{at: at + 2*time.Microsecond, keys: []string{"k"}, cost: 1, op: opReserve, maxDelay: span},
		{at: at + 3*time.Microsecond, keys: []string{"k"}, cost: 34, op: opReserve, maxDelay: span},
		{at: at + 4*time.Microsecond, keys: []string{"k"}, cost: 0},
		{at: at + 5*time.Microsecond, op: opRefund, ref: 3},
		{at: at + 6*time.Microsecond, keys: []string{"k"}, cost: 0},
		{at: at + year - time.Microsecond, keys: []string{"k"}, cost: 1},
		{at: at + year, keys: []string{"k"}, cost: 1},
		{at: at + 2*year, keys: []string{"k"}, cost: 2, op: opUpTo},
	}
	mr := miniredis.RunT(t)
	mini := replayClient(t, mr.Addr())
	clients := map[string]func(time.Time){"miniredis": func(at time.Time) { mr.SetTime(at) }}
	for i, p := range policies {
		for name, setTime := range clients {
			t.Run(fmt.Sprintf("%s/%s", name, p.Name()), func(t *testing.T) {
				var clk clock
				rs, err := NewRedis(mini, WithPrefix(fmt.Sprintf("far%d:", i)))
				if err != nil {
					t.Fatal(err)
				}
				replay(t, i, p, trace, rs, &clk, setTime)
			})
		}
		if realRedis() {
			t.Run("real/"+p.Name(), func(t *testing.T) {
				var clk clock
				rs, err := NewRedis(replayClient(t, redistest.StartServer(t).Addr), withClock(clk.Now))
				if err != nil {
					t.Fatal(err)
				}
				replay(t, i, p, trace, rs, &clk, func(time.Time) {})
			})
		}
	}
}
