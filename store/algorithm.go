package store

import (
	"math"
	"slices"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/lua"
)

// This file is the reference implementation of the counters. The Lua
// scripts in package lua mirror it: the same state, the same integer
// arithmetic (microseconds; the approximation's one weighted product in
// IEEE doubles, computed in the same order), the same order of decisions.
// Tests hold the two to identical answers.
//
// State of one identity under one policy is a flat array of integers and
// a short list of pending reservations. Fields 0 to 3 belong to the
// identity:
//
//	fTime     the time of the last charge (µs since the Unix epoch); a
//	          request is never evaluated at an earlier time, so a clock
//	          that steps back makes waits longer, never shorter
//	fBlock    when the penalty of BlockFor ends (µs), 0 when none
//	fBlockLim the index of the limit the penalty reports
//	fGen      in its low 32 bits, how many refunds the identity has had: a
//	          token-bucket refund is exact only while no other refund came
//	          between its charge and itself (see refund); above them
//	          (genEpoch), how many times Reset cleared the identity while it
//	          lived: a charge made before a Reset is never refunded after it
//
// then each limit owns a run of fields starting at its offset:
//
//	CounterBuckets  the sum of the ring, then n+1 sub-bucket costs, then
//	                n+1 offsets of each sub-bucket's latest admission within
//	                it (a ring indexed by bucket % (n+1)); a sub-bucket stops
//	                counting one Period after its latest admission
//	CounterLog      the ring's oldest slot, then Rate slots: the times of the
//	                last Rate units of cost charged up to fTime, oldest first
//	                from that slot
//	CounterFixed    the window index, and the cost counted in it
//	CounterToken    the theoretical arrival time (TAT) of the next token,
//	                after the charges made up to fTime
//	CounterApprox   the window index, its cost, and the previous window's
//
// Pending reservations (Reserver) are admissions whose release time lies
// ahead of fTime: each is a release time and a cost, kept in order of
// release, shared by every limit of the identity (only a log and a token
// bucket reserve). They count from their release time on but are kept out
// of the fields until a charge at or after that time folds them in (see
// settle), so that a waiter who leaves takes its units back exactly,
// whatever its place in line: the log then still holds the units they
// would have pushed out, and a token bucket's TAT never included them.
//
// Redis keeps the same numbers in one hash (lua/*.lua name the fields;
// a log's slots are packed 16 digits each into strings of a few slots;
// the pending reservations are the field q).

// Identity fields.
const (
	fTime     = 0
	fBlock    = 1
	fBlockLim = 2
	fGen      = 3
	fFirst    = 4 // the first limit's first field
)

// genEpoch is one Reset in fGen (see above); lua/reset.lua and
// lua/refund.lua use the same number.
const genEpoch = 1 << 32

// reservation is one pending reservation: cost units released at time at.
type reservation struct{ at, cost int64 }

// maxPending is the most pending reservations (distinct release times)
// an identity keeps. A request that would need one more is not reserved:
// it is denied with the wait until it fits, and Limiter.Wait waits that
// long and asks again.
const maxPending = lua.MaxPending

// counters is one identity's state as the algorithms read it.
type counters struct {
	st   []int64
	pend []reservation // in order of release
	held int64         // the units pend holds
}

// param is one limit's arguments.
type param struct {
	kind     ratelimit.Counter
	capacity int64 // Rate, or Burst for the token bucket
	width    int64 // µs: a sub-bucket (buckets), the emission interval (token), the period (others)
	n        int64 // sub-buckets (buckets); 1 otherwise
	period   int64 // µs
	off      int   // first field in the memory store's layout
}

// params fills ps with the policy's per-limit arguments and returns them
// with the number of fields the state takes in the memory store.
func params(p *ratelimit.Policy, ps *[ratelimit.MaxLimits]param) ([]param, int) {
	period, width, buckets, burst := p.Compiled()
	off := fFirst
	for i := range width {
		pp := param{kind: p.Counter(i), capacity: p.Limit(i).Rate, width: width[i], n: buckets[i], period: period[i], off: off}
		switch pp.kind {
		case ratelimit.CounterBuckets:
			off += 1 + 2*int(pp.n+1)
		case ratelimit.CounterLog:
			off += 1 + int(pp.capacity)
		case ratelimit.CounterFixed:
			off += 2
		case ratelimit.CounterToken:
			pp.capacity = burst[i]
			off++
		case ratelimit.CounterApprox:
			off += 3
		}
		ps[i] = pp
	}
	return ps[:len(width)], off
}

// reserves reports whether every limit can reserve a place in line: only
// the log and the token bucket can record an admission in the future.
func reserves(lim []param) bool {
	for _, p := range lim {
		if p.kind != ratelimit.CounterLog && p.kind != ratelimit.CounterToken {
			return false
		}
	}
	return true
}

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
func evaluate(k *counters, t int64, p *param, c int64) (e eval) {
	st := k.st
	switch p.kind {
	case ratelimit.CounterLog:
		// Cost c fits at t when the units of the log and of the pending
		// reservations that count after t-Period are at most capacity-c:
		// the c-th oldest of the last capacity units is older than that.
		e.avail = logAvail(k, p, t)
		if c > p.capacity {
			e.retry = -1
		} else if free := logUnit(k, p, c-1) + p.period; free > t {
			e.retry = free - t
		}
	case ratelimit.CounterBuckets:
		w, n1 := p.width, p.n+1
		k, h := t/w, st[fTime]/w
		cnt, lat := st[p.off+1:p.off+1+int(n1)], st[p.off+1+int(n1):p.off+1+2*int(n1)]
		if k-h < n1 {
			// Buckets h-n .. k-n-1 left the ring; their slots follow h's.
			e.total = st[p.off]
			for b := h + 1; b <= k; b++ {
				e.total -= cnt[b%n1]
			}
			e.used = e.total
			// The edge bucket k-n counts until its latest admission + Period.
			if s := (k + 1) % n1; cnt[s] != 0 && lat[s] <= t-k*w {
				e.used -= cnt[s]
			}
		}
		e.avail = p.capacity - e.used
		switch {
		case c > p.capacity:
			e.retry = -1
		case e.used+c > p.capacity:
			// Counted buckets, oldest first, free up one Period after their
			// latest admission: k-n (unless it left already) .. h.
			need, freed := e.used+c-p.capacity, int64(0)
			for b := k - p.n; b <= h; b++ {
				s := b % n1
				if cnt[s] == 0 || b == k-p.n && lat[s] <= t-k*w {
					continue
				}
				if freed += cnt[s]; freed >= need {
					e.retry = (b+p.n)*w + lat[s] - t
					break
				}
			}
		}
	case ratelimit.CounterFixed:
		if st[p.off] == t/p.width {
			e.used = st[p.off+1]
		}
		e.avail = p.capacity - e.used
		switch {
		case c > p.capacity:
			e.retry = -1
		case e.used+c > p.capacity:
			e.retry = (t/p.width+1)*p.width - t
		}
	case ratelimit.CounterToken:
		e.used = max(tokenTAT(k, p), t)
		limit := p.capacity * p.width // ≤ MaxSpan: NewPolicy bounds burst × interval
		if x := limit - (e.used - t); x > 0 {
			e.avail = x / p.width
		}
		if c > p.capacity {
			e.retry = -1
		} else if next := (e.used - t) + c*p.width; next > limit {
			e.retry = next - limit
		}
	case ratelimit.CounterApprox:
		e.used, e.total = approxWindows(st, p, t)
		e.avail = approxAvail(p, t, e.used, e.total)
		switch {
		case c > p.capacity:
			e.retry = -1
		case c > e.avail:
			e.retry = approxRetry(st, p, t, e, c)
		}
	}
	return e
}

// report computes the remaining cost and the time until the whole quota is
// back for one limit evaluated at t (e), after charging ch at t.
func report(k *counters, t int64, p *param, e *eval, ch int64) (rem, reset int64) {
	st := k.st
	rem = e.avail - ch
	switch p.kind {
	case ratelimit.CounterLog:
		newest := logUnit(k, p, p.capacity-1)
		if ch > 0 {
			newest = max(newest, t)
		}
		reset = max(newest+p.period-t, 0)
	case ratelimit.CounterBuckets:
		if ch > 0 {
			return rem, p.period // its latest admission is now
		}
		w, n1 := p.width, p.n+1
		k, h := t/w, st[fTime]/w
		cnt, lat := st[p.off+1:p.off+1+int(n1)], st[p.off+1+int(n1):p.off+1+2*int(n1)]
		if k-h >= n1 {
			return rem, 0
		}
		for b := h; b >= k-p.n; b-- {
			s := b % n1
			if cnt[s] == 0 || b == k-p.n && lat[s] <= t-k*w {
				continue
			}
			return rem, (b+p.n)*w + lat[s] - t
		}
	case ratelimit.CounterFixed:
		if e.used+ch > 0 {
			reset = (t/p.width+1)*p.width - t
		}
	case ratelimit.CounterToken:
		ahead := (e.used - t) + ch*p.width // the TAT after the charge, from t
		rem = 0
		if x := p.capacity*p.width - ahead; x > 0 {
			rem = x / p.width
		}
		reset = ahead
	case ratelimit.CounterApprox:
		k := t / p.width
		if e.used+ch > 0 {
			reset = (k+2)*p.width - t
		} else if e.total > 0 {
			reset = (k+1)*p.width - t
		}
	}
	return rem, reset
}

// charge adds cost c to one limit's fields at time t (e is its evaluation
// at t), t being no earlier than any time the fields hold. Field fTime is
// set by the caller once every limit is charged.
func charge(st []int64, t int64, p *param, e *eval, c int64) {
	switch p.kind {
	case ratelimit.CounterLog, ratelimit.CounterToken:
		chargeUnits(st, t, p, c)
	case ratelimit.CounterBuckets:
		w, n1 := p.width, p.n+1
		k, h := t/w, st[fTime]/w
		cnt, lat := st[p.off+1:p.off+1+int(n1)], st[p.off+1+int(n1):p.off+1+2*int(n1)]
		if k-h >= n1 {
			clear(cnt)
			clear(lat)
		} else {
			for b := h + 1; b <= k; b++ {
				cnt[b%n1], lat[b%n1] = 0, 0
			}
		}
		cnt[k%n1] += c
		lat[k%n1] = t - k*w
		st[p.off] = e.total + c
	case ratelimit.CounterFixed:
		st[p.off] = t / p.width
		st[p.off+1] = e.used + c
	case ratelimit.CounterApprox:
		st[p.off], st[p.off+1], st[p.off+2] = t/p.width, e.used+c, e.total
	}
}

// chargeUnits adds c units at time t to a log or a token bucket, from its
// fields alone: a charge made now, or a reservation folded in.
func chargeUnits(st []int64, t int64, p *param, c int64) {
	if p.kind == ratelimit.CounterToken {
		st[p.off] = max(st[p.off], t) + c*p.width
		return
	}
	ptr := st[p.off]
	for i := int64(0); i < c; i++ {
		st[p.off+1+int((ptr+i)%p.capacity)] = t
	}
	st[p.off] = (ptr + c) % p.capacity
}

// tokenTAT is a token bucket's theoretical arrival time with the pending
// reservations charged in order of release.
func tokenTAT(k *counters, p *param) int64 {
	tat := k.st[p.off]
	for _, r := range k.pend {
		tat = max(tat, r.at) + r.cost*p.width
	}
	return tat
}

// logUnit returns the time of the i-th oldest (0-based) of the last
// capacity units of a log, its pending reservations' units coming after
// its slots.
func logUnit(k *counters, p *param, i int64) int64 {
	j := k.held + i
	if j < p.capacity {
		return logSlot(k.st, p, j)
	}
	j -= p.capacity
	for _, r := range k.pend {
		if j < r.cost {
			return r.at
		}
		j -= r.cost
	}
	return math.MaxInt64 // not reached: i < capacity
}

// reserve records a reservation of cost c released at t, in order of
// release (after those released at the same time, with which it merges).
func (k *counters) reserve(t, c int64) {
	i := len(k.pend)
	for i > 0 && k.pend[i-1].at > t {
		i--
	}
	if i > 0 && k.pend[i-1].at == t {
		k.pend[i-1].cost += c
	} else {
		k.pend = slices.Insert(k.pend, i, reservation{t, c})
	}
	k.held += c
}

// fold charges the pending reservations released by t into the fields,
// in order of release, before a charge at t.
func (k *counters) fold(lim []param, t int64) {
	n := 0
	for n < len(k.pend) && k.pend[n].at <= t {
		r := k.pend[n]
		for i := range lim {
			chargeUnits(k.st, r.at, &lim[i], r.cost)
		}
		k.held -= r.cost
		n++
	}
	if n > 0 {
		k.pend = slices.Delete(k.pend, 0, n)
	}
}

// unreserve takes c units of the pending reservation released at t out of
// it, and reports whether there was one.
func (k *counters) unreserve(t, c int64) bool {
	for i, r := range k.pend {
		if r.at == t {
			back := min(c, r.cost)
			k.pend[i].cost -= back
			k.held -= back
			if k.pend[i].cost == 0 {
				k.pend = slices.Delete(k.pend, i, i+1)
			}
			return true
		}
	}
	return false
}

// refund undoes, as far as it still counts at now, a charge of cost c made
// at time at on one limit, never below zero and never un-charging another
// charge's units. tat is the token bucket's TAT right after that charge,
// and sameGen reports that no refund came between the charge and this one.
func refund(st []int64, now, at int64, p *param, c, tat int64, sameGen bool) {
	switch p.kind {
	case ratelimit.CounterLog:
		if at+p.period > now { // else it counts no more: nothing to undo
			refundLog(st, at, p, c)
		}
	case ratelimit.CounterBuckets:
		n1 := p.n + 1
		b, h := at/p.width, st[fTime]/p.width
		if b <= h && b > h-n1 {
			s := p.off + 1 + int(b%n1)
			back := min(c, st[s])
			st[s] -= back
			st[p.off] -= back
		}
	case ratelimit.CounterFixed:
		if st[p.off] == at/p.width {
			st[p.off+1] -= min(c, st[p.off+1])
		}
	case ratelimit.CounterToken:
		// While only charges followed it, the charge still counts by at
		// least TAT-after-it minus the time of the latest charge since (the
		// debt it added can only have run out between charges; every
		// charge in the fields, a folded reservation included, was made at
		// or before fTime), and by at most its own cost. Another refund in
		// between may have lowered the TAT below what that bound assumes:
		// then nothing is given back (the charge stays, which never
		// over-admits). Pending reservations are not in the TAT: they
		// are charged over it, and a lower TAT never makes them count less.
		if sameGen {
			st[p.off] -= min(c*p.width, max(tat-st[fTime], 0))
		}
	case ratelimit.CounterApprox:
		switch k := at / p.width; st[p.off] {
		case k:
			st[p.off+1] -= min(c, st[p.off+1])
		case k + 1:
			st[p.off+2] -= min(c, st[p.off+2])
		}
	}
}

// logSlot returns the time of the i-th oldest unit of a log.
func logSlot(st []int64, p *param, i int64) int64 {
	return st[p.off+1+int((st[p.off]+i)%p.capacity)]
}

// logAvail counts the last capacity units of a log (pending reservations
// included) that stopped counting by t: its oldest units, found by binary
// search (times grow from the oldest).
func logAvail(k *counters, p *param, t int64) int64 {
	lo, hi := int64(0), p.capacity
	for lo < hi {
		mid := (lo + hi) / 2
		if logUnit(k, p, mid)+p.period <= t {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// refundLog takes c units charged at time at out of a log. The units they
// had replaced are gone, so units that count no less stand in for them:
// every unit a log has forgotten was its oldest when it left, so it is no
// newer than any unit the log holds, and it was at least one Period older
// than the unit that replaced it, so no newer than the newest minus a
// Period. The stand-ins take the earlier of the two times.
func refundLog(st []int64, at int64, p *param, c int64) {
	r := p.capacity
	ring := make([]int64, r)
	found := int64(0)
	for i := range ring {
		ring[i] = logSlot(st, p, int64(i))
		if ring[i] == at {
			found++
		}
	}
	take := min(c, found)
	if take == 0 {
		return
	}
	stand := min(ring[0], ring[r-1]-p.period)
	out := ring[:0]
	for _, v := range ring {
		if v == at && take > 0 {
			take--
			continue
		}
		out = append(out, v)
	}
	for len(out) < int(r) {
		out = append(out, stand)
	}
	slices.Sort(out)
	st[p.off] = 0
	copy(st[p.off+1:p.off+1+int(r)], out)
}

// approxWindows returns the approximation's current and previous window
// costs as seen at t.
func approxWindows(st []int64, p *param, t int64) (cur, prev int64) {
	switch k := t / p.width; st[p.off] {
	case k:
		return st[p.off+1], st[p.off+2]
	case k - 1:
		return 0, st[p.off+1]
	}
	return 0, 0
}

// approxAvail is the cost the approximation admits at t: the largest a
// with prev × (Period − elapsed)/Period + cur + a ≤ capacity. The weighted
// product is the one computation in doubles; the Lua script does the same
// operations in the same order, so both round alike.
func approxAvail(p *param, t, cur, prev int64) int64 {
	e := t - t/p.width*p.width
	est := float64(float64(prev)*float64(p.width-e)) / float64(p.width)
	a := math.Floor(float64(p.capacity-cur) - est)
	if a < 0 {
		return 0
	}
	return int64(a)
}

// approxRetry finds the least wait after which cost c fits, if nothing is
// charged meanwhile: a guess from the closed form, then corrected one
// microsecond at a time against approxAvail itself, so that waiting the
// answer is enough and one microsecond less is not.
func approxRetry(st []int64, p *param, t int64, e eval, c int64) int64 {
	P := p.width
	k := t / P
	fits := func(x int64) bool {
		cur, prev := approxWindows(st, p, x)
		return approxAvail(p, x, cur, prev) >= c
	}
	var x int64
	if m := p.capacity - e.used - c; m >= 0 && e.total > 0 {
		x = k*P + int64(math.Ceil(float64(P)-float64(m)*float64(P)/float64(e.total)))
	} else if e.used > 0 {
		x = (k+1)*P + int64(math.Ceil(float64(P)-float64(p.capacity-c)*float64(P)/float64(e.used)))
	} else {
		x = (k + 1) * P
	}
	x = min(max(x, t+1), (k+2)*P)
	for i := 0; i < 64 && !fits(x); i++ {
		x++
	}
	for i := 0; i < 64 && x > t+1 && fits(x-1); i++ {
		x--
	}
	return x - t
}
