package limitertest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/client"
)

// loadRun is what one load run got.
type loadRun struct {
	admitted, denied int64 // counted by the server
	failed           int64 // requests that ended in an error other than the run's end
	duration         time.Duration
}

// runLoad serves the example's /api/hello route ("10/s, 120/m, 240/h",
// named hello, per client IP, holding off) on a fresh store, and has
// workers goroutines send GET requests through rt, each as fast as rt
// lets it, for d.
func runLoad(t *testing.T, rt http.RoundTripper, workers int, d time.Duration) loadRun {
	t.Helper()
	lim := newLimited(t, "10/s, 120/m, 240/h")
	ts := httptest.NewServer(lim.handler)
	defer ts.Close()
	hc := &http.Client{Transport: rt}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api/hello", nil)
				resp, err := hc.Do(req)
				if errors.Is(err, context.DeadlineExceeded) {
					return // the run is over, or the next quota comes after its end
				}
				if err != nil {
					failed.Add(1)
					t.Errorf("request: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	return loadRun{admitted: lim.admitted.Load(), denied: lim.denied.Load(), failed: failed.Load(), duration: d}
}

// TestLoadPacedClientGetsTheRateWithAtMostOneRefusal is issue #29's
// measure: 8 goroutines sharing the transport against the example's 10/s
// route for 10 s get at least 95% of the rate (95 of the 100 the window
// admits) with at most one 429 in all. The same load through the plain
// transport is refused thousands of times. Real time: skipped with -short.
func TestLoadPacedClientGetsTheRateWithAtMostOneRefusal(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10 s load test")
	}
	const (
		workers  = 8
		duration = 10 * time.Second
		rate     = 10 // per second, the route's tightest limit
	)
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = workers // both runs reuse their connections

	paced := runLoad(t, client.NewTransport(base), workers, duration)
	t.Logf("with the transport: %d admitted, %d refused in %s", paced.admitted, paced.denied, paced.duration)
	if want := int64(0.95 * rate * duration.Seconds()); paced.admitted < want {
		t.Errorf("with the transport: %d admitted, want at least %d", paced.admitted, want)
	}
	if paced.denied > 1 {
		t.Errorf("with the transport: %d refused, want at most 1", paced.denied)
	}

	// The contrast, shorter: the same load without pacing.
	plainFor := 3 * time.Second
	plain := runLoad(t, base, workers, plainFor)
	t.Logf("without the transport: %d admitted, %d refused in %s", plain.admitted, plain.denied, plain.duration)
	if plain.denied < 100 {
		t.Errorf("without the transport: %d refused in %s, want many (100 or more)", plain.denied, plainFor)
	}
}
