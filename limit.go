package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// Bounds and defaults of a Limit. The bounds keep every number the stores
// compute (in microseconds) exactly representable in the 53-bit integers
// of Redis Lua, and every policy small enough for one Redis hash.
const (
	// MaxRate is the largest Rate (and Burst) a Limit may have.
	MaxRate = 1_000_000_000
	// MinPeriod is the shortest Period a Limit may have.
	MinPeriod = time.Millisecond
	// MaxPeriod is the longest Period a Limit may have (366 days).
	MaxPeriod = 366 * 24 * time.Hour
	// MaxLimits is the largest number of limits in one Policy.
	MaxLimits = 8
	// ExactRateMax is the largest Rate a SlidingWindow limit with
	// Precision 0 counts exactly, by a log of its last Rate units (16
	// bytes each in Redis).
	ExactRateMax = layout.ExactRateMax
	// DefaultPrecision is the number of sub-buckets of a SlidingWindow
	// limit above ExactRateMax with no Precision set. A sub-bucket's cost
	// leaves the window one Period after its latest admission, so a
	// client always at the limit, whose admissions spread over each
	// sub-bucket, is admitted at least Precision/(Precision+1) of the
	// rate: twenty keep that at 95% or more (ten gave 90.9%), while the
	// three-limit policy "10/s, 120/m, 240/h" stays under 1 KB of Redis
	// memory per identity with every sub-bucket written (see
	// docs/algorithms.md).
	DefaultPrecision = layout.DefaultBuckets
	// MaxPrecision is the largest number of sliding-window sub-buckets
	// per limit.
	MaxPrecision = 120
	// MaxLogRate is the largest Rate of a SlidingLog limit: its log takes
	// about 22 bytes of Redis memory per unit of Rate (22 KB at 1000).
	MaxLogRate = layout.MaxLogRate
	// MinApproxRate is the smallest Rate of a SlidingWindowApprox limit
	// New accepts for a Limiter. The estimate keeps about one unit of the
	// previous window counted until the window ends, so a steady client
	// loses about one unit per Period: below 30, more than 5% of the rate
	// it was promised. SlidingWindow counts such rates exactly at the same
	// cost. (Stores take any rate: the bound is the HTTP promise's.)
	MinApproxRate = 30
	// MaxSpan bounds how far ahead of now a store may have to remember a
	// time: a token bucket's Burst × emission interval, a penalty
	// (BlockFor) and a reservation (Limiter.Wait) each stay within it. The
	// furthest a store computes ahead of its clock is a reservation of
	// MaxSpan on a bucket of MaxSpan, kept a quarter of that longer (2.25
	// × MaxSpan), so every time the stores compute in microseconds stays
	// below 2^53 (exact in the doubles of Redis Lua) while the clock reads
	// before 2^53 − 2.25 × 2^50 µs after the Unix epoch: February 2175.
	MaxSpan = time.Duration(layout.MaxSpanUS) * time.Microsecond
	// DefaultLease is the lease of a Concurrent limit's slot when none is
	// set: a Handler renews its slots every quarter lease while the
	// request runs, and a process that dies holding slots holds them at
	// most a lease.
	DefaultLease = 30 * time.Second
)

// Limit is one rule of a Policy: at most Rate units of cost per Period.
type Limit struct {
	// Rate is the cost admitted per Period. It must be in [1, MaxRate]
	// (MaxLogRate for SlidingLog).
	Rate int64
	// Period is the length of the window. It must be in [MinPeriod,
	// MaxPeriod] and a whole number of microseconds.
	Period time.Duration
	// Precision is the number of sub-buckets of a SlidingWindow limit, at
	// most MaxPrecision; the other algorithms want 0. 0 means: counted
	// exactly when Rate ≤ ExactRateMax (Precision stays 0), else
	// DefaultPrecision. Period must divide into Precision sub-buckets of a
	// whole number of microseconds, each at least 1ms long; when the default
	// does not fit a short period, the largest precision ≤ DefaultPrecision
	// that fits is used.
	Precision int
	// Burst is the token bucket's capacity, at most MaxRate; the other
	// algorithms want 0. 0 means Burst = Rate.
	Burst int64
	// Name labels the limit in the RateLimit headers. Empty means the
	// policy's name and the period, e.g. "default-1m" ("default-concurrent"
	// for a Concurrent limit).
	Name string
	// Concurrent makes the limit one of requests in flight (see
	// Concurrent): at most Rate at once, whatever the algorithm; Period
	// is then the lease of a slot (DefaultLease when 0), and Precision and
	// Burst must be 0.
	Concurrent bool
}

// Concurrent returns a limit of n requests in flight at once ("5
// concurrent" in ParsePolicy), for expensive endpoints: a request holds a
// slot from its admission until it ends (the Handler releases it when the
// handler returns, on panic and when the client left too; outside HTTP,
// Limiter.Release). It is checked with the policy's other limits, for
// every key, in the same store call, all or nothing, and counts requests,
// not cost. A slot carries a lease (Period, DefaultLease when 0) that the
// Handler renews every quarter lease while the request runs: a process
// that dies holding a slot holds it half a lease to a lease, then the
// slot frees itself, as does a slot taken by a store call that answered
// after the Limiter's timeout. A denial by it (Decision.InFlight) has no
// wait to promise: a slot frees when a request ends.
func Concurrent(n int64) Limit { return Limit{Rate: n, Concurrent: true} }

// FormatPeriod writes d compactly: "1s", "1m", "1h", "1d", "500ms", "90s".
func FormatPeriod(d time.Duration) string {
	units := []struct {
		d      time.Duration
		suffix string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}}
	for _, u := range units {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.suffix
		}
	}
	return d.String()
}

// validName reports why s cannot be a policy or limit name, or nil.
func validName(s string) error {
	if len(s) == 0 || len(s) > 64 {
		return errors.New("must be 1 to 64 characters")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("character %q at offset %d is not one of [A-Za-z0-9_.-]", c, i)
		}
	}
	return nil
}
