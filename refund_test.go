package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestRefundIf: with WithRefundIf counting only failures, successful
// requests are given back; the status is seen through Flush and
// ResponseController.
func TestRefundIf(t *testing.T) {
	mem, _ := memoryStore()
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("3/h"),
		ratelimit.WithRefundIf(func(_ *http.Request, status int) bool { return status < 400 }))
	fail := false
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the status writer: %v", err)
		}
		io.WriteString(w, "welcome")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	// The refund runs after the handler returns, before the response ends:
	// reading each body to its end orders the next request after it.
	get := func() int {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; i < 10; i++ { // successes: refunded, never limited
		if code := get(); code != 200 {
			t.Fatalf("success %d: %d", i, code)
		}
	}
	fail = true
	codes := []int{}
	for i := 0; i < 4; i++ {
		codes = append(codes, get())
	}
	if want := []int{401, 401, 401, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("failures: statuses %v, want %v (only failures count)", codes, want)
	}
}

// TestRefundAndReset: Limiter.Refund gives a charge back once, whoever
// asks; Reset forgets keys (penalty included); both say ErrUnsupported on
// a store without them.
func TestRefundAndReset(t *testing.T) {
	mem, _ := memoryStore()
	p := ratelimit.MustParsePolicy("2/h", ratelimit.BlockFor(time.Hour))
	lim := newLimiter(t, mem, p)
	ctx := context.Background()
	d1, _ := lim.Allow(ctx, "user:x")
	lim.Allow(ctx, "user:x")
	if err := lim.Refund(ctx, d1); err != nil {
		t.Fatal(err)
	}
	copyOfD1 := d1
	if err := lim.Refund(ctx, copyOfD1); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowN(ctx, 0, "user:x"); d.Remaining != 1 {
		t.Fatalf("%d left after refunding one charge twice, want 1 (refunded once)", d.Remaining)
	}
	lim.Allow(ctx, "user:x")
	if d, _ := lim.Allow(ctx, "user:x"); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("over the limit: %+v, want blocked for 1h", d)
	}
	if err := lim.Reset(ctx, "user:x"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Allow(ctx, "user:x"); !d.Allowed {
		t.Fatalf("after Reset: %+v, want the block lifted and a fresh budget", d)
	}
	bare := newLimiter(t, storeFunc(func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		return mem.Take(ctx, req)
	}), p)
	d, _ := bare.Allow(ctx, "user:y")
	if err := bare.Reset(ctx, "user:y"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reset on a store without it: %v", err)
	}
	if err := bare.Refund(ctx, d); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Refund on a store without it: %v", err)
	}
	if _, err := ratelimit.New(storeFunc(mem.Take), p, ratelimit.WithRefundIf(func(*http.Request, int) bool { return true })); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WithRefundIf on a store that cannot refund: %v", err)
	}
}
