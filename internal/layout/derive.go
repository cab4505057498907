package layout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// Algorithm is how a policy counts, numbered as package ratelimit names
// its algorithms (ratelimit.Algorithm); each side maps its own names to
// these by name, never by number.
type Algorithm uint8

const (
	SlidingWindow Algorithm = iota
	FixedWindow
	TokenBucket
	SlidingLog
	SlidingWindowApprox
)

// Sizes of the counters that package ratelimit names for its users
// (ratelimit.ExactRateMax, MaxLogRate, DefaultPrecision) and the stores
// lay out.
const (
	// ExactRateMax is the largest rate a SlidingWindow limit without a
	// precision counts by a log of its last Rate units.
	ExactRateMax = 32
	// MaxLogRate is the largest rate of a SlidingLog limit.
	MaxLogRate = 1000
	// DefaultBuckets is the number of sub-buckets of a SlidingWindow limit
	// above ExactRateMax without a precision, where they fit (BucketsOf).
	DefaultBuckets = 20
)

// Spec is one limit as package ratelimit holds it once validated, its
// defaults filled in; times are microseconds.
type Spec struct {
	// Rate is the cost admitted per Period (a Concurrent limit's slots).
	Rate int64
	// Burst is a TokenBucket's capacity.
	Burst int64
	// Period is the limit's period (a Concurrent limit's lease).
	Period int64
	// Precision is a SlidingWindow's sub-buckets; 0 counts by a log up to
	// ExactRateMax and in BucketsOf(Period) sub-buckets above.
	Precision int64
	// Concurrent makes the limit one of requests in flight.
	Concurrent bool
}

// BucketsOf returns the sub-buckets of a SlidingWindow limit of the
// period, above ExactRateMax and without a precision: DefaultBuckets, or
// the most fewer that divide the period into whole microseconds, each at
// least a millisecond long.
func BucketsOf(period int64) int64 {
	n := int64(DefaultBuckets)
	for n > 1 && (period%n != 0 || period/n < 1000) {
		n--
	}
	return n
}

// Counting returns the algorithm a policy's counters count by: the
// policy's own, but a sliding window for a leased fixed window or
// approximation, whose grants are recorded ahead of now (a sliding
// promise covers the aligned one).
func Counting(alg Algorithm, leased bool) Algorithm {
	if leased && (alg == FixedWindow || alg == SlidingWindowApprox) {
		return SlidingWindow
	}
	return alg
}

// Derive lays out the counters of a policy of the algorithm, the limits
// and the penalty block (µs), leased (its grants recorded ahead of now:
// ratelimit.WithLease) or not, for both stores.
func Derive(alg Algorithm, specs []Spec, block int64, leased bool) *Policy {
	alg = Counting(alg, leased)
	limits := make([]Limit, len(specs))
	for i, s := range specs {
		limits[i] = limitOf(alg, s)
	}
	p := Compile(limits, block, ExactRateMax)
	if leased {
		// Leases are places in line never waited for: no reservations.
		p.Reserves, p.Pending = false, true
	}
	return p
}

// limitOf is how alg counts the limit s.
func limitOf(alg Algorithm, s Spec) Limit {
	if s.Concurrent {
		// Two epochs of half the lease: a slot counts until the end of
		// the epoch after its own, at most a lease.
		return Limit{Kind: Concurrent, Capacity: s.Rate, Width: s.Period / 2, N: 1, Period: s.Period}
	}
	l := Limit{Capacity: s.Rate, Width: s.Period, N: 1, Period: s.Period}
	switch alg {
	case SlidingWindow:
		n := s.Precision
		if n == 0 && s.Rate <= ExactRateMax {
			l.Kind, l.MaxCapacity = Log, ExactRateMax
			break
		}
		if n == 0 {
			n = BucketsOf(s.Period)
		}
		l.Kind, l.N, l.Width = Buckets, n, s.Period/n
	case SlidingLog:
		l.Kind, l.MaxCapacity = Log, MaxLogRate
	case FixedWindow:
		l.Kind = Fixed
	case SlidingWindowApprox:
		l.Kind = Approx
	case TokenBucket:
		// The emission interval, rounded up so the rate is never exceeded.
		l.Kind, l.Capacity, l.Width = Token, s.Burst, (s.Period+s.Rate-1)/s.Rate
	}
	return l
}

// Names returns a policy's ID and definition: its name, then a fingerprint
// of what lays its counters out (the ID: ratelimit.Policy.ID), or of its
// whole definition, every rate and the lease's terms included (chunk and
// hold, 0 when not leased).
//
// The ID's fingerprint covers everything that decides how the counters
// are laid out and what they mean: the algorithm they count by, the
// penalty, leasing, each limit's period, kind and sub-buckets, and
// Version, which changes whenever the stores lay counters out
// differently. It leaves out a rate whose counts mean the same under any
// rate (a window's or a sub-bucket's cost), a log's (a policy of another
// rate lays the ring out anew for its own, keeping the newest times:
// LogPointerBase), a token bucket's rate and burst (its TAT carries the
// emission interval it was written in: TokenTAT) and a Concurrent limit's
// slots, so that policies that differ only there share their counters.
func Names(name string, alg Algorithm, specs []Spec, block int64, chunk, hold int64) (id, def string) {
	leased := chunk > 0
	alg = Counting(alg, leased)
	fp, df := sha256.New(), sha256.New()
	both := io.MultiWriter(fp, df)
	fmt.Fprintf(both, "layout%d|%d|%d", Version, alg, block)
	if leased {
		fmt.Fprint(fp, "|lease")
		fmt.Fprintf(df, "|lease%d/%d", chunk, hold)
	}
	for _, s := range specs {
		l := limitOf(alg, s)
		if s.Concurrent {
			fmt.Fprintf(df, "|c%d/%d", s.Rate, s.Period)
			fmt.Fprintf(fp, "|c%d", s.Period)
			continue
		}
		burst := int64(0)
		if l.Kind == Token {
			burst = s.Burst
		}
		fmt.Fprintf(df, "|%d/%d/%d/%d/%d", s.Rate, s.Period, l.Kind, l.N, burst)
		fmt.Fprintf(fp, "|%d/%d/%d", s.Period, l.Kind, l.N)
	}
	return name + ":" + hex.EncodeToString(fp.Sum(nil)[:8]), name + ":" + hex.EncodeToString(df.Sum(nil)[:8])
}
