package memory

import (
	"math"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// This file is the reference of the algorithms, one limit at a time:
// evaluate at a time and a cost, report, charge, refund. The Redis script
// (lua/, script.lua and after) mirrors it: the same state (internal/layout),
// the same integer arithmetic (microseconds; the approximation's one
// weighted product in IEEE doubles, computed in the same order), the same
// order of decisions. The conformance suite (store/storetest) holds the
// two to identical answers.

// eval is one limit of one identity evaluated at a time t (never earlier
// than the last charge) for a cost c.
type eval struct {
	// used: buckets, fixed: the cost counted; token: the TAT, pending
	// reservations included, clamped to t;
	// approx: the current window's cost. total: buckets: the ring's sum
	// once the sub-buckets that left it are taken out; approx: the
	// previous window's cost.
	used, total int64
	avail       int64 // the cost admissible at t (≥ 0)
	retry       int64 // 0: c fits at t; -1: c never fits; else µs until it fits
}

// evaluate computes e for one limit at time t and cost c. A cost above the
// capacity is answered before any arithmetic on it, so no cost, however
// large, can overflow; times are subtracted before they are added, so no
// sum of times passes 2^53 (exact in Redis Lua) before 2175 (see ratelimit.MaxSpan).
func evaluate(k *counters, t int64, p *layout.Limit, c int64) (e eval) {
	st := k.st
	switch p.Kind {
	case layout.Log:
		// Cost c fits at t when the units of the log and of the pending
		// reservations that count after t-Period are at most capacity-c:
		// the c-th oldest of the last capacity units is older than that.
		e.avail = logAvail(k, p, t)
		if c > p.Capacity {
			e.retry = -1
		} else if free := logUnit(k, p, c-1) + p.Period; free > t {
			e.retry = free - t
		}
	case layout.Buckets:
		w, n1, pend := p.Width, p.N+1, k.pend
		k, h := t/w, st[layout.MemTime]/w
		cnt, lat := st[p.Mem+1:p.Mem+1+int(n1)], st[p.Mem+1+int(n1):p.Mem+1+2*int(n1)]
		if k-h < n1 {
			// Buckets h-n .. k-n-1 left the ring; their slots follow h's.
			e.total = st[p.Mem]
			for b := h + 1; b <= k; b++ {
				e.total -= cnt[b%n1]
			}
			e.used = e.total
			// The edge bucket k-n counts until its latest admission + Period.
			if s := (k + 1) % n1; cnt[s] != 0 && lat[s] <= t-k*w {
				e.used -= cnt[s]
			}
		}
		// Places in line (leases recorded ahead) are newer than every
		// sub-bucket: each counts until its time + Period.
		for _, r := range pend {
			if r.at+p.Period > t {
				e.used += r.cost
			}
		}
		e.avail = max(p.Capacity-e.used, 0) // a settle's debt or a lower rate can count more
		switch {
		case c > p.Capacity:
			e.retry = -1
		case e.used+c > p.Capacity:
			// Counted buckets, oldest first, free up one Period after their
			// latest admission: k-n (unless it left already) .. h; then
			// the places in line, at their time + Period.
			need, freed := e.used+c-p.Capacity, int64(0)
			for b := k - p.N; b <= h && e.retry == 0; b++ {
				s := b % n1
				if cnt[s] == 0 || b == k-p.N && lat[s] <= t-k*w {
					continue
				}
				if freed += cnt[s]; freed >= need {
					e.retry = (b+p.N)*w + lat[s] - t
				}
			}
			for _, r := range pend {
				if e.retry != 0 {
					break
				}
				if r.at+p.Period > t {
					if freed += r.cost; freed >= need {
						e.retry = r.at + p.Period - t
					}
				}
			}
		}
	case layout.Fixed:
		if st[p.Mem] == t/p.Width {
			e.used = st[p.Mem+1]
		}
		e.avail = max(p.Capacity-e.used, 0)
		switch {
		case c > p.Capacity:
			e.retry = -1
		case e.used+c > p.Capacity:
			e.retry = (t/p.Width+1)*p.Width - t
		}
	case layout.Token:
		// In the interval the TAT was written in, against this policy's
		// burst (internal/layout's token.go).
		// A lease is charged at its stamp: the TAT it starts from is no
		// earlier.
		w := tokenWidth(st, p)
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
	case layout.Approx:
		e.used, e.total = approxWindows(st, p, t)
		e.avail = approxAvail(p, t, e.used, e.total)
		switch {
		case c > p.Capacity:
			e.retry = -1
		case c > e.avail:
			e.retry = approxRetry(st, p, t, e, c)
		}
	case layout.Concurrent:
		// A request takes one slot, whatever its cost. Denied, it waits
		// until a slot whose holder stopped renewing it could lapse: the
		// end of this epoch for the last one's, else of the next.
		_, cur, prev := layout.SlotsRolled(st[p.Mem], st[p.Mem+1], st[p.Mem+2], t, p.Width)
		e.used, e.total = cur+prev, cur
		e.avail = max(p.Capacity-e.used, 0)
		if e.used >= p.Capacity {
			e.retry = slotLapse(t, p.Width, prev)
		}
	}
	return e
}

// slotLapse is how long from t until a slot of a Concurrent limit could
// lapse unrenewed: the end of t's epoch when the epoch before recorded
// some (prev), else the end of the next.
func slotLapse(t, w, prev int64) int64 {
	end := (t/w + 1) * w
	if prev == 0 {
		end += w
	}
	return end - t
}

// report computes the remaining cost and the time until the whole quota is
// back for one limit evaluated at t (e), after charging ch recorded at at
// (t, or a lease's stamp).
func report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	st := k.st
	rem = e.avail - ch
	switch p.Kind {
	case layout.Log:
		newest := logUnit(k, p, p.Capacity-1)
		if ch > 0 {
			newest = max(newest, at)
		}
		reset = max(newest+p.Period-t, 0)
	case layout.Buckets:
		// The newest that counts: the charge, or a place in line (newer
		// than every sub-bucket), else a sub-bucket.
		newest := int64(-1)
		if n := len(k.pend); n > 0 {
			newest = k.pend[n-1].at
		}
		if ch > 0 {
			newest = max(newest, at)
		}
		if newest >= 0 {
			return rem, max(newest+p.Period-t, 0)
		}
		w, n1 := p.Width, p.N+1
		k, h := t/w, st[layout.MemTime]/w
		cnt, lat := st[p.Mem+1:p.Mem+1+int(n1)], st[p.Mem+1+int(n1):p.Mem+1+2*int(n1)]
		if k-h >= n1 {
			return rem, 0
		}
		for b := h; b >= k-p.N; b-- {
			s := b % n1
			if cnt[s] == 0 || b == k-p.N && lat[s] <= t-k*w {
				continue
			}
			return rem, (b+p.N)*w + lat[s] - t
		}
	case layout.Fixed:
		if e.used+ch > 0 {
			reset = (t/p.Width+1)*p.Width - t
		}
	case layout.Token:
		w := tokenWidth(k.st, p)
		ahead := (tokenAfter(k, t, p, e, ch) - t) + ch*w // the TAT after the charge, from t
		rem = 0
		if x := layout.TokenRoom(p.Capacity, w) - ahead; x > 0 {
			rem = x / w
		}
		reset = ahead
	case layout.Approx:
		k := t / p.Width
		if e.used+ch > 0 {
			reset = (k+2)*p.Width - t
		} else if e.total > 0 {
			reset = (k+1)*p.Width - t
		}
	case layout.Concurrent:
		// One slot per request; every slot could lapse by the end of the
		// next epoch (this one's recorded now, e.total, or by a charge).
		rem = e.avail
		if ch > 0 {
			rem--
		}
		if cur := e.total + min(ch, 1); cur > 0 {
			reset = slotLapse(t, p.Width, 0)
		} else if e.used > 0 {
			reset = slotLapse(t, p.Width, e.used)
		}
	}
	return rem, reset
}

// refill returns how long, after charging ch at t (or a lease at its
// stamp), the limit admits no more than rem, what remains: until the
// first of its quota comes back, if nothing more is charged. It may say
// less, never more (the approximation says a microsecond less). With its
// whole quota there, it is how long the limit admits no more than it.
func refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	st, w := k.st, p.Width
	if p.Kind == layout.Concurrent {
		return 0 // a slot frees when a request ends: no claim
	}
	ahead := len(k.pend) > 0 && k.pend[len(k.pend)-1].at > t
	if ahead && (k.reserves || p.Kind == layout.Token) || p.Kind == layout.Token && k.stamp > 0 {
		// Places in line released after t (reservations; for a token
		// bucket, leases too): a charge before a release can leave what
		// the release will find as it was, so what is left does not fall
		// one unit per unit charged; no claim is made. (A window counts
		// a lease ahead from its stamp, as any charge.)
		return 0
	}
	// A window's first unit to leave is its oldest counted one, or one
	// charged from t on, leases ahead included, which leaves a Period
	// after t at the earliest.
	first := t
	leaves := func() int64 { return first + p.Period - t }
	switch p.Kind {
	case layout.Log:
		if e.avail < p.Capacity {
			first = min(first, logUnit(k, p, e.avail)) // its oldest counted unit
		}
		return leaves()
	case layout.Buckets:
		// The oldest sub-bucket still counting leaves first, whole; with
		// none, what is charged now leaves after Period. When it is
		// neither the edge one, the next nor the current one (whose
		// latest admission is the last charge), and some of the quota
		// remains, the claim stops where the one after the edge and the
		// next could leave at the earliest: the Redis store knows those
		// from the fields it reads anyway, where finding the oldest would
		// take another read. With nothing remaining, the claim is exact
		// (a client told r=0 needs t).
		n1 := p.N + 1
		kk, h := t/w, st[layout.MemTime]/w
		if kk-h < n1 {
			cnt, lat := st[p.Mem+1:p.Mem+1+int(n1)], st[p.Mem+1+int(n1):p.Mem+1+2*int(n1)]
			for b := kk - p.N; b <= h; b++ {
				s := b % n1
				if cnt[s] != 0 && (b != kk-p.N || lat[s] > t-kk*w) {
					if b > kk-p.N+1 && b != kk && rem > 0 {
						return min((kk+2)*w-t, p.Period)
					}
					return (b+p.N)*w + lat[s] - t
				}
			}
		}
		// No sub-bucket counts: the oldest place in line that does
		// (released by t, not yet folded), or one charged from t.
		for _, r := range k.pend {
			if r.at+p.Period > t {
				first = min(first, r.at)
				break
			}
		}
		return leaves()
	case layout.Token:
		tw := tokenWidth(st, p)
		room := layout.TokenRoom(p.Capacity, tw)
		x := room - ((tokenAfter(k, t, p, e, ch) - t) + ch*tw) // the room the bucket has, µs
		if x >= room {
			return w // full: a token comes back one interval after one is used
		}
		return (rem+1)*tw - x
	case layout.Approx:
		kk := t / w
		end := (kk+1)*w - t
		cur, prev := e.used+ch, e.total
		m := p.Capacity - cur - (rem + 1)
		if prev == 0 || m < 0 {
			return end
		}
		d := int64(math.Floor(float64(w) - float64(m)*float64(w)/float64(prev)))
		return min(max(kk*w+d-t-1, 0), end)
	}
	return (t/w+1)*w - t // fixed: what is left of the window
}

// charge adds cost c to one limit's fields at time t (e is its evaluation
// at t), t being no earlier than any time the fields hold. Field layout.MemTime is
// set by the caller once every limit is charged.
func charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	switch p.Kind {
	case layout.Log, layout.Token, layout.Buckets:
		chargeUnits(st, t, p, c)
	case layout.Fixed:
		st[p.Mem] = t / p.Width
		st[p.Mem+1] = e.used + c
	case layout.Approx:
		st[p.Mem], st[p.Mem+1], st[p.Mem+2] = t/p.Width, e.used+c, e.total
	case layout.Concurrent:
		// One slot, whatever the cost.
		ep, cur, prev := layout.SlotsRolled(st[p.Mem], st[p.Mem+1], st[p.Mem+2], t, p.Width)
		st[p.Mem], st[p.Mem+1], st[p.Mem+2] = ep, cur+1, prev
	}
}

// refund undoes, as far as it still counts at now, a charge of cost c made
// at time at on one limit, never below zero and never un-charging another
// charge's units. tat is the token bucket's TAT right after that charge,
// and sameGen reports that no refund came between the charge and this one.
func refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
	switch p.Kind {
	case layout.Log:
		if at+p.Period > now { // else it counts no more: nothing to undo
			refundLog(st, at, p, c)
		}
	case layout.Buckets:
		n1 := p.N + 1
		b, h := at/p.Width, st[layout.MemTime]/p.Width
		if b <= h && b > h-n1 {
			s := p.Mem + 1 + int(b%n1)
			back := min(c, st[s])
			st[s] -= back
			st[p.Mem] -= back
		}
	case layout.Fixed:
		if st[p.Mem] == at/p.Width {
			st[p.Mem+1] -= min(c, st[p.Mem+1])
		}
	case layout.Token:
		// While only charges followed it, the charge still counts by at
		// least TAT-after-it minus the time of the latest charge since (the
		// debt it added can only have run out between charges; every
		// charge in the fields, a folded reservation included, was made at
		// or before layout.MemTime), and by at most its own cost. Another refund in
		// between may have lowered the TAT below what that bound assumes:
		// then nothing is given back (the charge stays, which never
		// over-admits). Pending reservations are not in the TAT: they
		// are charged over it, and a lower TAT never makes them count less.
		// A bucket written in another interval since (which bumps the
		// refund count) gives nothing back either.
		if sameGen && st[p.Mem+1] == p.Width {
			st[p.Mem] -= min(c*p.Width, max(tat-st[layout.MemTime], 0))
		}
	case layout.Approx:
		switch k := at / p.Width; st[p.Mem] {
		case k:
			st[p.Mem+1] -= min(c, st[p.Mem+1])
		case k + 1:
			st[p.Mem+2] -= min(c, st[p.Mem+2])
		}
	}
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

// chargeBuckets adds c units at time t to sub-buckets: the ring moves to
// t's (advanceBuckets), which takes the units, t its latest admission.
func chargeBuckets(st []int64, t int64, p *layout.Limit, c int64) {
	advanceBuckets(st, t, p)
	w, n1 := p.Width, p.N+1
	k := t / w
	st[p.Mem+1+int(k%n1)] += c
	st[p.Mem+1+int(n1)+int(k%n1)] = t - k*w
	st[p.Mem] += c
}

// advanceBuckets moves a sub-bucket ring from the last charge's sub-bucket
// (layout.MemTime) to t's: the sub-buckets it passes, t's included, are
// cleared and leave its sum. Every charge that moves layout.MemTime moves
// the rings first, so that they always hold the sub-buckets up to it.
func advanceBuckets(st []int64, t int64, p *layout.Limit) {
	w, n1 := p.Width, p.N+1
	k, h := t/w, st[layout.MemTime]/w
	cnt, lat := st[p.Mem+1:p.Mem+1+int(n1)], st[p.Mem+1+int(n1):p.Mem+1+2*int(n1)]
	if k-h >= n1 {
		clear(cnt)
		clear(lat)
		st[p.Mem] = 0
		return
	}
	for b := h + 1; b <= k; b++ {
		st[p.Mem] -= cnt[b%n1]
		cnt[b%n1], lat[b%n1] = 0, 0
	}
}
