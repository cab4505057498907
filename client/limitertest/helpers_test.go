package limitertest_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// limited is this project's Limiter serving policy (named "hello") on the
// memory store, holding off (a request the policy refuses gets 429 at
// once), counting what it admitted and refused.
type limited struct {
	handler  http.Handler
	admitted atomic.Int64
	denied   atomic.Int64
}

func newLimited(t testing.TB, policy string) *limited {
	t.Helper()
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy(policy, ratelimit.Named("hello")), ratelimit.WithMaxDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	l := &limited{}
	inner := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.admitted.Add(1)
		fmt.Fprintln(w, "hello")
	}))
	l.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		inner.ServeHTTP(rec, r)
		if rec.status == http.StatusTooManyRequests {
			l.denied.Add(1)
		}
	})
	return l
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
