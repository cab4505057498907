package memory

import "github.com/ratelimitkit/ratelimit/internal/layout"

// token is TokenBucket, GCRA: the theoretical arrival time (TAT) and the
// emission interval it was written in (internal/layout's token.go;
// lua/token.lua).
type token struct{}

// evaluate works in the interval the TAT was written in, against this
// policy's burst. A lease is charged at its stamp: the TAT it starts from
// is no earlier.
func (token) evaluate(k *counters, t int64, p *layout.Limit, c int64) (e eval) {
	w := tokenWidth(k.st, p)
	e.used = max(tokenTAT(k, p), t, k.stamp)
	limit := layout.TokenRoom(p.Capacity, w)
	if x := limit - (e.used - t); x > 0 {
		e.avail = x / w
	}
	// A cost up to the burst always fits a full bucket: its room (a
	// burst × interval at most MaxSpanUS, as NewPolicy checks, or
	// held to it in another policy's interval) is no less than the
	// cost's. A lease takes the hold besides: one whose hold and cost
	// pass a full bucket of this limit never fits.
	if c > p.Capacity || k.stamp > 0 && (k.stamp-t)+layout.TokenRoom(c, p.Width) > layout.TokenRoom(p.Capacity, p.Width) {
		e.retry = -1
	} else if next := (e.used - t) + layout.TokenRoom(c, w); next > limit {
		e.retry = next - limit
	}
	return e
}

func (token) report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	w := tokenWidth(k.st, p)
	ahead := (tokenAfter(k, t, p, e, ch) - t) + ch*w // the TAT after the charge, from t
	if x := layout.TokenRoom(p.Capacity, w) - ahead; x > 0 {
		rem = x / w
	}
	return rem, ahead
}

func (token) refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	tw := tokenWidth(k.st, p)
	room := layout.TokenRoom(p.Capacity, tw)
	x := room - ((tokenAfter(k, t, p, e, ch) - t) + ch*tw) // the room the bucket has, µs
	if x >= room {
		return p.Width // full: a token comes back one interval after one is used
	}
	return (rem+1)*tw - x
}

func (token) charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	chargeToken(st, t, p, c)
}

// refund: while only charges followed it, the charge still counts by at
// least TAT-after-it minus the time of the latest charge since (the debt
// it added can only have run out between charges; every charge in the
// fields, a folded reservation included, was made at or before
// layout.MemTime), and by at most its own cost. Another refund in between
// may have lowered the TAT below what that bound assumes: then nothing is
// given back (the charge stays, which never over-admits). Pending
// reservations are not in the TAT: they are charged over it, and a lower
// TAT never makes them count less. A bucket written in another interval
// since (which bumps the refund count) gives nothing back either.
func (token) refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
	if sameGen && st[p.Mem+1] == p.Width {
		st[p.Mem] -= min(c*p.Width, max(tat-st[layout.MemTime], 0))
	}
}

// chargeToken adds c units at time t to a token bucket's TAT, in the
// interval it was written in, and notes that interval.
func chargeToken(st []int64, t int64, p *layout.Limit, c int64) {
	w := tokenWidth(st, p)
	st[p.Mem], st[p.Mem+1] = layout.TokenCharge(st[p.Mem], t, c, w), w
}

// tokenAfter is the TAT, before the charge ch, that a token bucket
// evaluated at t (e) reports from: the one it charged from, or, when
// nothing was charged, the one any request sees (a lease's stamp pushed
// its own, which says what a lease could get, not what the bucket holds).
func tokenAfter(k *counters, t int64, p *layout.Limit, e *eval, ch int64) int64 {
	if ch > 0 {
		return e.used
	}
	return max(tokenTAT(k, p), t)
}

// tokenTAT is a token bucket's theoretical arrival time with the pending
// reservations charged in order of release, in the interval it was
// written in.
func tokenTAT(k *counters, p *layout.Limit) int64 {
	tat, w := k.st[p.Mem], tokenWidth(k.st, p)
	for _, r := range k.pend {
		tat = max(tat, r.at) + r.cost*w
	}
	return tat
}

// tokenWidth is the emission interval a token bucket's TAT was written in:
// its field after the TAT, or the limit's own when it was never written.
func tokenWidth(st []int64, p *layout.Limit) int64 {
	if w := st[p.Mem+1]; w != 0 {
		return w
	}
	return p.Width
}
