package store

import "sync"

// shard is one lock-protected part of a sharded map of identities, shared
// by the memory store and the deny cache.
type shard[V any] struct {
	mu sync.Mutex
	m  map[memKey]V
	_  [40]byte // keeps neighbouring shards' locks off one cache line
}

// evictSample drops one entry that skip (if not nil) does not protect: the
// first already expired (expires ≤ now) among up to 8 sampled (map
// iteration order is random), or else the one of them that expires first.
// Constant work, whatever the shard's size. It reports whether it dropped
// one. The caller holds sh.mu.
func (sh *shard[V]) evictSample(now int64, expires func(V) int64, skip func(memKey) bool) bool {
	var victim memKey
	first, seen := int64(0), 0
	for k, v := range sh.m {
		if skip != nil && skip(k) {
			continue
		}
		if e := expires(v); seen == 0 || e < first {
			victim, first = k, e
		}
		if seen++; seen == 8 || first <= now {
			break
		}
	}
	if seen == 0 {
		return false
	}
	delete(sh.m, victim)
	return true
}

// size returns the number of entries.
func (sh *shard[V]) size() int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.m)
}
