// Package shardmap is the sharded map of identities that the memory store
// and the deny cache keep: lock-protected shards, each evicting by a
// sample of its entries, and the key of an identity under a policy.
package shardmap

import (
	"sync"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// Key names an identity under a policy: the policy's ID and the key, or
// its hash for keys over layout.MaxPlainKey bytes (Hashed tells which, so
// the two never meet).
type Key struct {
	Policy, Key string
	Hashed      bool
}

// KeyOf returns the Key of identity k under the policy of ID pid.
func KeyOf(pid, k string) Key {
	if len(k) > layout.MaxPlainKey {
		return Key{Policy: pid, Key: layout.HashedKey(k), Hashed: true}
	}
	return Key{Policy: pid, Key: k}
}

// Shard is one lock-protected part of a sharded map of identities.
type Shard[V any] struct {
	Mu sync.Mutex
	M  map[Key]V
	_  [40]byte // keeps neighbouring shards' locks off one cache line
}

// EvictSample drops one entry that skip (if not nil) does not protect: the
// first already expired (expires ≤ now) among up to 8 sampled (map
// iteration order is random), or else the one of them that expires first.
// Constant work, whatever the shard's size. It reports whether it dropped
// one. The caller holds Mu.
func (sh *Shard[V]) EvictSample(now int64, expires func(V) int64, skip func(Key) bool) bool {
	var victim Key
	first, seen := int64(0), 0
	for k, v := range sh.M {
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
	delete(sh.M, victim)
	return true
}

// Size returns the number of entries.
func (sh *Shard[V]) Size() int {
	sh.Mu.Lock()
	defer sh.Mu.Unlock()
	return len(sh.M)
}
