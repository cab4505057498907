package ratelimitotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestHeldRequests: the requests a Limiter holds are counted by what
// became of them, with their waits. On "2/s" with one place to hold
// (WithMaxHeld(1)): two admitted at once, a third whose client leaves
// after 30ms (gave_up), then two together: one held until its turn and
// served, the other refused at once (queue_full). Real time: about a
// second.
func TestHeldRequests(t *testing.T) {
	obs, reader := setup(t)
	s := collect(t, reader)
	s.want(t, "ratelimit.hold.requests", map[string]float64{
		"outcome=served": 0, "outcome=refused": 0, "outcome=gave_up": 0, "outcome=queue_full": 0,
	})
	if n := len(s["ratelimit.store.errors"]); n != 6 {
		t.Errorf("%d store error series before any error, want the 6 made at 0", n)
	}

	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("2/s", ratelimit.Named("api")),
		ratelimit.WithObserver(obs), ratelimit.WithMaxHeld(1))
	h := lim.Handler(ok)
	wantCodes(t, serve(h, "203.0.113.7", 2), 200, 200)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	r.RemoteAddr = "203.0.113.7:40000"
	h.ServeHTTP(httptest.NewRecorder(), r)

	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = serve(h, "203.0.113.7", 1)[0]
		}()
	}
	wg.Wait()
	if !(codes[0] == 200 && codes[1] == 429 || codes[0] == 429 && codes[1] == 200) {
		t.Fatalf("two requests with one place to hold: %v, want one 200 and one 429", codes)
	}
	s = collect(t, reader)
	s.want(t, "ratelimit.hold.requests", map[string]float64{
		"outcome=served": 1, "outcome=refused": 0, "outcome=gave_up": 1, "outcome=queue_full": 1,
	})
	s.want(t, "ratelimit.hold.wait", map[string]float64{"": 2})
	s.want(t, "ratelimit.decisions", map[string]float64{
		"fallback=false,outcome=abandoned,policy=api": 1,
		"fallback=false,outcome=allowed,policy=api":   3,
		"fallback=false,outcome=denied,policy=api":    1,
	})
}
