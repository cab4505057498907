package memory

import (
	"context"
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
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
	lay := plan.Layout(req.Policy)
	lim := lay.Limits
	pid := req.Policy.ID()
	ttl := lay.TTLMS * 1000

	var shards, locked [ratelimit.MaxKeys]uint64
	defer m.unlockShards(m.lockKeys(req.Keys, &shards, &locked))
	now := m.now().UnixMicro()

	var mks [ratelimit.MaxKeys]shardmap.Key
	for ki, k := range req.Keys {
		mks[ki] = shardmap.KeyOf(pid, k)
	}
	own := mks[:len(req.Keys)]
	var idh string
	// Under a policy with a Concurrent limit every run of a request holds
	// a slot: a repeat of its ID is decided and charged anew, never
	// answered from its record (it would run without a slot).
	if req.ID != "" && !lay.Slots {
		idh = layout.IDHash(req.ID)
	}
	// Keys whose ID record answers for them are not decided again.
	var (
		states  [ratelimit.MaxKeys]keyState
		stats   [ratelimit.MaxKeys][ratelimit.MaxLimits]verdict.Status // states' stats and marks, here so that
		tats    [ratelimit.MaxKeys][ratelimit.MaxLimits]int64          // run appends without allocating
		ents    [ratelimit.MaxKeys]*memEntry
		decided [ratelimit.MaxKeys]*keyState
		records [ratelimit.MaxKeys]*idRecord
		nd      int
	)
	for ki := range req.Keys {
		sh := &m.shards[shards[ki]]
		if idh != "" {
			// A key under a running penalty is decided again, however
			// its ID was answered before: a block holds against repeats.
			if r := sh.ids[idKey{mks[ki], idh}]; r != nil && r.expires > now && r.repeats < ratelimit.MaxRepeats && !m.blocked(sh, mks[ki], now) {
				r.repeats++
				records[ki] = r
				continue
			}
		}
		e := m.entry(sh, mks[ki], now, lay, own)
		ents[ki] = e
		k := &states[ki]
		k.pend, k.held = e.pend, 0
		for _, r := range e.pend {
			k.held += r.cost
		}
		k.stats, k.tats = stats[ki][:len(lim)], tats[ki][:len(lim)]
		decided[nd] = k
		nd++
	}
	// Counters a policy of the same ID with a larger rate wrote hold
	// larger log rings: every key's are read in one layout (growing a
	// ring forgets nothing). A key laid out anew keeps its new layout only
	// if charged, as the Redis script writes a grown ring only with a
	// charge: a log's units past the ring it was written in are then lost
	// in both stores alike.
	use := storedLayout(lay, ents[:len(req.Keys)])
	lim = use.Limits
	for ki, e := range ents[:len(req.Keys)] {
		if e == nil {
			continue
		}
		if e.lay != use && !sameRings(e.lay, use) {
			states[ki].st = relayout(e.f, e.lay, use)
			continue
		}
		e.lay = use
		states[ki].st = e.f
	}
	var out outcome
	if nd > 0 {
		out = run(req.Policy, lim, decided[:nd], now, o)
	} else {
		out.allowed = true
	}

	d := ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, len(lim)), Granted: out.granted}
	if out.release > now {
		d.Delay = time.Duration(out.release-now) * time.Microsecond
	}
	var marks []int64
	var charged []string
	repeated := nd == 0
	for ki := range req.Keys {
		if r := records[ki]; r != nil {
			for i, s := range r.stats {
				verdict.Fold(&d, i, ki, s, ki == 0)
			}
			if nd == 0 && ki == 0 { // every key repeats: the first key's answer
				d.Granted = r.granted
				if r.at > now {
					d.Delay = time.Duration(r.at-now) * time.Microsecond
				}
			}
			continue
		}
		k := &states[ki]
		for i, s := range k.stats {
			verdict.Fold(&d, i, ki, s, ki == 0)
		}
		e := ents[ki]
		e.pend = k.pend
		if e.lay != use {
			if k.charged {
				e.f, e.lay = k.st, use
			} else if k.blocked {
				e.f[layout.MemBlock], e.f[layout.MemBlockLimit] = k.st[layout.MemBlock], k.st[layout.MemBlockLimit]
			}
		}
		if k.charged || k.blocked {
			last := max(k.at, k.t0)
			if n := len(k.pend); n > 0 {
				last = max(last, k.pend[n-1].at)
			}
			e.expires = max(e.expires, last+ttl)
			for i := range lim {
				if lim[i].Kind == layout.Token {
					// A TAT written in another interval, or places in line
					// counted in one, may owe past the TTL: the entry
					// outlives what it owes (store/redis's debt).
					e.expires = max(e.expires, tokenTAT(&k.counters, &lim[i]))
				}
			}
		}
		if k.charged {
			charged = append(charged, req.Keys[ki])
			marks = append(marks, k.at, k.st[layout.MemGen])
			for i := range lim {
				marks = append(marks, k.tats[i])
			}
			if idh != "" {
				sh := &m.shards[shards[ki]]
				ik := idKey{mks[ki], idh}
				if old := sh.ids[ik]; old == nil || old.expires <= now {
					m.bound(sh, now)
					sh.ids[ik] = &idRecord{expires: now + lay.IDTTL,
						granted: out.granted, at: k.t, stats: slices.Clone(k.stats)}
				}
			}
		}
	}
	verdict.Finish(&d, out.allowed, req.Policy)
	d.Repeated = repeated
	if len(charged) > 0 {
		d.Receipt = ratelimit.Receipt{Policy: req.Policy, Keys: charged, Cost: out.granted, Marks: marks}
	}
	return d, nil
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
