package store

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
)

// TestRefundAfterResetGivesNothing: a charge made before a Reset, refunded
// after it, must not undo the charges made after the Reset. Under 2/h: one
// charge, a Reset, two charges (the limit again), then the first charge's
// refund; a further request must still be denied. Every algorithm, on the
// memory store and on miniredis, with the clock frozen (the worst case: the
// old charge and the new ones share one instant) and with it moving.
func TestRefundAfterResetGivesNothing(t *testing.T) {
	algs := []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.TokenBucket, ratelimit.FixedWindow,
		ratelimit.SlidingLog, ratelimit.SlidingWindowApprox}
	for _, step := range []time.Duration{0, 7 * time.Millisecond} {
		clk := &clock{t: t0}
		mr := miniredis.RunT(t)
		mr.SetTime(clk.Now())
		client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { client.Close() })
		mini, err := NewRedis(client)
		if err != nil {
			t.Fatal(err)
		}
		advance := func() {
			clk.Set(clk.Now().Add(step))
			mr.SetTime(clk.Now())
		}
		for name, s := range map[string]ratelimit.Store{"memory": NewMemory(WithClock(clk.Now)), "miniredis": mini} {
			for _, alg := range algs {
				p, err := ratelimit.NewPolicy("rr"+alg.String(), alg, ratelimit.Limit{Rate: 2, Period: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				key := "user:" + name
				ctx := context.Background()
				old := mustTake(t, s, p, 1, key)
				if !old.Allowed || old.Receipt == (ratelimit.Receipt{}) {
					t.Fatalf("%s %s: first charge %+v", name, alg, old)
				}
				advance()
				if err := s.(ratelimit.Resetter).Reset(ctx, p, key); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 2; i++ {
					advance()
					if d := mustTake(t, s, p, 1, key); !d.Allowed {
						t.Fatalf("%s %s step %s: charge %d after the Reset denied: %+v", name, alg, step, i+1, d)
					}
				}
				advance()
				if err := s.(ratelimit.Refunder).Refund(ctx, old.Receipt); err != nil {
					t.Fatal(err)
				}
				advance()
				if d := mustTake(t, s, p, 1, key); d.Allowed {
					t.Fatalf("%s %s step %s: a refund of a charge made before the Reset admitted a third request in the hour", name, alg, step)
				}
				// A refund of a charge made after the Reset still gives back.
				if err := s.(ratelimit.Resetter).Reset(ctx, p, key); err != nil {
					t.Fatal(err)
				}
				advance()
				a := mustTake(t, s, p, 1, key)
				mustTake(t, s, p, 1, key)
				if err := s.(ratelimit.Refunder).Refund(ctx, a.Receipt); err != nil {
					t.Fatal(err)
				}
				advance()
				if d := mustTake(t, s, p, 1, key); !d.Allowed {
					t.Fatalf("%s %s step %s: a refund after the Reset gave nothing back: %+v", name, alg, step, d)
				}
			}
		}
	}
}
