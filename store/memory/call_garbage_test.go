package memory

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"github.com/ratelimitkit/ratelimit"
)

// TestTakeGarbageGrowsWithItsRequest pins that what a Take allocates
// grows with its own keys and limits, not with the most a request may
// have: a call's room for MaxKeys keys of MaxLimits limits (some 14 KB)
// is reused, not made and zeroed for every request, where a Take of one
// key allocates about a tenth of that.
func TestTakeGarbageGrowsWithItsRequest(t *testing.T) {
	room := float64(unsafe.Sizeof(call{}))
	for step, tc := range []struct {
		policy string
		keys   int
	}{
		{"100000/s", 1},
		{"100000/s, 1000000/m, 10000000/h", 1},
		{"100000/s, 1000000/m, 10000000/h", 4},
		{"100000/s, 1000000/m, 10000000/h", ratelimit.MaxKeys},
	} {
		p := ratelimit.MustParsePolicy(tc.policy)
		m := New()
		keys := make([]string, tc.keys)
		for i := range keys {
			keys[i] = "ip:10.0.0." + strconv.Itoa(i)
		}
		take := func() {
			if _, err := m.Take(context.Background(), ratelimit.Request{Policy: p, Keys: keys, Cost: 1}); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		take() // the entries exist before counting
		const runs = 2000
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			take()
		}
		runtime.ReadMemStats(&after)
		per := float64(after.TotalAlloc-before.TotalAlloc) / runs
		t.Logf("step %d: %q on %d keys: %.0f bytes a Take (a call's room: %.0f)", step, tc.policy, tc.keys, per, room)
		// Under -race the pool drops a quarter of what it is given, so a
		// Take makes a call's room now and then: still under half of it.
		if per > room/2 {
			t.Errorf("step %d: a Take of %d keys allocates %.0f bytes, more than half a call's room for every key (%.0f): the room is made anew", step, tc.keys, per, room)
		}
	}
}
