package ratelimit

import "strconv"

// Algorithm selects how a Policy counts. The zero value is SlidingWindow.
//
// Every algorithm states its guarantee over "windows": a window of length
// Period is a half-open interval of time [s, s+Period), so two requests
// exactly one Period apart never share one.
type Algorithm uint8

const (
	// SlidingWindow is the default. Guarantee: in ANY window of length
	// Period the admitted cost is at most Rate; it never over-admits.
	//
	// How it counts depends on the limit's size, invisibly to callers. A
	// limit with Rate ≤ ExactRateMax and Precision 0 is counted exactly, by
	// a log of the times of its last Rate units of cost (as SlidingLog
	// does): a request is admitted as soon as the window allows it, and
	// Retry-After is the exact wait, rounded up to whole seconds. A larger
	// limit (or one with a Precision set) is counted in Precision sub-buckets
	// (DefaultPrecision), each remembering its cost and the time of its
	// latest admission: a sub-bucket's cost stops counting one Period after
	// that latest admission. Requests that arrive together (a burst) are
	// therefore counted exactly too; requests spread inside one sub-bucket
	// may wait up to one sub-bucket (Period/Precision) longer than an exact
	// log would make them wait, never less.
	SlidingWindow Algorithm = iota

	// FixedWindow counts cost per aligned window [n·Period, (n+1)·Period).
	// Guarantee: at most Rate per aligned window. Known edge: a client can
	// spend Rate at the end of one window and Rate again at the start of the
	// next, so an unaligned window of length Period may see up to 2·Rate.
	// It is the cheapest algorithm (one counter per limit).
	FixedWindow

	// TokenBucket is the generic cell rate algorithm (GCRA): tokens refill
	// one every Period/Rate (the emission interval, rounded up to the
	// microsecond), up to Burst tokens. Guarantee: in any interval of length
	// d the admitted cost is at most Burst + d/(emission interval); over a
	// long run the rate is exactly Rate per Period (never more). With the
	// default Burst = Rate, a full bucket may spend Rate at once and then
	// refills smoothly, so a window of length Period may see up to 2·Rate.
	TokenBucket

	// SlidingLog is the classic sliding log: every limit keeps the times of
	// its last Rate units of cost. Guarantee: in ANY window of length Period
	// the admitted cost is at most Rate, and a request is admitted as soon
	// as that allows (exact; RetryAfter is exact to the microsecond). Memory
	// grows with Rate (16 digits per unit; in Redis about 22 bytes per unit
	// above 32, see README), so Rate is at most MaxLogRate.
	SlidingLog

	// SlidingWindowApprox is the weighted two-window estimate that
	// Cloudflare and go-chi/httprate use: the cost of the previous aligned
	// window, weighted by the part of it the sliding window still covers,
	// plus the cost of the current window. Two counters per limit: the
	// cheapest smooth window. Guarantee: at most Rate per aligned window,
	// and in any window of length Period less than 2·Rate (it assumes the
	// previous window's cost was spread evenly; a client that spent it all
	// at the end can over-admit by up to the previous window's cost times
	// the fraction of the current window elapsed). Choose it knowingly.
	SlidingWindowApprox
)

// String returns the algorithm's name as used by ParsePolicy options and logs.
func (a Algorithm) String() string { return enumName(algorithmNames, uint8(a), "algorithm") }

var algorithmNames = []string{"sliding-window", "fixed-window", "token-bucket", "sliding-log", "sliding-window-approx"}

// enumName returns names[v], or kind(v) for a value without a name.
func enumName(names []string, v uint8, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(int(v)) + ")"
}
