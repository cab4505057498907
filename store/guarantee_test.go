package store

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// event is a request's outcome on one key: time (µs since t0) and cost.
type event struct{ at, cost int64 }

// edgeTrace hammers window and sub-bucket edges: bursts just before, at and
// just after every boundary, the adversarial case for window algorithms.
func edgeTrace(rng *rand.Rand, p *ratelimit.Policy, steps int) []step {
	_, widthUS, _, _ := p.Compiled()
	w := widthUS[rng.IntN(len(widthUS))]
	base := (t0.UnixMicro()/w + 1) * w // the first edge after t0
	out := make([]step, steps)
	for i := range out {
		edge := base + int64(i/4)*w
		at := edge + []int64{-1, 0, 0, 1}[rng.IntN(4)] - t0.UnixMicro()
		if i > 0 && time.Duration(at)*time.Microsecond < out[i-1].at {
			at = int64(out[i-1].at / time.Microsecond)
		}
		out[i] = step{at: time.Duration(at) * time.Microsecond, keys: []string{"k"}, cost: int64(1 + rng.IntN(3))}
	}
	return out
}

// TestGuarantees replays random and edge traces through the memory store
// (the reference; the equivalence tests hold Redis to it), records every
// admission, and checks each algorithm's documented guarantee over every
// interval by brute force. Each denial is checked too: it must be
// justified by cost admitted within the algorithm's counted span, and
// waiting exactly RetryAfter must be necessary and sufficient.
func TestGuarantees(t *testing.T) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg)+11, 3))
			for n := range traceCount(t) {
				p := randomPolicy(rng, alg)
				var trace []step
				if n%2 == 0 {
					trace = edgeTrace(rng, p, 40)
				} else {
					trace = randomTrace(rng, p, 40)
					for i := range trace {
						trace[i].keys = []string{"k"}
						trace[i].cost++
					}
				}
				var clk clock
				mem := NewMemory(WithClock(clk.Now))
				var admitted []event
				take := func(at, cost int64) ratelimit.Decision {
					clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
					d, err := mem.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: cost})
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						admitted = append(admitted, event{at, cost})
					}
					return d
				}
				for i, s := range trace {
					at := max(s.at.Microseconds(), lastAt(admitted))
					d := take(at, s.cost)
					if d.Allowed {
						checkAdmissions(t, p, admitted, n, i)
						continue
					}
					checkDenial(t, p, admitted, at, s.cost, n, i)
					if d.RetryAfter == ratelimit.Never {
						if s.cost <= p.MaxCost() {
							t.Fatalf("trace %d step %d: Never for cost %d ≤ max cost %d", n, i, s.cost, p.MaxCost())
						}
						continue
					}
					r := d.RetryAfter.Microseconds()
					if r <= 0 {
						t.Fatalf("trace %d step %d: denied with RetryAfter %s", n, i, d.RetryAfter)
					}
					if r > 1 && take(at+r-1, s.cost).Allowed {
						t.Fatalf("trace %d step %d (%s): admitted 1µs before RetryAfter %s", n, i, p, d.RetryAfter)
					}
					if !take(at+r, s.cost).Allowed {
						t.Fatalf("trace %d step %d (%s): denied after waiting RetryAfter %s", n, i, p, d.RetryAfter)
					}
					checkAdmissions(t, p, admitted, n, i)
				}
			}
		})
	}
}

func lastAt(ev []event) int64 {
	if len(ev) == 0 {
		return 0
	}
	return ev[len(ev)-1].at
}

// checkAdmissions verifies the newest admission against every earlier one.
func checkAdmissions(t *testing.T, p *ratelimit.Policy, ev []event, n, i int) {
	t.Helper()
	periodUS, widthUS, _, _ := p.Compiled()
	last := ev[len(ev)-1]
	for li := range periodUS {
		l := p.Limit(li)
		switch p.Algorithm() {
		case ratelimit.SlidingWindow:
			// Any closed interval of length Period ending at the newest admission.
			if sum := sumIn(ev, last.at-periodUS[li], last.at); sum > l.Rate {
				t.Fatalf("trace %d step %d: %s: %d admitted within [t-%s, t], rate %d", n, i, p, sum, l.Period, l.Rate)
			}
		case ratelimit.FixedWindow:
			start := last.at + t0.UnixMicro()
			start -= start % periodUS[li]
			if sum := sumIn(ev, start-t0.UnixMicro(), last.at); sum > l.Rate {
				t.Fatalf("trace %d step %d: %s: %d admitted in one aligned window, rate %d", n, i, p, sum, l.Rate)
			}
		case ratelimit.TokenBucket:
			// For every start s: admitted in [s, t] · T ≤ Burst · T + (t − s).
			T := widthUS[li]
			sum := int64(0)
			for j := len(ev) - 1; j >= 0; j-- {
				sum += ev[j].cost
				if sum*T > l.Burst*T+(last.at-ev[j].at) {
					t.Fatalf("trace %d step %d: %s: %d admitted in %dµs, burst %d, interval %dµs", n, i, p, sum, last.at-ev[j].at, l.Burst, T)
				}
			}
		}
	}
}

// checkDenial verifies that some limit really had no room for cost.
func checkDenial(t *testing.T, p *ratelimit.Policy, ev []event, at, cost int64, n, i int) {
	t.Helper()
	periodUS, widthUS, _, _ := p.Compiled()
	for li := range periodUS {
		l := p.Limit(li)
		switch p.Algorithm() {
		case ratelimit.SlidingWindow:
			// The counted span is shorter than Period plus one sub-bucket.
			if sumIn(ev, at-periodUS[li]-widthUS[li]+1, at)+cost > l.Rate {
				return
			}
		case ratelimit.FixedWindow:
			start := at + t0.UnixMicro()
			start -= start % periodUS[li]
			if sumIn(ev, start-t0.UnixMicro(), at)+cost > l.Rate {
				return
			}
		case ratelimit.TokenBucket:
			T, sum := widthUS[li], cost
			if cost > l.Burst {
				return
			}
			for j := len(ev) - 1; j >= 0; j-- {
				sum += ev[j].cost
				if sum*T > l.Burst*T+(at-ev[j].at) {
					return
				}
			}
		}
	}
	t.Fatalf("trace %d step %d: %s denied cost %d at +%dµs though every limit had room", n, i, p, cost, at)
}

func sumIn(ev []event, from, to int64) int64 {
	sum := int64(0)
	for _, e := range ev {
		if e.at >= from && e.at <= to {
			sum += e.cost
		}
	}
	return sum
}
