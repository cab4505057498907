package denycache_test

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/denycache"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/storetest"
)

// TestConformance runs the conformance suite on a memory store behind a
// deny cache on the same clock: it must admit and deny as the memory store
// does (a cached denial says the same RetryAfter for one key), and keep
// every guarantee and scenario.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) ratelimit.Store {
			return denycache.New(memory.New(memory.WithClock(now)), denycache.WithClock(now))
		},
		Cached: true,
	})
}
