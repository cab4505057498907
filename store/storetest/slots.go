package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// Slots replays random traces of requests under policies with a
// Concurrent limit through h's store, by brute force over every holder:
// takes, partial grants and peeks of costs up to 2 on one to three keys,
// releases and renewals of earlier charges, refunds and settles of them
// (which leave their slots held), the clock moving by parts of a lease
// and by whole ones; every other trace changes the definition back and
// forth (other rates and slots, the same counters), each step held to its
// own policy's slots. A request is in flight from its admission until its
// release, and counted as long as it was admitted or renewed within the
// last half lease (a live holder is: the Handler renews every quarter
// lease).
// Every admission must leave at most the limit's slots in flight on each
// of its keys. Every denial by the Concurrent limit (Decision.InFlight)
// must find a key whose slots are all held by what the store still
// counts: charges neither released nor lapsed (recorded, at admission or
// renewal, in the epoch of the call or the one before).
func Slots(t *testing.T, h Harness) {
	ctx := context.Background()
	var clk clock
	if !capsOf(h.store(t, &clk)).slots {
		t.Log("not run: the store does not release slots (storekit.Releaser)")
		return
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg)+31, 5))
			var nAdmitted, nInFlight, nReleased, nRenewed, nOther int
			for n := range h.traces(t) {
				base := randomPolicy(rng, alg)
				if base.BlockFor() > 0 {
					var err error
					if base, err = base.With(ratelimit.BlockFor(0)); err != nil {
						t.Fatal(err)
					}
				}
				p := withSlots(rng, base)
				slotsOf := func(p *ratelimit.Policy) (slots, lease int64) {
					for _, l := range p.Limits() {
						if l.Concurrent {
							slots, lease = l.Rate, l.Period.Microseconds()
						}
					}
					return slots, lease
				}
				_, lease := slotsOf(p)
				half := lease / 2 // an epoch
				// Every other trace changes the definition back and forth, the
				// number of slots too, on the same counters (rerated).
				alt, on := p, false
				if q := rerated(rng, p); n%2 == 1 && q.ID() == p.ID() {
					alt = q
				}
				s, clk := h.start(t)
				caps := capsOf(s)
				type holder struct {
					keys []string
					last int64 // µs since t0: admitted or renewed
					r    ratelimit.Receipt
					done bool // released
				}
				var held []*holder
				epoch := func(at int64) int64 { return (t0.UnixMicro() + at) / half }
				inFlight := func(k string, at int64, counted func(*holder) bool) int64 {
					c := int64(0)
					for _, x := range held {
						if x.done || !counted(x) {
							continue
						}
						for _, xk := range x.keys {
							if xk == k {
								c++
							}
						}
					}
					return c
				}
				keys := []string{"a", "b", "c"}
				at := int64(0)
				for i := 0; i < 40; i++ {
					switch rng.IntN(3) {
					case 0:
						at += rng.Int64N(lease/2 + 1)
					case 1:
						at += lease
					}
					clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
					if rng.IntN(4) == 0 {
						on = !on
					}
					p := p
					if on {
						p = alt
					}
					slots, _ := slotsOf(p)
					r := rng.IntN(12)
					if r < 5 && len(held) > 0 {
						x := held[rng.IntN(len(held))]
						if x.done {
							continue
						}
						if r == 4 {
							// A refund, or a settle below or above the cost,
							// leaves the slots held.
							var err error
							if rng.IntN(2) == 0 && caps.refund {
								err = s.(storekit.Refunder).Refund(ctx, x.r)
							} else if caps.settle {
								err = s.(storekit.Settler).Settle(ctx, x.r, settleCost(rng))
							}
							if err != nil {
								t.Fatal(err)
							}
							nOther++
							continue
						}
						if r < 2 {
							if err := s.(storekit.Releaser).Release(ctx, x.r); err != nil {
								t.Fatal(err)
							}
							x.done = true
							nReleased++
							continue
						}
						nr, err := s.(storekit.Releaser).Renew(ctx, x.r)
						if err != nil {
							t.Fatal(err)
						}
						x.r, x.last = nr, at
						nRenewed++
						continue
					}
					ks := keys[:1+rng.IntN(len(keys))]
					if h.OneKey {
						ks = ks[:1]
					}
					ks = append([]string(nil), ks...)
					rng.Shuffle(len(ks), func(a, b int) { ks[a], ks[b] = ks[b], ks[a] })
					req := ratelimit.Request{Policy: p, Keys: ks, Cost: int64(rng.IntN(3))}
					var d ratelimit.Decision
					var err error
					if req.Cost > 0 && rng.IntN(4) == 0 {
						d, err = s.(storekit.Granter).TakeUpTo(ctx, req)
					} else {
						d, err = s.Take(ctx, req)
					}
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case d.Allowed && d.Receipt.Policy != nil:
						nAdmitted++
						held = append(held, &holder{keys: ks, last: at, r: d.Receipt})
						for _, k := range ks {
							if c := inFlight(k, at, func(x *holder) bool { return x.last >= at-half }); c > slots {
								t.Fatalf("trace %d step %d (%s): %d requests in flight on %q, %d slots", n, i, p, c, k, slots)
							}
						}
					case d.InFlight:
						nInFlight++
						full := false
						for _, k := range ks {
							if inFlight(k, at, func(x *holder) bool { return epoch(x.last) >= epoch(at)-1 }) >= slots {
								full = true
							}
						}
						if !full {
							t.Fatalf("trace %d step %d (%s): denied in flight on %q, though a slot was free", n, i, p, ks)
						}
					}
				}
			}
			t.Logf("%s: %d admitted, %d denied in flight, %d released, %d renewed, %d refunded or settled", alg, nAdmitted, nInFlight, nReleased, nRenewed, nOther)
			if nAdmitted == 0 || nInFlight == 0 || nReleased == 0 || nRenewed == 0 || nOther == 0 {
				t.Errorf("%s: the traces missed a kind of step", alg)
			}
		})
	}
}
