package store

import "github.com/ratelimitkit/ratelimit"

// This file is the reference implementation of the three algorithms. The
// Lua scripts in package lua mirror it line for line: the same state
// layout, the same integer arithmetic (microseconds), the same order of
// decisions. Tests hold the two to identical answers.
//
// State of one identity under one policy is a flat array of integers:
// field 0 is the time of the last charge (µs since the Unix epoch); each
// limit then owns a run of fields starting at its offset:
//   sliding window: the sum of the sub-buckets still counted at the last
//                   charge, then n+1 sub-bucket counters, a ring indexed by
//                   bucket % (n+1); the sum makes the allow path touch only
//                   the sub-buckets that expired since the last charge
//   fixed window:   the window index, and the cost counted in it
//   token bucket:   the theoretical arrival time (TAT) of the next token

// param is one limit's arguments: capacity (Rate, or Burst for the token
// bucket), width (sub-bucket, window, or emission interval, µs), n (number
// of sub-buckets; 1 otherwise) and off (its first field).
type param struct{ capacity, width, n, off int64 }

// params fills ps with the policy's per-limit arguments and returns them
// with the number of fields the state takes.
func params(p *ratelimit.Policy, ps *[ratelimit.MaxLimits]param) ([]param, int) {
	_, width, buckets, burst := p.Compiled()
	alg := p.Algorithm()
	off := int64(1)
	for i := range width {
		l := p.Limit(i)
		pp := param{capacity: l.Rate, width: width[i], n: buckets[i], off: off}
		switch alg {
		case ratelimit.SlidingWindow:
			off += buckets[i] + 2
		case ratelimit.FixedWindow:
			off += 2
		case ratelimit.TokenBucket:
			pp.capacity = burst[i]
			off++
		}
		ps[i] = pp
	}
	return ps[:len(width)], int(off)
}

// check reports, for one limit of one identity at time t (already clamped
// to be no earlier than the last charge), the cost in use and the retry
// delay for a request of cost c: 0 when it fits, -1 when it never will.
// For the token bucket "used" is the TAT clamped to t. A cost above the
// capacity is answered before any arithmetic on it, so no cost, however
// large, can overflow.
func check(alg ratelimit.Algorithm, st []int64, t int64, p param, c int64) (used, retry int64) {
	switch alg {
	case ratelimit.SlidingWindow:
		w, n1 := p.width, p.n+1
		k, h := t/w, st[0]/w
		ring := st[p.off+1 : p.off+1+n1]
		used = st[p.off]
		if k-h >= n1 {
			used = 0 // every sub-bucket has expired
		} else {
			// Buckets h-n .. k-n-1 left the window; their slots follow h's.
			for i, j := int((h+1)%n1), h; j < k; j++ {
				used -= ring[i]
				if i++; i == len(ring) {
					i = 0
				}
			}
		}
		if c > p.capacity {
			return used, -1
		}
		if used+c <= p.capacity {
			return used, 0
		}
		// Denied: the buckets still counted, k-n .. h, free up in order.
		need, freed := used+c-p.capacity, int64(0)
		for i, j := int((k+1)%n1), k-p.n; j <= h; j++ {
			if freed += ring[i]; freed >= need {
				return used, (j+n1)*w - t
			}
			if i++; i == len(ring) {
				i = 0
			}
		}
		return used, -1 // unreachable: need <= used
	case ratelimit.FixedWindow:
		win := t / p.width
		if st[p.off] == win {
			used = st[p.off+1]
		}
		if c > p.capacity {
			return used, -1
		}
		if used+c <= p.capacity {
			return used, 0
		}
		return used, (win+1)*p.width - t
	default: // TokenBucket
		tat := max(st[p.off], t)
		if c > p.capacity {
			return tat, -1
		}
		limit := p.capacity * p.width // ≤ 2^53: NewPolicy bounds burst × interval
		next := tat + c*p.width - t
		if next <= limit {
			return tat, 0
		}
		return tat, next - limit
	}
}

// report computes remaining and reset for one limit after the decision:
// charged is the cost just charged (0 when nothing was).
func report(alg ratelimit.Algorithm, st []int64, t int64, p param, used, charged int64) (rem, reset int64) {
	switch alg {
	case ratelimit.SlidingWindow:
		w, n1 := p.width, p.n+1
		rem = p.capacity - used - charged
		if charged > 0 {
			return rem, (t/w+n1)*w - t
		}
		if used == 0 {
			return rem, 0
		}
		// The newest non-empty bucket still counted frees up last.
		k, h := t/w, st[0]/w
		ring := st[p.off+1 : p.off+1+n1]
		for i, j := int(h%n1), h; j >= k-p.n; j-- {
			if ring[i] != 0 {
				return rem, (j+n1)*w - t
			}
			if i--; i < 0 {
				i = len(ring) - 1
			}
		}
		return rem, 0
	case ratelimit.FixedWindow:
		rem = p.capacity - used - charged
		if used+charged > 0 {
			reset = (t/p.width+1)*p.width - t
		}
		return rem, reset
	default: // TokenBucket: used is the clamped TAT
		tat := used + charged*p.width
		return (p.capacity*p.width - (tat - t)) / p.width, tat - t
	}
}

// charge adds cost c to one limit's fields at time t. Stale sub-buckets of
// the sliding window are zeroed first. Field 0 (the last charge time) is
// set by the caller after every limit is charged.
func charge(alg ratelimit.Algorithm, st []int64, t int64, p param, used, c int64) {
	switch alg {
	case ratelimit.SlidingWindow:
		w, n1 := p.width, p.n+1
		k, h := t/w, st[0]/w
		ring := st[p.off+1 : p.off+1+n1]
		if k-h >= n1 {
			clear(ring) // every sub-bucket is stale
		} else {
			for i, j := int((h+1)%n1), h+1; j <= k; j++ {
				ring[i] = 0
				if i++; i == len(ring) {
					i = 0
				}
			}
		}
		ring[k%n1] += c
		st[p.off] = used + c
	case ratelimit.FixedWindow:
		st[p.off] = t / p.width
		st[p.off+1] = used + c
	default:
		st[p.off] = used + c*p.width
	}
}
