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
func run(pol *ratelimit.Policy, lim []layout.Limit, keys []*keyState, now int64, o verdict.Call) outcome {
	block := pol.BlockFor().Microseconds()
	reserves := plan.Layout(pol).Reserves
	c1 := o.Cost
	if c1 == 0 {
		c1 = 1 // a peek asks whether a request of cost 1 would fit
	}
	var evs [ratelimit.MaxKeys][ratelimit.MaxLimits]eval
	blockedAny, queueFull := false, false
	for _, k := range keys {
		k.t0 = max(now, k.st[layout.MemTime])
		k.t, k.skew = k.t0, k.t0-now
		k.reserves, k.stamp = reserves, 0
		if o.Hold > 0 {
			k.stamp = k.t0 + o.Hold // a lease: checked at t0, recorded ahead
		}
		if k.drained(lim, k.t0) {
			k.forget(lim)
		}
		if k.st[layout.MemBlock] > k.t0 {
			blockedAny = true
		}
		if len(k.pend) >= maxPending {
			queueFull = true
		}
	}
	granted := o.Cost
	if o.UpTo {
		// The grant is what every limit of every key has room for now.
		for ki, k := range keys {
			for i := range lim {
				evs[ki][i] = evaluate(&k.counters, k.t, &lim[i], 1)
				if lim[i].Kind == layout.Concurrent && evs[ki][i].avail > 0 {
					continue // a slot is there: it takes one, whatever the grant
				}
				granted = min(granted, evs[ki][i].avail)
			}
		}
		if blockedAny {
			granted = 0
		}
		if granted > 0 {
			c1 = granted
			for ki := range keys {
				for i := range lim {
					evs[ki][i].retry = 0
				}
			}
		}
	} else {
		for ki, k := range keys {
			for i := range lim {
				evs[ki][i] = evaluate(&k.counters, k.t, &lim[i], c1)
			}
		}
	}
	allowed := !blockedAny && (!o.UpTo || granted > 0)
	for ki := range keys {
		for i := range lim {
			if evs[ki][i].retry != 0 {
				allowed = false
			}
		}
	}
	if o.Force {
		allowed, blockedAny = true, false
	}
	var release int64
	if !allowed && o.MaxDelay > 0 && o.Cost > 0 && !o.UpTo && !blockedAny && !queueFull && reserves {
		// Reserve: the request is admitted when the last limit has room.
		release = now
		never := false
		for ki, k := range keys {
			for i := range lim {
				if r := evs[ki][i].retry; r < 0 {
					never = true
				} else {
					release = max(release, k.t+r)
				}
			}
		}
		if !never && release-now <= o.MaxDelay {
			allowed = true
			for ki, k := range keys {
				k.t = max(release, k.t0)
				for i := range lim {
					evs[ki][i] = evaluate(&k.counters, k.t, &lim[i], c1)
				}
			}
		} else {
			release = 0
		}
	}
	charged := int64(0)
	if allowed {
		charged = o.Cost
		if o.UpTo {
			charged = granted
		}
	} else {
		granted = 0
	}
	for ki, k := range keys {
		if charged > 0 && k.t == k.t0 && k.stamp == 0 && k.retime(lim, k.t0) {
			// A token bucket of another interval, rewritten in its
			// limit's: reported and charged as it now stands.
			for i := range lim {
				if lim[i].Kind == layout.Token {
					evs[ki][i] = evaluate(&k.counters, k.t, &lim[i], c1)
					evs[ki][i].retry = 0
				}
			}
		}
		// A lease's charge is recorded at its stamp, else at t.
		k.at = k.t
		if k.stamp > 0 {
			k.at = k.stamp
		}
		for i := range lim {
			if o.Force {
				k.stats[i] = verdict.Status{} // a debt reports nothing
				continue
			}
			e := &evs[ki][i]
			rem, reset := report(&k.counters, k.t, &lim[i], e, charged, k.at)
			k.stats[i] = verdict.Status{Rem: rem, Reset: reset, Refill: refill(&k.counters, k.t, &lim[i], e, charged, rem), Retry: e.retry}
		}
		if charged > 0 {
			// Places in line released by t0 join the fields first, so that
			// the fields hold every charge up to t0, in order of time.
			k.fold(lim, k.t0)
			if k.at > k.t0 {
				// A place in line (a reservation's, or a lease's): pending
				// until a charge at or after its time folds it in. A token
				// bucket's mark is the least its TAT can be right after it
				// (see refund).
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
						// A place in line counts in the interval the bucket
						// was written in: one never written takes this one's.
						if k.st[lim[i].Mem+1] == 0 {
							k.st[lim[i].Mem+1] = lim[i].Width
						}
					}
				}
			} else {
				for i := range lim {
					if o.Force && lim[i].Kind == layout.Concurrent {
						continue // a debt is cost, not a request in flight
					}
					charge(k.st, k.t, &lim[i], &evs[ki][i], charged)
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
			if o.Force {
				// A debt starts a new epoch, as a Reset does: no refund of
				// an earlier charge gives anything back. A log keeps at
				// most its ring of units, so a refund could not tell an
				// earlier charge's units from the debt's it lost.
				k.st[layout.MemGen] = (k.st[layout.MemGen]/layout.GenEpoch + 1) * layout.GenEpoch
			}
		}
		// Penalties: a running one denies and says how long it lasts; a
		// denial starts one on each key whose limits denied.
		if o.Force {
			continue // a debt neither reports a penalty nor starts one
		}
		if b := k.st[layout.MemBlock]; b > k.t0 {
			i := int(k.st[layout.MemBlockLimit])
			s := &k.stats[i]
			if s.Retry >= 0 {
				s.Retry = max(s.Retry, b-k.t0)
			}
			s.Reset, s.Refill, s.Rem = max(s.Reset, b-k.t0), max(s.Refill, b-k.t0), 0
		} else if !allowed && block > 0 && o.Cost > 0 {
			worst := -1
			for i, s := range k.stats {
				if s.Retry > 0 && (worst < 0 || s.Retry > k.stats[worst].Retry) {
					worst = i
				}
			}
			if worst >= 0 {
				k.st[layout.MemBlock], k.st[layout.MemBlockLimit] = k.t0+block, int64(worst)
				s := &k.stats[worst]
				s.Retry, s.Reset, s.Refill, s.Rem = max(s.Retry, block), max(s.Reset, block), max(s.Refill, block), 0
				k.blocked = true
			}
		}
		if release == 0 {
			for i := range k.stats {
				k.stats[i] = verdict.Skewed(k.stats[i], k.skew)
			}
		}
	}
	return outcome{allowed: allowed, granted: charged, release: release}
}
