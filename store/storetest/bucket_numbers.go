package storetest

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// subBucketsPastExactNumbers replays sliding windows whose sub-buckets
// are so wide, or their costs so large, that a sub-bucket's cost times
// its width passes 2^53 (µs), against the memory store (int64): where a
// store packs a sub-bucket's cost and latest admission into one number
// (the Redis store does, below 2^53), it must keep the two exact beyond.
// A year-long sub-bucket passes it at a cost of 285 (284 late in the
// sub-bucket), which a settle's debt reaches; sub-buckets of 1/120 of a
// year at about 34,180, which one take reaches. The traces charge below
// and past the bound in one sub-bucket, refund, settle, peek, grant up
// to, and wait for the sub-bucket to leave the window; the third and the
// fourth admit calls whose current, edge, next or skipped sub-buckets hold
// such numbers, as a store's common call reads them. Each trace runs on four stores in a
// row, so that a harness that varies its stores by turns (the Redis
// store's take one path in four) runs each trace on each.
func subBucketsPastExactNumbers(t *testing.T, h Harness) {
	year := ratelimit.MaxPeriod
	w := year / 120 // wide-lean's sub-bucket
	cases := []struct {
		p     *ratelimit.Policy
		trace []step
	}{
		{
			ratelimit.MustParsePolicy("40/366d", ratelimit.WithPrecision(1), ratelimit.Named("wide-debt")),
			[]step{
				{at: 0, keys: []string{"k"}, cost: 1},
				{at: time.Microsecond, op: opSettle, ref: 0, cost: 284},
				{at: 2 * time.Microsecond, keys: []string{"k"}, cost: 1},
				{at: 3 * time.Microsecond, op: opSettle, ref: 0, cost: 2000},
				{at: 4 * time.Microsecond, keys: []string{"k"}, cost: 0},
				{at: 5 * time.Microsecond, op: opRefund, ref: 0},
				{at: 6 * time.Microsecond, keys: []string{"k"}, cost: 3, op: opUpTo},
				{at: year / 2, keys: []string{"k"}, cost: 1},
				{at: year - time.Microsecond, keys: []string{"k"}, cost: 1},
				{at: 2*year + time.Second, keys: []string{"k"}, cost: 40},
				{at: 2*year + time.Second, op: opSettle, ref: 9, cost: 1 << 40},
				{at: 2*year + 2*time.Second, keys: []string{"k"}, cost: 0},
			},
		},
		{
			ratelimit.MustParsePolicy("1000000000/366d", ratelimit.WithPrecision(120), ratelimit.Named("wide-take")),
			[]step{
				{at: 0, keys: []string{"k"}, cost: 34179},
				{at: time.Microsecond, keys: []string{"k"}, cost: 1},
				{at: 2 * time.Microsecond, keys: []string{"k"}, cost: 40000},
				{at: 3 * time.Microsecond, keys: []string{"k"}, cost: 1},
				{at: 4 * time.Microsecond, op: opRefund, ref: 2},
				{at: 5 * time.Microsecond, keys: []string{"k"}, cost: 999_000_000, op: opUpTo},
				{at: 6 * time.Microsecond, keys: []string{"k"}, cost: 1},
				{at: year / 120, keys: []string{"k"}, cost: 1},
				{at: year + time.Second, keys: []string{"k"}, cost: 1},
				{at: year + year/120 + time.Second, keys: []string{"k"}, cost: 0},
			},
		},
		{
			ratelimit.MustParsePolicy("1000000000/366d", ratelimit.WithPrecision(120), ratelimit.Named("wide-lean")),
			[]step{
				{at: 0, keys: []string{"k"}, cost: 100_000},
				{at: w, keys: []string{"k"}, cost: 100_000},
				{at: w + time.Microsecond, keys: []string{"k"}, cost: 1},        // the current one's
				{at: year - time.Microsecond, keys: []string{"k"}, cost: 1},     // the edge one's, still counting
				{at: year, keys: []string{"k"}, cost: 1},                        // the edge one's and the next one's
				{at: year + time.Microsecond, keys: []string{"k"}, cost: 1},     // again, the current one's too
				{at: year + w + time.Microsecond, keys: []string{"k"}, cost: 1}, // the next is now the edge
				{at: 2*year + 2*w, keys: []string{"k"}, cost: 0},
			},
		},
		{
			ratelimit.MustParsePolicy("1000000000/366d", ratelimit.WithPrecision(120), ratelimit.Named("wide-skipped")),
			[]step{
				{at: 0, keys: []string{"k"}, cost: 100_000},
				{at: 5 * w, keys: []string{"k"}, cost: 1},
				{at: year + 2*w, keys: []string{"k"}, cost: 1}, // the first one's leaves the ring's sum, skipped
				{at: year + 2*w + time.Microsecond, keys: []string{"k"}, cost: 0},
			},
		},
	}
	for i, c := range cases {
		t.Run(c.p.Name(), func(t *testing.T) {
			for range 4 {
				replay(t, h, c.p, c.p, c.trace, i)
			}
		})
	}
}
