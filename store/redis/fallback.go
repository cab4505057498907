package redis

import (
	"sync"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

var _ storekit.FallbackStore = (*Store)(nil)

// Fallback implements storekit.FallbackStore: it returns the memory store
// (store/memory) that decides, in this process, while Redis fails. A
// Limiter built without WithFallback and WithFailureMode asks it, so an
// outage of Redis does not leave the routes unlimited: each server counts
// on its own, and a fleet of N servers admits up to N times the limit,
// until Redis answers again and its own counters decide once more. The
// memory store is made on the first call and the same one is returned ever
// after, so a process keeps its counts from one outage to the next (idle
// identities leave it once their counters expire). A store built WithClock
// gives it the same clock. WithFleetShare makes it admit each limit's
// share of the fleet.
func (r *Store) Fallback() ratelimit.Store { return r.fallback() }

// newFallback returns the function behind Fallback: the memory store,
// made once.
func newFallback(r *Store) func() ratelimit.Store {
	return sync.OnceValue(func() ratelimit.Store {
		var opts []memory.Option
		if r.now != nil {
			opts = append(opts, memory.WithClock(r.now))
		}
		if r.fleet != nil {
			return &shareStore{inner: memory.New(opts...), instances: r.fleet.instances}
		}
		return memory.New(opts...)
	})
}
