package layout

import "math"

// A token bucket keeps, after its TAT, the emission interval the TAT was
// written in: policies of one ID may differ in rate (a plan change, a
// rolling deploy), and share the bucket. Its state drains at the interval
// it was written in until a charge rewrites it in the charging policy's
// (TokenTAT); every reader checks it against its own burst. Both stores
// compute these in the same integer steps, and the one product that can
// pass 2^53 in IEEE doubles in the same order, so that Redis's Lua and Go
// agree to the microsecond.

// MaxSpanUS is ratelimit.MaxSpan in microseconds: the furthest ahead of now
// a token bucket's TAT is taken to lie (MAXSPAN in the Redis script).
const MaxSpanUS = 1 << 50

// TokenRoom is a bucket of capacity units of interval µs each, in µs:
// capacity × interval, held to MaxSpanUS. It is a length, never a marker:
// a burst NewPolicy accepts fills at most MaxSpanUS exactly.
func TokenRoom(capacity, interval int64) int64 {
	if capacity >= (MaxSpanUS+interval-1)/interval {
		return MaxSpanUS
	}
	return capacity * interval
}

// TokenTAT returns the TAT tat, written in interval from, rewritten in
// interval to at time t: what is owed at t (tat − t) is as many units of
// to as it was of from, rounded up to the microsecond, at most MaxSpanUS.
// A TAT at or before t owes nothing and is returned as it is.
func TokenTAT(tat, from, to, t int64) int64 {
	if from == to || tat <= t {
		return tat
	}
	d := tat - t
	q, r := d/from, d%from
	if q >= (MaxSpanUS+to-1)/to {
		return t + MaxSpanUS
	}
	return t + min(q*to+int64(math.Ceil(float64(r)*float64(to)/float64(from))), MaxSpanUS)
}

// TokenCharge returns the TAT tat, in interval µs, after c units charged
// at t: c intervals past the later of tat and t, at most MaxSpanUS past t
// (a settle's debt may be any size) unless tat already lies further.
func TokenCharge(tat, t, c, interval int64) int64 {
	next := max(tat, t) + TokenRoom(c, interval)
	if next-t > MaxSpanUS {
		next = max(tat, t+MaxSpanUS)
	}
	return next
}
