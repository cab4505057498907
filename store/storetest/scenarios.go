package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// scenario is one named check of a store.
type scenario struct {
	name string
	run  func(t *testing.T, h Harness)
	// needs lists the optional operations it uses; a store lacking one
	// does not run it.
	needs capabilities
	// multiKey: it sends requests of several keys, so a Harness.OneKey
	// store does not run it.
	multiKey bool
}

// scenarios are the checks Scenarios runs, named after what they pin.
var scenarios = []scenario{
	{"DeniedChargesNothing", deniedChargesNothing, capabilities{}, true},
	{"ConcurrentExact", concurrentExact, capabilities{}, false},
	{"HugeCost", hugeCost, capabilities{}, false},
	{"InvalidRequests", invalidRequests, capabilities{}, false},
	{"ReservationOnTwoKeysKeepsTheWindow", twoKeyReservation, capabilities{reserve: true, upTo: true}, true},
	{"CancelledWaitersGiveTheirPlaceBack", cancelledWaiters, capabilities{reserve: true, refund: true}, true},
	{"BlockHoldsAgainstEveryWayIn", blockEveryWay, capabilities{upTo: true}, true},
	{"RefundAfterResetGivesNothing", refundAfterReset, capabilities{refund: true, reset: true}, false},
	{"RefundHeavyTraces", refundHeavy, capabilities{refund: true}, false},
	{"RefundRaces", refundRaces, capabilities{refund: true}, false},
	{"ExactUntilMaxSpanDate", exactUntilMaxSpanDate, capabilities{reserve: true, upTo: true, refund: true}, false},
	{"FullBurstAtMaxSpan", fullBurstAtMaxSpan, capabilities{}, false},
	{"ExpiryKeepsGuarantees", expiryKeepsGuarantees, capabilities{}, false},
	{"SubBucketRefillClaims", subBucketRefillClaims, capabilities{}, false},
	{"SubBucketsPastExactNumbers", subBucketsPastExactNumbers, capabilities{upTo: true, refund: true, settle: true}, false},
	{"RateChangeKeepsCounters", rateChangeKeepsCounters, capabilities{}, false},
	{"TwoRatesNeverExceedTheLarger", twoRatesNeverExceedTheLarger, capabilities{}, false},
	{"PlacesKeepTheirRing", placesKeepTheirRing, capabilities{reserve: true, lease: true}, false},
}

// Scenarios runs the named scenarios whose operations h's store
// implements, each as a subtest.
func Scenarios(t *testing.T, h Harness) {
	var clk clock
	caps := capsOf(h.store(t, &clk))
	for _, sc := range scenarios {
		if sc.needs.reserve && !caps.reserve || sc.needs.upTo && !caps.upTo || sc.needs.refund && !caps.refund || sc.needs.reset && !caps.reset || sc.needs.lease && !caps.lease || sc.needs.settle && !caps.settle {
			t.Logf("%s: not run: the store lacks an operation it needs", sc.name)
			continue
		}
		if sc.multiKey && h.OneKey {
			t.Logf("%s: not run: it sends requests of several keys (Harness.OneKey)", sc.name)
			continue
		}
		t.Run(sc.name, func(t *testing.T) { sc.run(t, h) })
	}
}

func mustTake(t *testing.T, s ratelimit.Store, p *ratelimit.Policy, cost int64, keys ...string) ratelimit.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: keys, Cost: cost})
	if err != nil {
		t.Fatalf("Take(%q, cost %d): %v", keys, cost, err)
	}
	return d
}

// deniedChargesNothing: a request denied by one identity's limit charges
// no other identity, and no limit of its own.
func deniedChargesNothing(t *testing.T, h Harness) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s, _ := h.start(t)
			p := ratelimit.MustParsePolicy("5/h, 50/24h", ratelimit.WithAlgorithm(alg), ratelimit.Named("deny"))
			user, ip := "user:1", "ip:1"
			if d := mustTake(t, s, p, 5, user); !d.Allowed {
				t.Fatalf("first charge denied: %+v", d)
			}
			before := mustTake(t, s, p, 0, ip)
			for i := 0; i < 3; i++ {
				if d := mustTake(t, s, p, 1, ip, user); d.Allowed || d.Key != 1 || d.Limit != 0 {
					t.Fatalf("step %d: want denial by key 1 limit 0, got %+v", i, d)
				}
			}
			after := mustTake(t, s, p, 0, ip)
			if after.Remaining != before.Remaining || after.Limits[1].Remaining != before.Limits[1].Remaining || after.Remaining != 5 {
				t.Fatalf("denied requests charged the ip: before %+v after %+v", before, after)
			}
		})
	}
}

// concurrentExact: 64 goroutines (8 when h.Sequential) racing on one
// identity, at one instant, admit exactly the limit, never more, whatever
// the interleaving.
func concurrentExact(t *testing.T, h Harness) {
	goroutines := 64
	if h.Sequential {
		goroutines = 8
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s, _ := h.start(t)
			p := ratelimit.MustParsePolicy("100/10s", ratelimit.WithAlgorithm(alg), ratelimit.Named("conc"))
			var admitted, errs atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 320/goroutines; i++ {
						d, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{"ip:1"}, Cost: 1})
						if err != nil {
							errs.Add(1)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if errs.Load() != 0 || admitted.Load() != 100 {
				t.Fatalf("admitted %d of 320 attempts with %d errors, want exactly 100", admitted.Load(), errs.Load())
			}
		})
	}
}

// hugeCost: a cost far above every capacity, up to the largest int64, is
// denied as Never, charges nothing, and leaves the identity limited as
// before (no arithmetic overflow).
func hugeCost(t *testing.T, h Harness) {
	s, _ := h.start(t)
	for _, alg := range algorithms {
		p := ratelimit.MustParsePolicy("10/m, 100/h", ratelimit.WithAlgorithm(alg), ratelimit.Named("huge"))
		key := "ip:" + alg.String()
		mustTake(t, s, p, 10, key)
		for i, c := range []int64{1 << 62, 1<<63 - 1, 1537228672809, 11} {
			if d := mustTake(t, s, p, c, key); d.Allowed || d.RetryAfter != ratelimit.Never {
				t.Fatalf("%s step %d cost %d: %+v, want denied with Never", alg, i, c, d)
			}
		}
		if d := mustTake(t, s, p, 1, key); d.Allowed {
			t.Fatalf("%s: still at the limit, yet admitted after huge costs: %+v", alg, d)
		}
	}
}

// invalidRequests: malformed requests are errors wrapping
// ratelimit.ErrInvalidRequest, never panics.
func invalidRequests(t *testing.T, h Harness) {
	var clk clock
	s := h.store(t, &clk)
	p := ratelimit.MustParsePolicy("1/s")
	cases := []ratelimit.Request{
		{},
		{Policy: p},
		{Policy: p, Keys: []string{""}},
		{Policy: p, Keys: []string{"a"}, Cost: -1},
		{Policy: p, Keys: []string{"a", "a"}},
		{Policy: p, Keys: make([]string, ratelimit.MaxKeys+1)},
		{Policy: &ratelimit.Policy{}, Keys: []string{"a"}},
	}
	for i, req := range cases {
		if _, err := s.Take(context.Background(), req); !errors.Is(err, ratelimit.ErrInvalidRequest) {
			t.Errorf("step %d: err %v, want ErrInvalidRequest", i, err)
		}
	}
}

// exactUntilMaxSpanDate replays the policies that reach furthest ahead of
// the clock (a token bucket and a log whose burst or wait is about
// ratelimit.MaxSpan, a penalty of MaxSpan, reservations of up to MaxSpan)
// on the day before the bound MaxSpan states runs out (2^53 − 2.25 × 2^50
// µs: February 2175), against the memory store (int64): every decision
// must be identical, so no sum of times lost precision (in Redis Lua's
// doubles, say). The day's first time is odd, so that no sum rounds to an
// even double by luck.
func exactUntilMaxSpanDate(t *testing.T, h Harness) {
	lastExactDay := time.UnixMicro(1<<53 - 9<<48 + 1).Add(-24 * time.Hour)
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
	for i, p := range policies {
		t.Run(p.Name(), func(t *testing.T) { replay(t, h, p, p, trace, i) })
	}
}

// fullBurstAtMaxSpan: a token bucket whose burst × interval is exactly
// ratelimit.MaxSpan (1139 per 19,567,871 s, burst 65,536: an interval of
// 2^34 µs), which NewPolicy accepts, admits its whole burst (its MaxCost)
// on a fresh key, and a microsecond before the bucket is full again the
// same cost waits that microsecond, not for ever; as the reference does.
func fullBurstAtMaxSpan(t *testing.T, h Harness) {
	p, err := ratelimit.NewPolicy("span-tb", ratelimit.TokenBucket, ratelimit.Limit{Rate: 1139, Period: 19567871 * time.Second, Burst: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	burst, span := p.MaxCost(), ratelimit.MaxSpan
	trace := []step{
		{at: 0, keys: []string{"k"}, cost: burst},
		{at: time.Microsecond, keys: []string{"k"}, cost: 1},
		{at: span - time.Microsecond, keys: []string{"k"}, cost: burst},
		{at: span, keys: []string{"k"}, cost: burst},
	}
	replay(t, h, p, p, trace, 0)
	want := []struct {
		allowed bool
		retry   time.Duration
	}{{true, 0}, {false, 2<<33*time.Microsecond - time.Microsecond}, {false, time.Microsecond}, {true, 0}}
	s, clk := h.start(t)
	for i, st := range trace {
		clk.Set(t0.Add(st.at))
		d := mustTake(t, s, p, st.cost, st.keys...)
		if d.Allowed != want[i].allowed || d.RetryAfter != want[i].retry {
			t.Errorf("step %d (cost %d at +%s): allowed %v, RetryAfter %s; want %v, %s", i, st.cost, st.at, d.Allowed, d.RetryAfter, want[i].allowed, want[i].retry)
		}
	}
}

// expiryKeepsGuarantees replays random requests, the clock moving by up to
// half a TTL at a time, for policies whose TTL in milliseconds is not a
// multiple of 4: a store that lets idle identities go after the policy's
// TTL (the memory store's sweep; a Redis key's expiry, when Harness.SetTime
// makes keys expire on the test's clock) must never let one go while its
// counters still count, so every algorithm keeps its guarantee.
func expiryKeepsGuarantees(t *testing.T, h Harness) {
	ctx := context.Background()
	policies := []*ratelimit.Policy{
		ratelimit.MustParsePolicy("1/10ms", ratelimit.WithAlgorithm(ratelimit.FixedWindow), ratelimit.Named("fx")),
		ratelimit.MustParsePolicy("100/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(3), ratelimit.Named("tb")),
		ratelimit.MustParsePolicy("2/11ms", ratelimit.Named("sw")),
		ratelimit.MustParsePolicy("40/13ms", ratelimit.WithPrecision(13), ratelimit.Named("swb")),
		ratelimit.MustParsePolicy("3/7ms", ratelimit.WithAlgorithm(ratelimit.SlidingLog), ratelimit.Named("sl")),
	}
	rng := rand.New(rand.NewPCG(5, 8))
	for _, p := range policies {
		t.Run(p.Name(), func(t *testing.T) {
			if ttlOf(p).Milliseconds()%4 == 0 {
				t.Fatalf("TTL %s is a multiple of 4ms: not the case under test", ttlOf(p))
			}
			s, clk := h.start(t)
			now := t0
			var admitted []event
			total := 0
			for i := 0; i < 40*h.traces(t); i++ {
				now = now.Add(time.Duration(rng.Int64N(ttlOf(p).Microseconds()/2+1)) * time.Microsecond)
				clk.Set(now)
				d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted = append(admitted, event{at: now.Sub(t0).Microseconds(), cost: 1})
					// Windows older than a few TTLs are checked already.
					for len(admitted) > 0 && admitted[0].at < admitted[len(admitted)-1].at-4*ttlOf(p).Microseconds() {
						admitted = admitted[1:]
					}
					checkAdmissions(t, p, admitted, 0, i)
					total++
				}
			}
			if total < 10*h.traces(t)/4 {
				t.Fatalf("only %d admitted: the trace does not exercise the limit", total)
			}
		})
	}
}

// subBucketRefillClaims pins what Decision.RefillAfter claims of a sliding
// window in sub-buckets (10 of 100ms): exact when the oldest counting
// sub-bucket is the edge one or the current one, or when nothing remains;
// else, with quota left, until the one after the edge could leave at the
// earliest (a shorter claim, never a longer one).
func subBucketRefillClaims(t *testing.T, h Harness) {
	ms := time.Millisecond
	big := ratelimit.MustParsePolicy("100/s", ratelimit.WithPrecision(10), ratelimit.Named("rfa"))
	small := ratelimit.MustParsePolicy("2/s", ratelimit.WithPrecision(10), ratelimit.Named("rfb"))
	base := t0.Truncate(time.Second).Add(time.Second) // a sub-bucket starts here
	steps := []struct {
		p      *ratelimit.Policy
		key    string
		at     time.Duration // from base
		remain int64
		refill time.Duration
	}{
		{big, "old", 50 * ms, 99, time.Second},   // nothing counted before: this charge leaves after Period
		{big, "old", 80 * ms, 98, 970 * ms},      // the current sub-bucket (0) holds all that counts: exact, it leaves at 1050ms
		{big, "old", 550 * ms, 97, 50 * ms},      // oldest is sub-bucket 0, past the edge (-5): until 600ms, when the next (-4) could leave
		{small, "old", 50 * ms, 1, time.Second},  // the same, on a limit of 2
		{small, "old", 550 * ms, 0, 500 * ms},    // nothing remains: exact, sub-bucket 0 leaves at 1050ms
		{big, "edge", 50 * ms, 99, time.Second},  //
		{big, "edge", 1030 * ms, 98, 20 * ms},    // the edge sub-bucket (0) counts until 1050ms
		{big, "next", 150 * ms, 99, time.Second}, //
		{big, "next", 1050 * ms, 98, 50 * ms},    // the edge (0) is empty; the next (1) could leave at 1100ms (it leaves at 1150ms)
		{big, "next", 1170 * ms, 98, 30 * ms},    // the edge (1) holds the cost that left at 1150ms: until 1200ms, when the next (2) could leave
		{small, "full", 50 * ms, 1, time.Second}, //
		{small, "full", 150 * ms, 0, 900 * ms},   // nothing remains: exact, sub-bucket 0 leaves at 1050ms
		{small, "full", 1060 * ms, 0, 90 * ms},   // the edge (0) left at 1050ms; nothing remains: exact, the next (1) leaves at 1150ms
	}
	s, clk := h.start(t)
	for i, st := range steps {
		clk.Set(base.Add(st.at))
		d := mustTake(t, s, st.p, 1, st.key)
		if !d.Allowed || d.Remaining != st.remain || d.RefillAfter != st.refill {
			t.Errorf("step %d (%s, key %q, at %v): allowed %v, remaining %d, refill %v; want allowed, %d, %v",
				i, st.p.Name(), st.key, st.at, d.Allowed, d.Remaining, d.RefillAfter, st.remain, st.refill)
		}
	}
}
