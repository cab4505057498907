package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// Our rows: the policy of a cell, our Redis store in a variant, and what
// the Take and Handler rows make of them.

func (e *env) policy(alg ratelimit.Algorithm) (*ratelimit.Policy, error) {
	return policyOf(alg, e.sc.limits)
}

func policyOf(alg ratelimit.Algorithm, specs []limitSpec) (*ratelimit.Policy, error) {
	limits := make([]ratelimit.Limit, len(specs))
	for i, l := range specs {
		limits[i] = ratelimit.Limit{Rate: l.rate, Period: l.period}
	}
	return ratelimit.NewPolicy("bench", alg, limits...)
}

// ourStore builds our Redis store for one cell, wrapped as v says, on a
// client of its own.
func ourStore(e *env, v variant) (ratelimit.Store, *redis.Client, *atomic.Int64, error) {
	opts := []store.RedisOption{store.WithPrefix(e.prefix)}
	if v.setBatch {
		opts = append(opts, store.WithBatching(v.batch))
	}
	c := e.newClient()
	rs, err := store.NewRedis(c, opts...)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	if !v.denyCache {
		return rs, c, nil, nil
	}
	calls := new(atomic.Int64)
	return store.NewDenyCache(countingStore{rs, calls}), c, calls, nil
}

// countingStore counts the calls that reach inner: behind a deny cache,
// its misses.
type countingStore struct {
	inner ratelimit.Store
	n     *atomic.Int64
}

func (s countingStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.n.Add(1)
	return s.inner.Take(ctx, req)
}

func buildOursTake(e *env, alg ratelimit.Algorithm, v variant) (*instance, error) {
	return buildOurs(e, alg, v, func(e *env, st ratelimit.Store, pol *ratelimit.Policy) (*instance, error) {
		keys := e.ids.keys
		return &instance{op: func(ctx context.Context, id int) (bool, error) {
			d, err := st.Take(ctx, ratelimit.Request{Policy: pol, Keys: keys[id], Cost: 1})
			return !d.Allowed, err
		}}, nil
	})
}

// buildOurs builds one of our rows: the scenario's policy for alg, our
// Redis store in variant v, and the instance that use makes of them, which
// then closes the store's client and reports its store calls.
func buildOurs(e *env, alg ratelimit.Algorithm, v variant, use func(*env, ratelimit.Store, *ratelimit.Policy) (*instance, error)) (*instance, error) {
	pol, err := e.policy(alg)
	if err != nil {
		return nil, err
	}
	st, c, calls, err := ourStore(e, v)
	if err != nil {
		return nil, err
	}
	inst, err := use(e, st, pol)
	if err != nil {
		c.Close()
		return nil, err
	}
	inst.close = func() { c.Close() }
	inst.storeCalls = calls
	return inst, nil
}

// discardRW is the ResponseWriter of the in-process HTTP calls: it keeps
// the header map and the status, nothing else.
type discardRW struct {
	h    http.Header
	code int
}

func (w *discardRW) Header() http.Header { return w.h }
func (w *discardRW) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
func (w *discardRW) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// handlerTimeout is the store timeout of our Limiter in the Handler rows.
const handlerTimeout = time.Second

var noContent = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

func buildOursHandler(e *env, alg ratelimit.Algorithm, v variant) (*instance, error) {
	return buildOurs(e, alg, v, limiterInstance)
}

// limiterInstance wraps st in our Limiter (ByIP, plus ByUser in scenario
// c) and calls its Handler in process.
func limiterInstance(e *env, st ratelimit.Store, pol *ratelimit.Policy) (*instance, error) {
	var nErr atomic.Int64
	var firstErr atomic.Value
	opts := []ratelimit.Option{
		ratelimit.WithErrorHook(func(_ *http.Request, err error) {
			if nErr.Add(1) == 1 {
				firstErr.Store(err.Error())
			}
		}),
		// The peers run without a deadline. The default 100ms is right for
		// production, but on a shared 2-core machine a descheduled Redis
		// can exceed it, and the Limiter would then decide with the
		// store's per-process fallback (fast, and not what is being
		// measured). The code path is the same.
		ratelimit.WithTimeout(handlerTimeout),
	}
	if e.sc.twoIDs {
		byIP := ratelimit.ByIP()
		byUser := ratelimit.ByUser(func(r *http.Request) (string, bool) { return r.Header.Get("X-User"), true })
		opts = append(opts, ratelimit.WithIdentifiers(byIP, byUser))
	}
	lim, err := ratelimit.New(st, pol, opts...)
	if err != nil {
		return nil, err
	}
	return &instance{
		op:    handlerOp(lim.Handler(noContent), e.ids.reqs),
		close: func() {},
		hookErrs: func() (int64, string) {
			s, _ := firstErr.Load().(string)
			return nErr.Load(), s
		},
	}, nil
}

// handlerOp calls h in process with identity id's request: 204 is an
// admission, 429 a denial, anything else an error.
func handlerOp(h http.Handler, reqs []*http.Request) opFunc {
	return func(_ context.Context, id int) (bool, error) {
		w := &discardRW{h: make(http.Header, 4)}
		h.ServeHTTP(w, reqs[id])
		switch w.code {
		case http.StatusNoContent:
			return false, nil
		case http.StatusTooManyRequests:
			return true, nil
		}
		return false, fmt.Errorf("status %d", w.code)
	}
}
