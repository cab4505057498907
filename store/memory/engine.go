package memory

import (
	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// This file runs one request on the states of its keys: the decision both
// stores make, written once for the memory store and mirrored by
// lua/take.lua (the Redis Cluster path runs it one key at a time).

// keyState is one key's state and, after run, its outcome.
type keyState struct {
	counters
	t0      int64            // max(now, its last charge): a key is never evaluated earlier
	t       int64            // the time it is evaluated at: t0, or a reservation's release time
	skew    int64            // t0 - now when the clock stepped back, else 0
	at      int64            // when it was charged: t (t0, or the reservation's release time), or a lease's stamp
	stats   []verdict.Status // one per limit, set by run (the caller gives the room)
	charged bool
	blocked bool    // a penalty was set or is running: the state changed though not charged
	tats    []int64 // one per limit: a token bucket's TAT after the charge (the caller gives the room)
}

// outcome is the request's result.
type outcome struct {
	allowed bool
	granted int64
	release int64 // > now when a place in line was reserved
}

// run decides one request for keys at time now and applies it to their
// states: every limit of every key is evaluated; only if all have room (or,
// reserving, all will by now+maxDelay) are all charged. A denial may set a
// penalty (BlockFor). keys[i].stats receive each limit's status, as the
// reply reports it.
func run(pol *ratelimit.Policy, lim []layout.Limit, keys []*keyState, evs [][ratelimit.MaxLimits]eval, now int64, o verdict.Call) outcome {
	r := request{lim: lim, keys: keys, evs: evs, now: now, o: o, c1: o.Cost, block: pol.BlockFor().Microseconds(), reserves: plan.Layout(pol).Reserves}
	if r.c1 == 0 {
		r.c1 = 1 // a peek asks whether a request of cost 1 would fit
	}
	r.start()
	granted := r.evaluateAll()
	allowed := r.admits(granted)
	var release int64
	if !allowed && o.MaxDelay > 0 && o.Cost > 0 && !o.UpTo && !r.blocked && !r.full && r.reserves {
		allowed, release = r.reserve()
	}
	charged := int64(0)
	if allowed {
		charged = o.Cost
		if o.UpTo {
			charged = granted
		}
	}
	for ki, k := range keys {
		r.report(ki, k, charged)
		if charged > 0 {
			r.charge(ki, k, charged)
		}
		if o.Force {
			continue // a debt neither reports a penalty nor starts one
		}
		r.penalty(k, allowed)
		if release == 0 {
			for i := range k.stats {
				k.stats[i] = verdict.Skewed(k.stats[i], k.skew)
			}
		}
	}
	return outcome{allowed: allowed, granted: charged, release: release}
}

// request is one request being decided over the states of its keys (run).
type request struct {
	lim      []layout.Limit
	keys     []*keyState
	now      int64
	o        verdict.Call
	c1       int64                       // the cost evaluated: the request's, 1 for a peek, or the grant
	block    int64                       // the policy's penalty, µs
	reserves bool                        // every limit can reserve
	blocked  bool                        // a key's penalty runs
	full     bool                        // a key keeps as many places in line as it may
	evs      [][ratelimit.MaxLimits]eval // one per key
}

// start sets each key's times, reads whether a penalty runs or a line is
// full, and makes a drained key read as never written.
func (r *request) start() {
	for _, k := range r.keys {
		k.t0 = max(r.now, k.st[layout.MemTime])
		k.t, k.skew = k.t0, k.t0-r.now
		k.reserves, k.stamp = r.reserves, 0
		if r.o.Hold > 0 {
			k.stamp = k.t0 + r.o.Hold // a lease: checked at t0, recorded ahead
		}
		if k.drained(r.lim, k.t0) {
			k.forget(r.lim)
		}
		if k.st[layout.MemBlock] > k.t0 {
			r.blocked = true
		}
		if len(k.pend) >= maxPending {
			r.full = true
		}
	}
}

// evaluateAll evaluates every limit of every key and returns the grant: the
// cost asked, or, up to it, what every limit of every key has room for now.
func (r *request) evaluateAll() int64 {
	granted := r.o.Cost
	if !r.o.UpTo {
		for ki, k := range r.keys {
			for i := range r.lim {
				r.evs[ki][i] = evaluate(&k.counters, k.t, &r.lim[i], r.c1)
			}
		}
		return granted
	}
	for ki, k := range r.keys {
		for i := range r.lim {
			r.evs[ki][i] = evaluate(&k.counters, k.t, &r.lim[i], 1)
			if r.lim[i].Kind == layout.Concurrent && r.evs[ki][i].avail > 0 {
				continue // a slot is there: it takes one, whatever the grant
			}
			granted = min(granted, r.evs[ki][i].avail)
		}
	}
	if r.blocked {
		granted = 0
	}
	if granted > 0 {
		r.c1 = granted
		for ki := range r.keys {
			for i := range r.lim {
				r.evs[ki][i].retry = 0
			}
		}
	}
	return granted
}

// admits reports whether every limit of every key admits the request now
// (a debt is always admitted).
func (r *request) admits(granted int64) bool {
	allowed := !r.blocked && (!r.o.UpTo || granted > 0)
	for ki := range r.keys {
		for i := range r.lim {
			if r.evs[ki][i].retry != 0 {
				allowed = false
			}
		}
	}
	if r.o.Force {
		allowed, r.blocked = true, false
	}
	return allowed
}

// reserve admits the request when the last limit has room, if that is
// within its longest delay: it returns whether, and the release time, each
// key evaluated again at it.
func (r *request) reserve() (bool, int64) {
	release, never := r.now, false
	for ki, k := range r.keys {
		for i := range r.lim {
			if rt := r.evs[ki][i].retry; rt < 0 {
				never = true
			} else {
				release = max(release, k.t+rt)
			}
		}
	}
	if never || release-r.now > r.o.MaxDelay {
		return false, 0
	}
	for ki, k := range r.keys {
		k.t = max(release, k.t0)
		for i := range r.lim {
			r.evs[ki][i] = evaluate(&k.counters, k.t, &r.lim[i], r.c1)
		}
	}
	return true, release
}

// report sets key ki's statuses after charged (0: denied). A token bucket
// of another interval is rewritten in its limit's first, and reported and
// charged as it now stands.
func (r *request) report(ki int, k *keyState, charged int64) {
	lim, evs := r.lim, &r.evs[ki]
	if charged > 0 && k.t == k.t0 && k.stamp == 0 && k.retime(lim, k.t0) {
		for i := range lim {
			if lim[i].Kind == layout.Token {
				evs[i] = evaluate(&k.counters, k.t, &lim[i], r.c1)
				evs[i].retry = 0
			}
		}
	}
	// A lease's charge is recorded at its stamp, else at t.
	k.at = k.t
	if k.stamp > 0 {
		k.at = k.stamp
	}
	for i := range lim {
		if r.o.Force {
			k.stats[i] = verdict.Status{} // a debt reports nothing
			continue
		}
		e := &evs[i]
		rem, reset := report(&k.counters, k.t, &lim[i], e, charged, k.at)
		k.stats[i] = verdict.Status{Rem: rem, Reset: reset, Refill: refill(&k.counters, k.t, &lim[i], e, charged, rem), Retry: e.retry}
	}
}

// charge charges key ki: places in line released by t0 join the fields
// first, so that the fields hold every charge up to t0, in order of time;
// then the charge itself, or, when it is recorded later (a reservation's,
// or a lease's), a place in line, pending until a charge at or after its
// time folds it in.
func (r *request) charge(ki int, k *keyState, charged int64) {
	lim := r.lim
	k.fold(lim, k.t0)
	if k.at > k.t0 {
		// A token bucket's mark is the least its TAT can be right after
		// the place (see refund).
		if k.stamp > 0 {
			k.at = k.place(k.at, charged)
		} else {
			k.reserve(k.at, charged)
		}
		for i := range lim {
			if lim[i].Kind == layout.Buckets {
				advanceBuckets(k.st, k.t0, &lim[i]) // they hold the sub-buckets up to t0
			}
			if lim[i].Kind == layout.Token {
				k.tats[i] = k.at + charged*lim[i].Width
				// A place in line counts in the interval the bucket was
				// written in: one never written takes this one's.
				if k.st[lim[i].Mem+1] == 0 {
					k.st[lim[i].Mem+1] = lim[i].Width
				}
			}
		}
	} else {
		for i := range lim {
			if r.o.Force && lim[i].Kind == layout.Concurrent {
				continue // a debt is cost, not a request in flight
			}
			charge(k.st, k.t, &lim[i], &r.evs[ki][i], charged)
			switch lim[i].Kind {
			case layout.Token:
				k.tats[i] = k.st[lim[i].Mem]
			case layout.Concurrent:
				k.tats[i] = k.st[lim[i].Mem] + 1 // the slot's epoch (layout.SlotsFreed)
			}
		}
	}
	k.st[layout.MemTime] = k.t0
	k.charged = true
	if r.o.Force {
		// A debt starts a new epoch, as a Reset does: no refund of an
		// earlier charge gives anything back. A log keeps at most its
		// ring of units, so a refund could not tell an earlier charge's
		// units from the debt's it lost.
		k.st[layout.MemGen] = (k.st[layout.MemGen]/layout.GenEpoch + 1) * layout.GenEpoch
	}
}

// penalty: a running one denies and says how long it lasts; a denial
// starts one on each key whose limits denied.
func (r *request) penalty(k *keyState, allowed bool) {
	if b := k.st[layout.MemBlock]; b > k.t0 {
		i := int(k.st[layout.MemBlockLimit])
		s := &k.stats[i]
		if s.Retry >= 0 {
			s.Retry = max(s.Retry, b-k.t0)
		}
		s.Reset, s.Refill, s.Rem = max(s.Reset, b-k.t0), max(s.Refill, b-k.t0), 0
		return
	}
	if allowed || r.block <= 0 || r.o.Cost <= 0 {
		return
	}
	worst := -1
	for i, s := range k.stats {
		if s.Retry > 0 && (worst < 0 || s.Retry > k.stats[worst].Retry) {
			worst = i
		}
	}
	if worst >= 0 {
		k.st[layout.MemBlock], k.st[layout.MemBlockLimit] = k.t0+r.block, int64(worst)
		s := &k.stats[worst]
		s.Retry, s.Reset, s.Refill, s.Rem = max(s.Retry, r.block), max(s.Reset, r.block), max(s.Refill, r.block), 0
		k.blocked = true
	}
}
