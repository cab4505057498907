package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/shardmap"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

var _ storekit.Complete = (*Store)(nil)
var _ storekit.Local = (*Store)(nil)
var _ storekit.Leaser = (*Store)(nil)

// Store is an in-process ratelimit.Store: the same algorithms and decisions as
// Redis, for a single server, for tests, and as the fallback when Redis
// fails. It is sharded (no global lock) and safe for concurrent use; a
// request with several keys locks their shards in a fixed order, so it is
// atomic like the Redis script. Idle identities are evicted once their
// counters have expired (after the policy's TTL), swept as the store is
// used; no goroutine runs in the background. It implements every optional
// operation (Reset, Refund, Settle, Reserve, TakeUpTo, Lease, Release)
// and request IDs.
type Store struct {
	now     func() time.Time
	seed    maphash.Seed
	shards  []memShard
	mask    uint64
	maxKeys int64        // 0 = unbounded
	count   atomic.Int64 // identities held, when maxKeys > 0
}

type memShard struct {
	shardmap.Shard[*memEntry]
	ids       map[idKey]*idRecord
	nextSweep int64 // µs
}

func entryExpires(e *memEntry) int64 { return e.expires }

type memEntry struct {
	expires int64 // µs; the entry is empty from then on
	f       []int64
	lay     *layout.Policy // the layout f is laid out in (see relayout)
	pend    []reservation  // pending reservations, in order of release
}

// idKey names a request ID's record: the identity and the ID's hash.
type idKey struct {
	shardmap.Key
	id string
}

// idRecord is the first Decision of a request ID, for one key.
type idRecord struct {
	expires int64 // µs
	repeats int64
	granted int64
	at      int64 // when it was charged (or released, for a reservation)
	stats   []verdict.Status
}

// Option configures NewMemory.
type Option func(*Store)

// WithClock sets the clock the memory store reads (default time.Now). Tests
// use it to drive time; it must be safe for concurrent use.
func WithClock(now func() time.Time) Option {
	return func(m *Store) {
		if now != nil {
			m.now = now
		}
	}
}

// WithShards sets the number of shards, rounded up to a power of two
// (default 64). More shards mean less lock contention between identities.
func WithShards(n int) Option {
	return func(m *Store) {
		size := 1
		for size < n && size < 1<<16 {
			size <<= 1
		}
		m.shards = make([]memShard, size)
	}
}

// WithMaxKeys bounds the number of identities the store holds (default 0:
// unbounded; idle ones are still evicted after their TTL). The bound is
// exact and store-wide: the store holds up to n identities, then each new
// one evicts one held identity (an expired one, or the one closest to
// expiry among a few sampled), never one the same request uses. An evicted
// identity's counters restart: under a flood of new identities, a victim's
// counters survive only while fewer than n others are newer or later to
// expire, so the bound trades exactness for memory. Set n well above the
// number of identities active within the policy's longest period. (When
// every held identity belongs to requests in flight at that instant, the
// store goes over the bound by those requests' keys rather than wait.)
// Records of request IDs are bounded by n too.
func WithMaxKeys(n int) Option {
	return func(m *Store) { m.maxKeys = int64(max(n, 0)) }
}

// NewMemory returns an in-memory Store.
func New(opts ...Option) *Store {
	m := &Store{now: time.Now, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(m)
	}
	if m.shards == nil {
		m.shards = make([]memShard, 64)
	}
	for i := range m.shards {
		m.shards[i].M = make(map[shardmap.Key]*memEntry)
		m.shards[i].ids = make(map[idKey]*idRecord)
	}
	m.mask = uint64(len(m.shards) - 1)
	return m
}

// sweepEvery is how often a shard drops its expired entries.
const sweepEvery = int64(10 * time.Second / time.Microsecond)

// Take implements ratelimit.Store.
func (m *Store) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return m.do(ctx, req, verdict.Call{Cost: req.Cost})
}

// Reserve implements storekit.Reserver.
func (m *Store) Reserve(ctx context.Context, req ratelimit.Request, maxDelay time.Duration) (ratelimit.Decision, error) {
	return m.do(ctx, req, verdict.Call{Cost: req.Cost, MaxDelay: verdict.ReserveUS(maxDelay)})
}

// TakeUpTo implements storekit.Granter.
func (m *Store) TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	return m.do(ctx, req, verdict.Call{Cost: req.Cost, UpTo: true})
}

// Lease implements storekit.Leaser.
func (m *Store) Lease(ctx context.Context, req ratelimit.Request, hold time.Duration) (ratelimit.Decision, error) {
	return m.do(ctx, req, verdict.Call{Cost: req.Cost, UpTo: true, Hold: verdict.HoldUS(hold)})
}

// lockKeys locks the shards of keys in ascending order, each once: it
// fills shards with each key's shard and returns the locked shards, in
// order, within locked (arrays of the caller's, so that nothing is
// allocated); unlockShards releases them.
func (m *Store) lockKeys(keys []string, shards, locked *[ratelimit.MaxKeys]uint64) []uint64 {
	idx := shards[:len(keys)]
	for i, k := range keys {
		idx[i] = maphash.String(m.seed, k) & m.mask
	}
	order := locked[:copy(locked[:], idx)]
	if len(order) > 1 {
		slices.Sort(order)
		order = slices.Compact(order)
	}
	for _, s := range order {
		m.shards[s].Mu.Lock()
	}
	return order
}

func (m *Store) unlockShards(order []uint64) {
	for _, s := range order {
		m.shards[s].Mu.Unlock()
	}
}

func (m *Store) do(ctx context.Context, req ratelimit.Request, o verdict.Call) (ratelimit.Decision, error) {
	if err := verdict.Validate(req, o); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	c := newCall(m, req)
	defer c.free()
	return c.decide(o), nil
}

// entry returns the live entry for k, creating or resetting it as needed,
// within the store's bound. The caller holds the shard's lock (and those of
// own, the request's keys, which are never evicted).
func (m *Store) entry(sh *memShard, k shardmap.Key, now int64, lay *layout.Policy, own []shardmap.Key) *memEntry {
	if now >= sh.nextSweep {
		m.sweep(sh, now)
	}
	nf := lay.MemFields
	e, ok := sh.M[k]
	if ok && e.expires > now {
		return e
	}
	if ok {
		clear(e.f)
		if len(e.f) != nf {
			e.f = make([]int64, nf)
		}
		e.lay, e.pend = lay, nil
		return e
	}
	if m.maxKeys > 0 {
		m.reserve(sh, now, own)
	}
	e = &memEntry{f: make([]int64, nf), lay: lay}
	sh.M[k] = e
	return e
}

// reserve makes room for one more identity under the bound: it counts the
// new one, evicting held identities (never own) while the store is full.
// The caller holds sh's lock; other shards are only tried, never waited
// for, so requests locking shards in order cannot deadlock here.
func (m *Store) reserve(sh *memShard, now int64, own []shardmap.Key) {
	skip := func(k shardmap.Key) bool { return slices.Contains(own, k) }
	for {
		c := m.count.Load()
		if c < m.maxKeys {
			if m.count.CompareAndSwap(c, c+1) {
				return
			}
			continue
		}
		if sh.EvictSample(now, entryExpires, skip) {
			m.count.Add(-1)
			continue
		}
		evicted := false
		for i := range m.shards {
			o := &m.shards[i]
			if o == sh || !o.Mu.TryLock() {
				continue
			}
			evicted = o.EvictSample(now, entryExpires, skip)
			o.Mu.Unlock()
			if evicted {
				m.count.Add(-1)
				break
			}
		}
		if !evicted {
			// Everything held belongs to requests in flight (or its shards
			// are busy): go over the bound rather than wait.
			m.count.Add(1)
			return
		}
	}
}

// bound keeps a shard's ID records within the store's bound.
func (m *Store) bound(sh *memShard, now int64) {
	if m.maxKeys <= 0 || int64(len(sh.ids)) < max(m.maxKeys/int64(len(m.shards)), 1) {
		return
	}
	var victim idKey
	seen := 0
	for k, r := range sh.ids { // random order: an expired one among 8, else the 8th
		victim = k
		if seen++; r.expires <= now || seen == 8 {
			break
		}
	}
	delete(sh.ids, victim)
}

// sweep drops expired entries and ID records. The caller holds sh.Mu.
func (m *Store) sweep(sh *memShard, now int64) {
	n := int64(0)
	for k, e := range sh.M {
		if e.expires <= now {
			delete(sh.M, k)
			n++
		}
	}
	if m.maxKeys > 0 && n > 0 {
		m.count.Add(-n)
	}
	for k, r := range sh.ids {
		if r.expires <= now {
			delete(sh.ids, k)
		}
	}
	sh.nextSweep = now + sweepEvery
}

// Len returns the number of identities the store holds, expired ones not
// yet swept included.
func (m *Store) Len() int {
	n := 0
	for i := range m.shards {
		n += m.shards[i].Size()
	}
	return n
}

// blocked reports whether the identity k holds a running penalty. The
// caller holds sh's lock.
func (m *Store) blocked(sh *memShard, k shardmap.Key, now int64) bool {
	e, ok := sh.M[k]
	return ok && e.expires > now && e.f[layout.MemBlock] > max(now, e.f[layout.MemTime])
}

// Local marks the memory store as answering without I/O (ratelimit.Local).
func (m *Store) Local() {}
