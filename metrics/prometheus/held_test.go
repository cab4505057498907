package ratelimitprom_test

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
	col, reg := setup(t)
	// Before any request: the series a dashboard reads exist, at 0.
	compare(t, reg, ``, "ratelimit_held_requests_total", "ratelimit_store_errors_total")
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("2/s", ratelimit.Named("api")),
		ratelimit.WithObserver(col), ratelimit.WithMaxHeld(1))
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
	compare(t, reg, `
		ratelimit_held_requests_total{outcome="gave_up"} 1
		ratelimit_held_requests_total{outcome="queue_full"} 1
		ratelimit_held_requests_total{outcome="served"} 1
	`, "ratelimit_held_requests_total")
	m := metric(t, reg, "ratelimit_hold_wait_seconds", nil)
	if m == nil || m.GetHistogram().GetSampleCount() != 2 || m.GetHistogram().GetSampleSum() < 0.03 {
		t.Errorf("hold waits %v, want 2 (the one that gave up after 30ms, the one served)", m.GetHistogram())
	}
	compare(t, reg, `
		ratelimit_decisions_total{fallback="false",outcome="abandoned",policy="api"} 1
		ratelimit_decisions_total{fallback="false",outcome="allowed",policy="api"} 3
		ratelimit_decisions_total{fallback="false",outcome="denied",policy="api"} 1
	`, "ratelimit_decisions_total")
}
