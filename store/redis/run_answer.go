package redis

import (
	"strings"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// A run's answer (script.lua, 'm') gives each limit of an admitted call
// only what its kind does not settle: an admission by the lean path
// reports the same reset and mark for every call of a kind but for its
// remaining and its refill. Each number left out saves Redis about a
// thousand instructions a call (bench/luacost.sh: 4.6% of a decision on
// three sliding windows) and go-redis a number to read.

// runShape is how a run's answer gives one limit's reset and mark.
type runShape uint8

const (
	// runPeriod: remaining, refill; the reset is the period, no mark
	// (a sliding window's sub-buckets and a log: a charge now counts for
	// one period).
	runPeriod runShape = iota
	// runRefill: remaining, refill; the reset is the refill, no mark (a
	// fixed window's quota all comes back at its end).
	runRefill
	// runReset: remaining, reset, refill; no mark (the approximate
	// sliding window).
	runReset
	// runMark: remaining, reset, refill; the mark is now plus the reset
	// (a token bucket's TAT).
	runMark
)

// shapeOf is the shape of a limit of kind k in a run's answer.
func shapeOf(k layout.Kind) runShape {
	switch k {
	case layout.Fixed:
		return runRefill
	case layout.Approx:
		return runReset
	case layout.Token:
		return runMark
	}
	return runPeriod
}

// sendsReset says whether a run's answer gives the limit's reset.
func (s runShape) sendsReset() bool { return s >= runReset }

// runLimit is what restoring a limit's part of a run's answer needs: its
// shape and its period (µs), a runPeriod limit's reset.
type runLimit struct {
	shape  runShape
	period int64
}

// runLimits lists the runLimit of each limit of a policy's numbers (see
// policyNumbers).
func runLimits(nums []int64) []runLimit {
	var out []runLimit
	for i := qHead; i+layout.Stride <= len(nums); i += layout.Stride {
		out = append(out, runLimit{shape: shapeOf(layout.Kind(nums[i+layout.PKind-1])), period: nums[i+layout.PPeriod-1]})
	}
	return out
}

// runResetLine is the prelude's RUNRESET: the kinds whose reset a run's
// answer gives, by their names in the prelude.
func runResetLine() string {
	var b strings.Builder
	b.WriteString("local RUNRESET = {")
	first := true
	for _, k := range layout.Kinds {
		if !shapeOf(k.Kind).sendsReset() {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		b.WriteString("[" + k.Lua + "] = true")
	}
	b.WriteString("}\n")
	return b.String()
}

// restore writes into l (a limit's numbers in a reply, limitAt) the
// limit's part of a run's answer from v, at the call's now, and returns
// how many numbers of v it read.
func (r runLimit) restore(l, v []int64, now int64) int {
	l[lRemaining], l[lMark] = v[0], 0
	if !r.shape.sendsReset() {
		l[lRefill] = v[1]
		l[lReset] = r.period
		if r.shape == runRefill {
			l[lReset] = v[1]
		}
		return 2
	}
	l[lReset], l[lRefill] = v[1], v[2]
	if r.shape == runMark {
		l[lMark] = now + v[1]
	}
	return 3
}

// width is how many numbers the limit takes in a run's answer.
func (r runLimit) width() int {
	if r.shape.sendsReset() {
		return 3
	}
	return 2
}
