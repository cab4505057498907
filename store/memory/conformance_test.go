package memory_test

import (
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/storetest"
)

// TestConformance runs the conformance suite on the memory store: it is
// its own reference in Equivalence, so what this checks is the guarantee
// checker's traces and the scenarios.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) ratelimit.Store { return memory.New(memory.WithClock(now)) },
	})
}
