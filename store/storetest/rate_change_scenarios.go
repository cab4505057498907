package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// rateChangeKeepsCounters: a policy that differs from another of its name
// only in the rate of a window, a sub-bucketed window, a log or a token
// bucket shares its counters: the new rate applies to what was used, up
// or down, and a denial's RetryAfter is when the new rate admits again (a
// log is laid out anew for its new capacity, across the change of its
// chunks' size too; a token bucket's debt drains at the old rate until
// the new one charges). A change of kind (a sliding window's rate across
// ExactRateMax) starts the new policy's counters afresh, as Policy.ID
// says.
func rateChangeKeepsCounters(t *testing.T, h Harness) {
	fixed := ratelimit.WithAlgorithm(ratelimit.FixedWindow)
	approx := ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)
	slog := ratelimit.WithAlgorithm(ratelimit.SlidingLog)
	token := ratelimit.WithAlgorithm(ratelimit.TokenBucket)
	for i, c := range []struct {
		from, to string
		opts     []ratelimit.PolicyOption
		used     int64 // charged under from, one unit at a time
		admits   int64 // then admitted under to, at the same instant
		fresh    bool  // a new layout: to starts afresh, from keeps its own
	}{
		{"100/m", "200/m", nil, 100, 100, false},
		{"200/m", "100/m", nil, 150, 0, false},
		{"100/m", "150/m", nil, 60, 90, false},
		{"10/m", "20/m", []ratelimit.PolicyOption{fixed}, 10, 10, false},
		{"20/m", "10/m", []ratelimit.PolicyOption{fixed}, 15, 0, false},
		{"40/m", "80/m", []ratelimit.PolicyOption{approx}, 40, 40, false},
		{"80/m", "40/m", []ratelimit.PolicyOption{approx}, 50, 0, false},
		{"10/m", "20/m", []ratelimit.PolicyOption{ratelimit.WithPrecision(6)}, 10, 10, false},
		{"10/m", "20/m", nil, 10, 10, false}, // logs of 10 and 20 times
		{"20/m", "10/m", nil, 15, 0, false},
		{"5/m", "6/m", nil, 3, 3, false},
		{"30/m", "40/m", []ratelimit.PolicyOption{slog}, 30, 10, false}, // chunks of 4 times, then of 32
		{"40/m", "30/m", []ratelimit.PolicyOption{slog}, 35, 0, false},
		{"32/m", "33/m", nil, 32, 33, true}, // a log, then sub-buckets
		{"10/m", "20/m", []ratelimit.PolicyOption{token}, 10, 10, false},
		{"20/m", "10/m", []ratelimit.PolicyOption{token}, 15, 0, false},
		{"10/m", "30/m", []ratelimit.PolicyOption{token, ratelimit.WithBurst(4)}, 4, 0, false}, // a burst of 4 either way
		{"7/m", "11/m", []ratelimit.PolicyOption{token}, 5, 6, false},                          // intervals that do not divide each other
	} {
		s, clk := h.start(t)
		opts := append([]ratelimit.PolicyOption{ratelimit.Named("api")}, c.opts...)
		from := ratelimit.MustParsePolicy(c.from, opts...)
		to := ratelimit.MustParsePolicy(c.to, opts...)
		// At the start of a minute, so that every window holds all charges.
		at := t0.Truncate(time.Minute).Add(time.Minute)
		clk.Set(at)
		for j := int64(0); j < c.used; j++ {
			if d := mustTake(t, s, from, 1, "tenant"); !d.Allowed {
				t.Fatalf("step %d: %s denied charge %d of %d: %+v", i, from, j+1, c.used, d)
			}
		}
		var n int64
		var denied ratelimit.Decision
		for {
			d := mustTake(t, s, to, 1, "tenant")
			if !d.Allowed {
				denied = d
				break
			}
			n++
			if n > 1000 {
				t.Fatalf("step %d: %s admits without end after %d on %s", i, to, c.used, from)
			}
		}
		if n != c.admits {
			t.Errorf("step %d: after %d charges on %s, %s admitted %d more at once, want %d", i, c.used, from, to, n, c.admits)
		}
		if c.fresh {
			if d := mustTake(t, s, from, 0, "tenant"); d.Remaining != 0 {
				t.Errorf("step %d: %s's counters lost its %d charges: %d remaining", i, from, c.used, d.Remaining)
			}
		}
		// A client that waits the denial's RetryAfter is admitted.
		if denied.RetryAfter <= 0 {
			t.Fatalf("step %d: %s's denial says no RetryAfter: %+v", i, to, denied)
		}
		clk.Set(at.Add(denied.RetryAfter))
		if d := mustTake(t, s, to, 1, "tenant"); !d.Allowed {
			t.Errorf("step %d: %s denied again after its RetryAfter %v: %+v", i, to, denied.RetryAfter, d)
		}
	}
}

// twoRatesNeverExceedTheLarger: two servers running two rates of one named
// policy (a rolling deploy, a plan change on one of them) take turns on
// one identity, at random times over several periods; no window of the
// policy's period ever holds more admissions than the larger rate, checked
// by brute force over the admission times (aligned windows for the fixed
// and the approximated window, whose guarantee is per aligned window; for
// a token bucket, no span d holds more than the larger burst plus d over
// the shorter interval).
func twoRatesNeverExceedTheLarger(t *testing.T, h Harness) {
	for _, c := range []struct {
		alg        ratelimit.Algorithm
		low, high  string
		most       int64
		aligned    bool
		precisions []ratelimit.PolicyOption
	}{
		{ratelimit.SlidingWindow, "100/m", "120/m", 120, false, nil},
		{ratelimit.SlidingWindow, "10/m", "12/m", 12, false, []ratelimit.PolicyOption{ratelimit.WithPrecision(6)}},
		{ratelimit.SlidingWindow, "10/m", "12/m", 12, false, nil}, // logs of 10 and 12 times
		{ratelimit.SlidingLog, "30/m", "40/m", 40, false, nil},    // chunks of 4 times, and of 32
		{ratelimit.FixedWindow, "10/m", "12/m", 12, true, nil},
		{ratelimit.SlidingWindowApprox, "40/m", "48/m", 48, true, nil},
		{ratelimit.TokenBucket, "10/m", "12/m", 12, false, nil}, // most: the burst, then one per 5s
	} {
		name := c.alg.String() + " " + c.low + " " + c.high
		if c.precisions != nil {
			name += " sub-buckets"
		}
		t.Run(name, func(t *testing.T) {
			opts := append([]ratelimit.PolicyOption{ratelimit.Named("plan"), ratelimit.WithAlgorithm(c.alg)}, c.precisions...)
			low, high := ratelimit.MustParsePolicy(c.low, opts...), ratelimit.MustParsePolicy(c.high, opts...)
			if low.ID() != high.ID() {
				t.Fatalf("%s and %s do not share counters: IDs %q and %q", low, high, low.ID(), high.ID())
			}
			s, clk := h.start(t)
			rng := rand.New(rand.NewPCG(uint64(c.alg)+41, uint64(c.most)))
			period := time.Minute.Microseconds()
			at := int64(0)
			var admitted []int64
			for i := 0; i < 600; i++ {
				// Bursts and pauses: most steps a few ms apart, some 10s.
				at += 1 + rng.Int64N(2000)
				if rng.IntN(20) == 0 {
					at += rng.Int64N(10_000_000)
				}
				clk.Set(t0.Add(time.Duration(at) * time.Microsecond))
				p := low
				if i%2 == 1 {
					p = high
				}
				if d := mustTake(t, s, p, 1, "tenant"); d.Allowed {
					admitted = append(admitted, at)
				}
			}
			if c.alg == ratelimit.TokenBucket {
				// Within any span, at most the larger burst plus the span
				// over the shorter interval (5s); met with equality.
				interval, tight := period/c.most, false
				for i, a := range admitted {
					for j := i; j < len(admitted); j++ {
						n, span := int64(j-i+1), admitted[j]-a
						if n*interval > c.most*interval+span {
							t.Fatalf("%d admitted within %dµs: more than burst %d and one per %dµs", n, span, c.most, interval)
						}
						if n*interval > c.most*interval+span-interval {
							tight = true
						}
					}
				}
				if !tight {
					t.Fatalf("no span came within one interval of the bound: the trace never filled the larger rate; it checks nothing")
				}
				t.Logf("%d admitted of 600 over %s", len(admitted), time.Duration(at)*time.Microsecond)
				return
			}
			worst := int64(0)
			for i, a := range admitted {
				from, to := a, a+period
				if c.aligned {
					abs := t0.UnixMicro() + a
					from = a - (abs % period)
					to = from + period
				}
				n := int64(0)
				for _, b := range admitted[i:] {
					if b >= to {
						break
					}
					n++
				}
				for j := i - 1; j >= 0 && admitted[j] >= from; j-- {
					n++
				}
				worst = max(worst, n)
			}
			if worst > c.most {
				t.Fatalf("%d admitted within one window of %s, want at most %d (the larger rate)", worst, time.Duration(period)*time.Microsecond, c.most)
			}
			if worst < c.most {
				t.Fatalf("at most %d admitted within one window: the trace never filled the larger rate (%d); it checks nothing", worst, c.most)
			}
			t.Logf("%d admitted of 600 over %s; at most %d in one window", len(admitted), time.Duration(at)*time.Microsecond, worst)
		})
	}
}

// placesKeepTheirRing: a log's ring is laid out when its key is first
// written, by a charge or by a place in line: units a lease placed ahead
// under one rate, folded in by a charge under a policy of its name with a
// smaller rate (a reservation, here), all still count under the first.
func placesKeepTheirRing(t *testing.T, h Harness) {
	ctx := context.Background()
	s, clk := h.start(t)
	slog := ratelimit.WithAlgorithm(ratelimit.SlidingLog)
	from := ratelimit.MustParsePolicy("3/h", ratelimit.Named("ring"), slog)
	to := ratelimit.MustParsePolicy("1/h", ratelimit.Named("ring"), slog)
	clk.Set(t0)
	d, err := s.(storekit.Leaser).Lease(ctx, ratelimit.Request{Policy: from, Keys: []string{"tenant"}, Cost: 3}, time.Second)
	if err != nil || d.Granted != 3 {
		t.Fatalf("step 0: a lease of 3 under %s: %+v, %v", from, d, err)
	}
	clk.Set(t0.Add(2 * time.Second)) // the lease's places are released
	d, err = s.(storekit.Reserver).Reserve(ctx, ratelimit.Request{Policy: to, Keys: []string{"tenant"}, Cost: 1}, 2*time.Hour)
	if err != nil || !d.Allowed || d.Delay <= 0 {
		t.Fatalf("step 1: a reservation under %s, after the lease's units: %+v, %v", to, d, err)
	}
	clk.Set(t0.Add(3 * time.Second))
	if d := mustTake(t, s, from, 0, "tenant"); d.Remaining != 0 || d.Allowed {
		t.Fatalf("step 2: under %s, %d remaining (allowed %v) after the lease's 3 units and a place in line, want 0", from, d.Remaining, d.Allowed)
	}
}
