package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

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

// TestLongIdentity: an identity of any length is limited like any other
// (the stores hash long keys), never turned into a store error that a
// fail-open Limiter would let through unlimited.
func TestLongIdentity(t *testing.T) {
	long := strings.Repeat("u", 100_000)
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("2/h"),
		ratelimit.WithIdentifiers(ratelimit.ByUser(func(*http.Request) (string, bool) { return long, true })))
	codes := []int{}
	for range 3 {
		w := httptest.NewRecorder()
		lim.Handler(okHandler).ServeHTTP(w, getFrom(ipA))
		codes = append(codes, w.Code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("statuses %v, want [200 200 429]", codes)
	}
	ids := make([]ratelimit.Identifier, ratelimit.MaxKeys+1)
	for i := range ids {
		ids[i] = ratelimit.ByUser(func(*http.Request) (string, bool) { return "x", true })
	}
	if _, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/s"), ratelimit.WithIdentifiers(ids...)); err == nil {
		t.Fatal("more than MaxKeys identifiers accepted")
	}
}
