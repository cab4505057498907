package ratelimit_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

func TestHandlerTimeout(t *testing.T) {
	for _, mode := range []ratelimit.FailureMode{ratelimit.FailOpen, ratelimit.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			slow, slowFallback := &blockStore{}, &blockStore{}
			var h hookRecorder
			lim := newLimiter(t, slow, ratelimit.MustParsePolicy("2/m"), append(h.options(),
				ratelimit.WithTimeout(time.Millisecond), ratelimit.WithFailureMode(mode),
				ratelimit.WithFallback(slowFallback), ratelimit.WithLogger(discardLogger))...)
			w := httptest.NewRecorder()
			returnsWithin(t, func() { lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA)) })
			want := isUnlimited
			if mode == ratelimit.FailClosed {
				want = isUnavailable
			}
			for _, c := range want {
				c(t, w)
			}
			for _, s := range []*blockStore{slow, slowFallback} {
				calls, deadlines, errs := s.seen()
				if calls != 1 || deadlines != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
					t.Errorf("store saw %d calls, %d with a deadline, ended by %v; want 1, 1, deadline exceeded", calls, deadlines, errs)
				}
			}
			errs := h.errors()
			if len(errs) != 2 {
				t.Fatalf("error hook calls %d, want 2", len(errs))
			}
			for _, err := range errs {
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within 1ms") {
					t.Errorf("hook error %q, want a timeout", err)
				}
			}
		})
	}
}

// timeoutStore ignores its context deadline's error value and reports a
// network-style timeout instead, as a Redis client may.
type timeoutStore struct{}

func (timeoutStore) Take(ctx context.Context, _ ratelimit.Request) (ratelimit.Decision, error) {
	<-ctx.Done()
	return ratelimit.Decision{}, errors.New("i/o timeout")
}

func TestHandlerTimeoutWrapsDeadline(t *testing.T) {
	var h hookRecorder
	lim := newLimiter(t, timeoutStore{}, ratelimit.MustParsePolicy("2/m"), append(h.options(),
		ratelimit.WithTimeout(time.Millisecond), ratelimit.WithLogger(discardLogger))...)
	returnsWithin(t, func() { lim.Handler(okHandler).ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) })
	errs := h.errors()
	if len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) || !strings.Contains(errs[0].Error(), "i/o timeout") {
		t.Errorf("hook errors %v, want the store's wrapped with the deadline", errs)
	}
}

// deadlineStore records whether its context had a deadline.
type deadlineStore struct {
	mem         *store.Memory
	hadDeadline []bool
}

func (s *deadlineStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	_, ok := ctx.Deadline()
	s.hadDeadline = append(s.hadDeadline, ok)
	return s.mem.Take(ctx, req)
}

type localStore struct{ *deadlineStore }

func (localStore) Local() {}

// TestLocalStoreNoDeadline: a store marked storekit.Local is called
// without a deadline (no timer per request); any other store gets the
// Limiter's timeout.
func TestLocalStoreNoDeadline(t *testing.T) {
	remote := &deadlineStore{mem: store.NewMemory()}
	local := localStore{&deadlineStore{mem: store.NewMemory()}}
	for _, c := range []struct {
		st   ratelimit.Store
		rec  *deadlineStore
		want bool
	}{{remote, remote, true}, {local, local.deadlineStore, false}} {
		lim := newLimiter(t, c.st, ratelimit.MustParsePolicy("5/m"))
		lim.Handler(okHandler).ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
		if len(c.rec.hadDeadline) != 1 || c.rec.hadDeadline[0] != c.want {
			t.Errorf("%T: deadlines %v, want [%v]", c.st, c.rec.hadDeadline, c.want)
		}
	}
	var _ storekit.Local = store.NewMemory()
}
