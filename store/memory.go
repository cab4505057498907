package store

import (
	"context"
	"hash/maphash"
	"slices"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

var _ ratelimit.Local = (*Memory)(nil)

// Memory is an in-process Store: the same algorithms and decisions as
// Redis, for a single server, for tests, and as the fallback when Redis
// fails. It is sharded (no global lock) and safe for concurrent use; a
// request with several keys locks their shards in a fixed order, so it is
// atomic like the Redis script. Idle identities are evicted once their
// counters have expired (after the policy's TTL), swept as the store is
// used; no goroutine runs in the background.
type Memory struct {
	now     func() time.Time
	seed    maphash.Seed
	shards  []memShard
	mask    uint64
	maxKeys int // per shard; 0 = unbounded
}

type memShard struct {
	shard[*memEntry]
	nextSweep int64 // µs
}

func entryExpires(e *memEntry) int64 { return e.expires }

// memKey names an identity: the policy's ID and the key, or its hash for
// keys over 128 bytes (hashed tells which, so the two never meet).
type memKey struct {
	policy, key string
	hashed      bool
}

type memEntry struct {
	expires int64 // µs; the entry is empty from then on
	f       []int64
}

// MemoryOption configures NewMemory.
type MemoryOption func(*Memory)

// WithClock sets the clock the memory store reads (default time.Now). Tests
// use it to drive time; it must be safe for concurrent use.
func WithClock(now func() time.Time) MemoryOption {
	return func(m *Memory) {
		if now != nil {
			m.now = now
		}
	}
}

// WithShards sets the number of shards, rounded up to a power of two
// (default 64). More shards mean less lock contention between identities.
func WithShards(n int) MemoryOption {
	return func(m *Memory) {
		size := 1
		for size < n && size < 1<<16 {
			size <<= 1
		}
		m.shards = make([]memShard, size)
	}
}

// WithMaxKeys bounds the number of identities the store holds (default 0:
// unbounded; idle ones are still evicted after their TTL). The store never
// holds more than n. When a shard is full, one entry is evicted (an expired
// one, or the one closest to expiry among a few sampled): that identity's
// counters restart, so the bound trades exactness under a flood of
// distinct identities for memory.
func WithMaxKeys(n int) MemoryOption {
	return func(m *Memory) { m.maxKeys = n }
}

// NewMemory returns an in-memory Store.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{now: time.Now, seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(m)
	}
	if m.shards == nil {
		m.shards = make([]memShard, 64)
	}
	for i := range m.shards {
		m.shards[i].m = make(map[memKey]*memEntry)
	}
	m.mask = uint64(len(m.shards) - 1)
	if m.maxKeys > 0 {
		// Each shard holds maxKeys/shards; fewer keys than shards means
		// fewer shards, so the bound holds exactly.
		for len(m.shards) > 1 && m.maxKeys < len(m.shards) {
			m.shards = m.shards[:len(m.shards)/2]
		}
		m.mask = uint64(len(m.shards) - 1)
		m.maxKeys = max(m.maxKeys/len(m.shards), 1)
	}
	return m
}

// sweepEvery is how often a shard drops its expired entries.
const sweepEvery = int64(10 * time.Second / time.Microsecond)

// Take implements ratelimit.Store.
func (m *Memory) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	if err := validate(&req); err != nil {
		return ratelimit.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{}, err
	}
	var ps [ratelimit.MaxLimits]param
	lim, nf := params(req.Policy, &ps)
	alg, pid := req.Policy.Algorithm(), req.Policy.ID()
	ttl := req.Policy.TTL().Microseconds()

	// Lock the keys' shards in ascending order, each once.
	var idx [MaxKeys]uint64
	shards := idx[:len(req.Keys)]
	for i, k := range req.Keys {
		shards[i] = maphash.String(m.seed, k) & m.mask
	}
	order := shards
	if len(shards) > 1 {
		var sorted [MaxKeys]uint64
		order = sorted[:copy(sorted[:], shards)]
		slices.Sort(order)
		order = slices.Compact(order)
	}
	for _, s := range order {
		m.shards[s].mu.Lock()
	}
	defer func() {
		for _, s := range order {
			m.shards[s].mu.Unlock()
		}
	}()
	now := m.now().UnixMicro()

	// Pass 1: find (or create) each key's state and check every limit.
	var ents [MaxKeys]*memEntry
	var times [MaxKeys]int64
	// used and retries of limit i of key ki sit at ki*len(lim)+i; the stack
	// buffers fit four keys, the common case, without zeroing much.
	var usedBuf, retryBuf [4 * ratelimit.MaxLimits]int64
	used, retries := usedBuf[:], retryBuf[:]
	if n := len(req.Keys) * len(lim); n > len(usedBuf) {
		used, retries = make([]int64, n), make([]int64, n)
	}
	check1 := req.Cost
	if check1 == 0 {
		check1 = 1 // a peek asks whether a request of cost 1 would fit
	}
	allowed := true
	for ki, k := range req.Keys {
		sh := &m.shards[shards[ki]]
		mk := memKey{policy: pid, key: k}
		if len(k) > maxPlainKey {
			mk.key, mk.hashed = hashedKey(k), true // bounds the bytes an identity holds, as in Redis
		}
		e := sh.get(mk, now, nf, m.maxKeys)
		ents[ki] = e
		t := max(now, e.f[0])
		times[ki] = t
		for i, p := range lim {
			u, retry := check(alg, e.f, t, p, check1)
			used[ki*len(lim)+i], retries[ki*len(lim)+i] = u, retry
			if retry != 0 {
				allowed = false
			}
		}
	}
	charged := int64(0)
	if allowed {
		charged = req.Cost
	}

	// Pass 2: report, charge, and fold into the decision.
	d := ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, len(lim))}
	for ki := range req.Keys {
		e, t := ents[ki], times[ki]
		for i, p := range lim {
			rem, reset := report(alg, e.f, t, p, used[ki*len(lim)+i], charged)
			fold(&d, i, ki, skewed(status{rem: rem, reset: reset, retry: retries[ki*len(lim)+i]}, t-now), ki == 0)
		}
		if charged > 0 {
			for i, p := range lim {
				charge(alg, e.f, t, p, used[ki*len(lim)+i], charged)
			}
			e.f[0] = t
			e.expires = t + ttl
		}
	}
	finish(&d, allowed)
	return d, nil
}

// get returns the live entry for k, creating or resetting it as needed.
// The caller holds sh.mu.
func (sh *memShard) get(k memKey, now int64, nf, maxKeys int) *memEntry {
	if now >= sh.nextSweep {
		sh.sweep(now)
	}
	e, ok := sh.m[k]
	if ok && e.expires > now && len(e.f) == nf {
		return e
	}
	if ok {
		clear(e.f)
		if len(e.f) != nf {
			e.f = make([]int64, nf)
		}
		return e
	}
	if maxKeys > 0 && len(sh.m) >= maxKeys {
		// Full: evict one sampled entry (an expired one if sampled), never
		// sweep the whole shard here, so a flood of new identities costs
		// constant work each; full sweeps stay on their timer above.
		sh.evictSample(now, entryExpires)
	}
	e = &memEntry{f: make([]int64, nf)}
	sh.m[k] = e
	return e
}

// sweep drops expired entries. The caller holds sh.mu.
func (sh *memShard) sweep(now int64) {
	for k, e := range sh.m {
		if e.expires <= now {
			delete(sh.m, k)
		}
	}
	sh.nextSweep = now + sweepEvery
}

// Len returns the number of identities the store holds, expired ones not
// yet swept included.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		n += m.shards[i].size()
	}
	return n
}

// Local marks the memory store as answering without I/O (ratelimit.Local).
func (m *Memory) Local() {}
