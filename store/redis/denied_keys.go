package redis

import (
	"sync"
	"sync/atomic"
	"time"
)

// A key the store has just seen deny a plain Take sends its next plain
// Takes by the script's general path at once (opDeclined) until that
// denial's wait has passed. By the common call (opFast) the lean path
// would read the key only to find it cannot admit: under a flood of one
// identity, whose repeats the general path answers from the denial it
// keeps in the key (lua/denial.lua), that read would be about half of
// what each denial costs Redis (bench/luacost.sh -s d, against -f). Both
// paths give the same answer; only the route changes. The first call the
// general path admits clears the key, so a refund or a Reset costs one
// call by the general path, and a key stays at most its wait. At most
// maxDeniedKeys are held (a flood of many identities cannot grow the
// set without bound): past that a key goes by the lean path, as before.
type deniedKeys struct {
	clock func() int64 // µs, the store's clock where it has one (WithClock), else monotonic
	n     atomic.Int64 // keys held, lapsed ones included until a sweep
	keys  sync.Map     // Redis key → until (µs on clock)
	next  atomic.Int64 // when (µs on clock) the next sweep of lapsed keys may run
}

// maxDeniedKeys bounds the keys held; a sweep of lapsed ones runs at most
// every deniedSweepUS when the set is full.
const (
	maxDeniedKeys = 4096
	deniedSweepUS = int64(100 * time.Millisecond / time.Microsecond)
)

// newDeniedKeys returns an empty set on the store's clock now (nil: a
// monotonic one).
func newDeniedKeys(now func() time.Time) *deniedKeys {
	d := &deniedKeys{}
	if now != nil {
		d.clock = func() int64 { return now().UnixMicro() }
	} else {
		start := time.Now()
		d.clock = func() int64 { return int64(time.Since(start) / time.Microsecond) }
	}
	return d
}

// held says whether a plain Take on keys goes by the general path (never,
// on a nil set).
func (d *deniedKeys) held(keys []string) bool {
	if d == nil || d.n.Load() == 0 {
		return false
	}
	now := d.clock()
	for _, k := range keys {
		v, ok := d.keys.Load(k)
		if !ok {
			continue
		}
		if v.(int64) > now {
			return true
		}
		if d.keys.CompareAndDelete(k, v) { // lapsed: let it go
			d.n.Add(-1)
		}
	}
	return false
}

// learn takes in the reply (take.go's layout) of a plain Take on keys
// with nl limits, sent by the general path at once when routed: each key
// that denied it with a wait is held for that wait; an admission by the
// general path lets its keys go.
func (d *deniedKeys) learn(keys []string, reply []int64, nl int, routed bool) {
	if d == nil {
		return
	}
	if reply[rAllowed] == 1 {
		if routed {
			for _, k := range keys {
				if _, ok := d.keys.LoadAndDelete(k); ok {
					d.n.Add(-1)
				}
			}
		}
		return
	}
	var now int64
	for ki, k := range keys {
		part := reply[rHeader+ki*keySize(nl):]
		var wait int64
		for i := range nl {
			wait = max(wait, limitAt(part, i)[lRetry])
		}
		if wait <= 0 {
			continue // this key admitted it, or nothing it can wait for does
		}
		if now == 0 {
			now = d.clock()
		}
		d.hold(k, now+wait, now)
	}
}

// hold holds k until, unless the set is full of keys that have not
// lapsed.
func (d *deniedKeys) hold(k string, until, now int64) {
	if _, loaded := d.keys.Swap(k, until); loaded {
		return
	}
	if d.n.Add(1) <= maxDeniedKeys {
		return
	}
	if _, ok := d.keys.LoadAndDelete(k); ok {
		d.n.Add(-1)
	}
	if next := d.next.Load(); now >= next && d.next.CompareAndSwap(next, now+deniedSweepUS) {
		d.keys.Range(func(key, v any) bool {
			if v.(int64) <= now {
				if _, ok := d.keys.LoadAndDelete(key); ok {
					d.n.Add(-1)
				}
			}
			return true
		})
		if d.n.Load() < maxDeniedKeys {
			d.hold(k, until, now) // the sweep made room (it runs again only after deniedSweepUS)
		}
	}
}
