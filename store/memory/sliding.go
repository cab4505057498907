package memory

import "github.com/ratelimitkit/ratelimit/internal/layout"

// sliding is SlidingWindow by sub-buckets: N+1 sub-buckets of Width, each
// with its cost and the offset of its latest admission, and the ring's
// sum (lua/sliding.lua).
type sliding struct{}

// buckets returns the costs and latest admissions of a ring's sub-buckets.
func buckets(st []int64, p *layout.Limit) (cnt, lat []int64) {
	n1 := int(p.N + 1)
	return st[p.Mem+1 : p.Mem+1+n1], st[p.Mem+1+n1 : p.Mem+1+2*n1]
}

func (sliding) evaluate(k *counters, t int64, p *layout.Limit, c int64) (e eval) {
	w, n1, pend := p.Width, p.N+1, k.pend
	kk, h := t/w, k.st[layout.MemTime]/w
	cnt, lat := buckets(k.st, p)
	if kk-h < n1 {
		// Buckets h-n .. k-n-1 left the ring; their slots follow h's.
		e.total = k.st[p.Mem]
		for b := h + 1; b <= kk; b++ {
			e.total -= cnt[b%n1]
		}
		e.used = e.total
		// The edge bucket k-n counts until its latest admission + Period.
		if s := (kk + 1) % n1; cnt[s] != 0 && lat[s] <= t-kk*w {
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
		e.retry = slidingRetry(k, t, p, e.used+c-p.Capacity)
	}
	return e
}

// slidingRetry is how long from t until need units of cost leave: counted
// buckets, oldest first, free up one Period after their latest admission:
// k-n (unless it left already) .. h; then the places in line, at their
// time + Period.
func slidingRetry(k *counters, t int64, p *layout.Limit, need int64) int64 {
	w, n1 := p.Width, p.N+1
	kk, h := t/w, k.st[layout.MemTime]/w
	cnt, lat := buckets(k.st, p)
	freed := int64(0)
	for b := kk - p.N; b <= h; b++ {
		s := b % n1
		if cnt[s] == 0 || b == kk-p.N && lat[s] <= t-kk*w {
			continue
		}
		if freed += cnt[s]; freed >= need {
			return (b+p.N)*w + lat[s] - t
		}
	}
	for _, r := range k.pend {
		if r.at+p.Period > t {
			if freed += r.cost; freed >= need {
				return r.at + p.Period - t
			}
		}
	}
	return 0
}

// report: the newest that counts: the charge, or a place in line (newer
// than every sub-bucket), else a sub-bucket.
func (sliding) report(k *counters, t int64, p *layout.Limit, e *eval, ch, at int64) (rem, reset int64) {
	rem = e.avail - ch
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
	kk, h := t/w, k.st[layout.MemTime]/w
	cnt, lat := buckets(k.st, p)
	if kk-h >= n1 {
		return rem, 0
	}
	for b := h; b >= kk-p.N; b-- {
		s := b % n1
		if cnt[s] == 0 || b == kk-p.N && lat[s] <= t-kk*w {
			continue
		}
		return rem, (b+p.N)*w + lat[s] - t
	}
	return rem, 0
}

// refill: the oldest sub-bucket still counting leaves first, whole; with
// none, what is charged now leaves after Period. When it is neither the
// edge one nor the current one (whose latest admission is the last
// charge), and some of the quota remains, the claim stops where the one
// after the edge could leave at the earliest: the Redis store reads the
// edge and the current sub-bucket anyway, where finding the oldest would
// take another read. With nothing remaining, the claim is exact (a client
// told r=0 needs t).
func (sliding) refill(k *counters, t int64, p *layout.Limit, e *eval, ch, rem int64) int64 {
	w, n1 := p.Width, p.N+1
	kk, h := t/w, k.st[layout.MemTime]/w
	if kk-h < n1 {
		cnt, lat := buckets(k.st, p)
		for b := kk - p.N; b <= h; b++ {
			s := b % n1
			if cnt[s] != 0 && (b != kk-p.N || lat[s] > t-kk*w) {
				if b > kk-p.N && b != kk && rem > 0 {
					return min((kk+1)*w-t, p.Period)
				}
				return (b+p.N)*w + lat[s] - t
			}
		}
	}
	// No sub-bucket counts: the oldest place in line that does (released
	// by t, not yet folded), or one charged from t, which leaves a Period
	// after t at the earliest.
	first := t
	for _, r := range k.pend {
		if r.at+p.Period > t {
			first = min(first, r.at)
			break
		}
	}
	return first + p.Period - t
}

func (sliding) charge(st []int64, t int64, p *layout.Limit, e *eval, c int64) {
	chargeBuckets(st, t, p, c)
}

func (sliding) refund(st []int64, now, at int64, p *layout.Limit, c, tat int64, sameGen bool) {
	n1 := p.N + 1
	b, h := at/p.Width, st[layout.MemTime]/p.Width
	if b <= h && b > h-n1 {
		s := p.Mem + 1 + int(b%n1)
		back := min(c, st[s])
		st[s] -= back
		st[p.Mem] -= back
	}
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
	cnt, lat := buckets(st, p)
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
