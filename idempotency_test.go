package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestIdempotencyKey: a request repeated with the same Idempotency-Key is
// charged once and answered with its first decision, at most MaxRepeats
// times; then it is charged like any request. Another key value, or none,
// is charged.
func TestIdempotencyKey(t *testing.T) {
	for name, s := range map[string]ratelimit.Store{"memory": store.NewMemory(), "miniredis": miniredisStore(t)} {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t, s, ratelimit.MustParsePolicy("10/h"), ratelimit.WithIdempotencyKey("Idempotency-Key"), patient)
			var runs atomic.Int64
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				res, _ := ratelimit.FromContext(r.Context())
				w.Header().Set("X-Repeated", map[bool]string{true: "yes", false: "no"}[res.Decision.Repeated])
			}))
			send := func(key string) *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				r := getFrom(ipA)
				if key != "" {
					r.Header.Set("Idempotency-Key", key)
				}
				h.ServeHTTP(w, r)
				return w
			}
			first := send("order-17")
			for i := 0; i < ratelimit.MaxRepeats; i++ {
				w := send("order-17")
				if w.Header().Get("X-Repeated") != "yes" || w.Header().Get("RateLimit") != first.Header().Get("RateLimit") {
					t.Fatalf("repeat %d: repeated %q, RateLimit %q; want the first decision %q", i, w.Header().Get("X-Repeated"), w.Header().Get("RateLimit"), first.Header().Get("RateLimit"))
				}
			}
			if w := send("order-17"); w.Header().Get("X-Repeated") != "no" {
				t.Fatal("a repeat beyond MaxRepeats was not charged: reusing an ID is a free pass")
			}
			send("order-18")
			send("")
			if d, _ := lim.AllowN(context.Background(), 0, "ip:203.0.113.7"); d.Remaining != 6 {
				t.Fatalf("%d left, want 6: charged for order-17 twice (first, and beyond the repeats), order-18 and the request without a key", d.Remaining)
			}
			if runs.Load() != 7 {
				t.Fatalf("the handler ran %d times, want 7: every repeat runs it", runs.Load())
			}
		})
	}
}

// TestIdempotencyReplayDuringBlock: a block (BlockFor) holds against
// replays of Idempotency-Keys admitted before it: no handler runs for the
// identity until the block ends.
func TestIdempotencyReplayDuringBlock(t *testing.T) {
	mr := miniredis.RunT(t)
	mini, err := store.NewRedis(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]ratelimit.Store{"memory": store.NewMemory(), "miniredis": mini} {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t, s, ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(time.Hour)), ratelimit.WithIdempotencyKey("Idempotency-Key"), patient)
			var runs atomic.Int64
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
			send := func(key string) int {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, getFrom(ipA, "Idempotency-Key", key))
				return w.Code
			}
			for i, want := range []int{200, 200, 429} { // the third starts the hour's block
				if code := send(fmt.Sprintf("order-%d", i)); code != want {
					t.Fatalf("step %d: %d, want %d", i, code, want)
				}
			}
			before := runs.Load()
			for i := 0; i < 12; i++ {
				if code := send(fmt.Sprintf("order-%d", i%2)); code != http.StatusTooManyRequests {
					t.Fatalf("step %d: replay of an admitted key during the block answered %d", i+3, code)
				}
			}
			if runs.Load() != before {
				t.Fatalf("the handler ran %d times during the block, want 0", runs.Load()-before)
			}
		})
	}
}
