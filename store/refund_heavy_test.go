package store

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestRefundHeavyTraces: random traces where a third of the operations
// refund an earlier charge (of any age, in any order), for every
// algorithm: what remains charged must keep every guarantee, checked by
// brute force after each admission. (A token-bucket refund bound that held
// for one refund failed here once refunds interleaved: a refund then takes
// back nothing of a token-bucket charge when another came between.)
func TestRefundHeavyTraces(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			refunds := 0
			for seed := uint64(0); seed < 1500; seed++ {
				rng := rand.New(rand.NewPCG(seed, uint64(alg)))
				var clk clock
				m := NewMemory(WithClock(clk.Now))
				policy := []string{"3/s", "3/s, 5/2s"}[seed%2]
				p := ratelimit.MustParsePolicy(policy, ratelimit.WithAlgorithm(alg), ratelimit.Named("heavy"))
				at := int64(0)
				type charge struct {
					r  ratelimit.Receipt
					ev int // index in ev
				}
				var live []charge
				var ev []event
				for i := 0; i < 60; i++ {
					at += rng.Int64N(200000)
					clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
					if rng.IntN(3) == 0 && len(live) > 0 {
						j := rng.IntN(len(live))
						if err := m.Refund(ctx, live[j].r); err != nil {
							t.Fatal(err)
						}
						ev[live[j].ev].cost = 0
						live = slices.Delete(live, j, j+1)
						refunds++
						continue
					}
					d, err := m.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1 + int64(rng.IntN(4)/3)})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						ev = append(ev, event{at, d.Granted})
						live = append(live, charge{d.Receipt, len(ev) - 1})
						checkAdmissions(t, p, ev, int(seed), i)
					}
				}
			}
			if refunds == 0 {
				t.Fatal("no refunds")
			}
		})
	}
}
