package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// The scenarios of refunds: after a reset, heavy, racing.

// refundAfterReset: a charge made before a Reset, refunded after it, must
// not undo the charges made after the Reset. Under 2/h: one charge, a
// Reset, two charges (the limit again), then the first charge's refund; a
// further request must still be denied. With the clock frozen (the worst
// case: the old charge and the new ones share one instant) and moving.
func refundAfterReset(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, step := range []time.Duration{0, 7 * time.Millisecond} {
		for _, alg := range algorithms {
			t.Run(fmt.Sprintf("%s/step%s", alg, step), func(t *testing.T) {
				s, clk := h.start(t)
				advance := func() { clk.Set(clk.Now().Add(step)) }
				p, err := ratelimit.NewPolicy("rr", alg, ratelimit.Limit{Rate: 2, Period: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				key := "user:1"
				old := mustTake(t, s, p, 1, key)
				if !old.Allowed || old.Receipt.Policy == nil {
					t.Fatalf("first charge %+v", old)
				}
				advance()
				if err := s.(storekit.Resetter).Reset(ctx, p, key); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 2; i++ {
					advance()
					if d := mustTake(t, s, p, 1, key); !d.Allowed {
						t.Fatalf("step %d: a charge after the Reset denied: %+v", i, d)
					}
				}
				advance()
				if err := s.(storekit.Refunder).Refund(ctx, old.Receipt); err != nil {
					t.Fatal(err)
				}
				advance()
				if d := mustTake(t, s, p, 1, key); d.Allowed {
					t.Fatal("a refund of a charge made before the Reset admitted a third request in the hour")
				}
				// A refund of a charge made after the Reset still gives back.
				if err := s.(storekit.Resetter).Reset(ctx, p, key); err != nil {
					t.Fatal(err)
				}
				advance()
				a := mustTake(t, s, p, 1, key)
				mustTake(t, s, p, 1, key)
				if err := s.(storekit.Refunder).Refund(ctx, a.Receipt); err != nil {
					t.Fatal(err)
				}
				advance()
				if d := mustTake(t, s, p, 1, key); !d.Allowed {
					t.Fatalf("a refund after the Reset gave nothing back: %+v", d)
				}
			})
		}
	}
}

// refundHeavy: random traces where a third of the operations refund an
// earlier charge (of any age, in any order), for every algorithm: what
// remains charged must keep every guarantee, checked by brute force after
// each admission. (A token-bucket refund bound that held for one refund
// failed here once refunds interleaved.)
func refundHeavy(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			refunds := 0
			for seed := uint64(0); seed < uint64(h.traces(t))*3/2; seed++ {
				rng := rand.New(rand.NewPCG(seed, uint64(alg)))
				s, clk := h.start(t)
				p := ratelimit.MustParsePolicy([]string{"3/s", "3/s, 5/2s"}[seed%2], ratelimit.WithAlgorithm(alg), ratelimit.Named("heavy"))
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
						if err := s.(storekit.Refunder).Refund(ctx, live[j].r); err != nil {
							t.Fatal(err)
						}
						ev[live[j].ev].cost = 0
						live = slices.Delete(live, j, j+1)
						refunds++
						continue
					}
					d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1 + int64(rng.IntN(4)/3)})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						ev = append(ev, event{at: at, cost: d.Granted})
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

// refundRaces: goroutines (64; 16 without RATELIMIT_FULL=1; 8 when
// h.Sequential) mix charges and refunds (of their own charges, and of
// others') on one key, round after round, the clock moving between
// rounds: what remains charged must keep every guarantee, checked by
// brute force over every window.
func refundRaces(t *testing.T, h Harness) {
	goroutines := testmode.Scale(64, 16)
	if h.Sequential {
		goroutines = 8
	}
	policies := map[ratelimit.Algorithm]string{
		ratelimit.SlidingWindow: "20/s, 200/m", ratelimit.FixedWindow: "20/s", ratelimit.TokenBucket: "20/s",
		ratelimit.SlidingLog: "20/s", ratelimit.SlidingWindowApprox: "20/s",
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s, clk := h.start(t)
			rf := s.(storekit.Refunder)
			p := ratelimit.MustParsePolicy(policies[alg], ratelimit.WithAlgorithm(alg), ratelimit.Named("race"))
			ctx := context.Background()
			var mu sync.Mutex
			type charge struct {
				r  ratelimit.Receipt
				ev int
			}
			var live []charge
			var ev []event
			refunds := 0
			for round := 0; round < 40; round++ {
				at := int64(round) * 37_000 // 37ms a round: windows and refills pass within the run
				clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
				var wg sync.WaitGroup
				for g := 0; g < goroutines; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						if (g+round)%3 == 2 {
							mu.Lock()
							var c charge
							ok := len(live) > 0
							if ok {
								j := (g*7 + round) % len(live)
								c = live[j]
								live = slices.Delete(live, j, j+1)
							}
							mu.Unlock()
							if ok {
								if err := rf.Refund(ctx, c.r); err != nil {
									t.Error(err)
								}
								mu.Lock()
								ev[c.ev].cost = 0
								refunds++
								mu.Unlock()
							}
							return
						}
						d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							mu.Lock()
							ev = append(ev, event{at: at, cost: 1})
							live = append(live, charge{d.Receipt, len(ev) - 1})
							mu.Unlock()
						}
					}(g)
				}
				wg.Wait()
			}
			t.Logf("%d charged, %d refunded", len(ev), refunds)
			if refunds == 0 || len(ev) == 0 {
				t.Fatal("no refunds or no charges: the race did not happen")
			}
			checkAdmissions(t, p, ev, 0, len(ev))
		})
	}
}
