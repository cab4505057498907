package client_test

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/client"
)

// TestConcurrentUseKeepsToTheQuota: 8 goroutines sharing one transport
// send 80 requests against this project's Limiter (10/s, holding off), on
// a clock that moves only when every goroutine waits for it. The server
// refuses none, and the transport spends the quota about as fast as the
// window allows (80 requests at 10/s: 7 s at best). Run with -race.
func TestConcurrentUseKeepsToTheQuota(t *testing.T) {
	const workers, each = 8, 10
	start := clockStart()
	clk := client.NewFakeClock(start)
	srv := newLimited(t, "10/s", clk.Now)
	rt := client.NewTransport(srv, client.WithClock(clk))
	var live atomic.Int64
	live.Store(workers)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer live.Add(-1)
			for i := range each {
				if code, err := get(context.Background(), rt, "http://api.test/hello"); code != http.StatusOK {
					t.Errorf("worker %d step %d: status %d, %v", w, i, code, err)
					failed.Add(1)
				}
			}
		}()
	}
	// Move the clock only when every live worker waits on it, so that the
	// run is the same however the goroutines are scheduled.
	deadline := time.Now().Add(30 * time.Second)
	for n := live.Load(); n > 0; n = live.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("stuck: %d workers, %d timers at %s", n, clk.Timers(), clk.Now().Sub(start))
		}
		if int64(clk.Timers()) >= n {
			clk.AdvanceToNextTimer()
			continue
		}
		runtime.Gosched()
	}
	wg.Wait()
	elapsed := clk.Now().Sub(start)
	t.Logf("%d requests in %s of the fake clock; %d refused", srv.admitted.Load(), elapsed, srv.denied.Load())
	if got := srv.admitted.Load(); got != workers*each {
		t.Errorf("admitted %d, want %d", got, workers*each)
	}
	if d := srv.denied.Load(); d != 0 {
		t.Errorf("server refused %d, want 0", d)
	}
	if elapsed < 7*time.Second || elapsed > 9*time.Second {
		t.Errorf("took %s, want 7 s to 9 s", elapsed)
	}
}
