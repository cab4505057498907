package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
)

// TestRealMemoryPerIdentity measures MEMORY USAGE (SAMPLES 0: every field)
// of one identity's key for "10/s, 120/m, 240/h" under each algorithm, busy:
// every slot of a log written, and every sub-bucket of a sliding-window
// limit holding cost (those its rate lets hold cost at once), with a resend
// ID recorded; the default must stay within 1 KB. Then the sliding log's
// key at rates 10, 100 and 1000, for its bytes per unit of rate.
func TestRealMemoryPerIdentity(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	ctx := context.Background()
	usage := func(t *testing.T, p *ratelimit.Policy) int64 {
		t.Helper()
		var clk clock
		s, err := New(client, WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		const id = "ip:203.0.113.77"
		at := t0
		take := func(what string) {
			t.Helper()
			clk.Set(at)
			if d := mustTake(t, s, p, 1, id); !d.Allowed {
				t.Fatalf("%s: denied at %v", what, at.Sub(t0))
			}
		}
		busy := 0 // sub-buckets charged
		// Logs first: as many admissions as the largest log has slots,
		// each a whole longest period after the last, so each is admitted
		// and every slot of every log is written. (Two at least, so the
		// weighted window writes its previous window too.)
		lay := plan.Layout(p)
		lim, nf := lay.Limits, lay.MemFields
		slots := int64(2)
		for _, l := range lim {
			if l.Kind == layout.Log {
				slots = max(slots, l.Capacity)
			}
		}
		for i := int64(0); i < slots; i++ {
			take(fmt.Sprintf("log slot %d", i))
			at = at.Add(time.Duration(plan.Layout(p).IDTTL)*time.Microsecond + time.Second) // the longest period
		}
		// Then the sub-buckets, the widest limit's first: a charge in each
		// of n+1 consecutive sub-buckets of a limit leaves every slot of its
		// ring holding cost and an admission time, and the steps of a
		// narrower limit stay within about one sub-bucket of a wider one. A
		// charge its rate (or another limit's) refuses is skipped.
		order := slices.Clone(lim)
		slices.SortStableFunc(order, func(a, b layout.Limit) int { return cmp.Compare(b.Width, a.Width) })
		for _, l := range order {
			if l.Kind != layout.Buckets {
				continue
			}
			for b := int64(0); b <= l.N; b++ {
				clk.Set(at)
				if mustTake(t, s, p, 1, id).Allowed {
					busy++
				}
				at = at.Add(time.Duration(l.Width) * time.Microsecond)
			}
		}
		key := redisKey(DefaultPrefix, p.ID(), id)
		n, err := client.MemoryUsage(ctx, key, 0).Result() // SAMPLES 0: every field
		if err != nil {
			t.Fatal(err)
		}
		fields, err := client.HLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := client.ObjectEncoding(ctx, key).Result()
		t.Logf("%-44s %4d bytes (%d hash fields, %s; %d numbers in the memory store; %d sub-buckets charged)", p.ID(), n, fields, enc, nf, busy)
		return n
	}

	const example = "10/s, 120/m, 240/h"
	for _, c := range []struct {
		name string
		opts []ratelimit.PolicyOption
	}{
		{"sliding-window (default)", nil},
		{"sliding-window, precision 5", []ratelimit.PolicyOption{ratelimit.WithPrecision(5)}},
		{"sliding-window, precision 10", []ratelimit.PolicyOption{ratelimit.WithPrecision(10)}},
		{"sliding-window, precision 20", []ratelimit.PolicyOption{ratelimit.WithPrecision(20)}},
		{"sliding-window, precision 50", []ratelimit.PolicyOption{ratelimit.WithPrecision(50)}},
		{"fixed-window", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.FixedWindow)}},
		{"token-bucket", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket)}},
		{"sliding-log", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingLog)}},
		{"sliding-window-approx", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ratelimit.MustParsePolicy(example, append(c.opts, ratelimit.Named("mem"))...)
			n := usage(t, p)
			t.Logf("%s, %q: %d bytes per identity", c.name, example, n)
			if c.opts == nil && n > 1024 {
				t.Fatalf("default: %d bytes per identity, want ≤ 1024", n)
			}
		})
	}

	// The sliding log keeps 16 digits per unit of rate, 4 to a hash field
	// up to ExactRateMax (Redis's compact listpack encoding), 32 to a field
	// above (a hashtable, whose strings carry allocator overhead): from 100
	// to 1000 the key grows by a little more than 16 bytes per unit.
	t.Run("sliding-log by rate", func(t *testing.T) {
		rates := []int64{10, 100, 1000}
		sizes := make([]int64, len(rates))
		for i, r := range rates {
			p := ratelimit.MustParsePolicy(fmt.Sprintf("%d/s", r), ratelimit.WithAlgorithm(ratelimit.SlidingLog), ratelimit.Named("mem"))
			sizes[i] = usage(t, p)
			t.Logf("sliding-log, %d/s: %d bytes, %.1f per unit of rate", r, sizes[i], float64(sizes[i])/float64(r))
		}
		per := float64(sizes[2]-sizes[1]) / float64(rates[2]-rates[1])
		t.Logf("sliding-log from %d to %d: %.1f bytes per added unit of rate", rates[1], rates[2], per)
		if per < 16 || per > 24 {
			t.Errorf("sliding-log from rate %d to %d: %.1f bytes per added unit, want 16 (its digits) to 24", rates[1], rates[2], per)
		}
	})
}
