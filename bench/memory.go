package main

import (
	"context"
	"net/http"

	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// The memory section: in-process limiters, no Redis. Every row is called
// in process by the same harness as the Redis rows (-concurrency
// goroutines, -identities client IPs), with rates ×memoryScale so that
// every request is allowed.

const (
	sethvargoHTTP = "sethvargo/go-limiter httplimit"
	sethvargoTake = "sethvargo/go-limiter memorystore Take"
)

func memorySubjects() []subject {
	var s []subject
	for _, three := range []bool{false, true} {
		n := "1 limit"
		if three {
			n = "3 limits"
		}
		for _, alg := range fullAlgorithms {
			s = append(s, subject{
				name: "ours Handler, memory, " + alg.String() + ", " + n, family: "ours", base: sethvargoHTTP,
				note:  "ratelimit.New(store.NewMemory(), policy).Handler(next), ByIP (the default identifier)",
				build: func(e *env) (*instance, error) { return buildMemoryHandler(e, alg, three) },
			})
		}
	}
	for _, alg := range fullAlgorithms {
		s = append(s, subject{
			name: "ours Take, memory, " + alg.String() + ", 1 limit", family: "ours", base: sethvargoTake,
			note:  "store.NewMemory().Take",
			build: func(e *env) (*instance, error) { return buildMemoryTake(e, alg) },
		})
	}
	s = append(s,
		subject{name: sethvargoHTTP, family: "peer", baseline: true, build: buildSethvargoHTTP,
			note: "httplimit.NewMiddleware(memorystore.New(&Config{Tokens, Interval}), httplimit.IPKeyFunc()).Handle(next): fixed window per key (tokens refill at each interval tick)"},
		subject{name: sethvargoTake, family: "peer", baseline: true, build: buildSethvargoTake,
			note: "memorystore Store.Take(ctx, key) called directly"},
		subject{name: "floor: next handler alone", family: "floor", build: buildBareHandler,
			note: "the next handler and the harness, no limiter: what every Handler row pays besides limiting"},
	)
	return s
}

func (e *env) memoryPolicy(alg ratelimit.Algorithm, three bool) (*ratelimit.Policy, error) {
	if three {
		return policyOf(alg, threeLimits(memoryScale))
	}
	return policyOf(alg, e.sc.limits)
}

func buildMemoryHandler(e *env, alg ratelimit.Algorithm, three bool) (*instance, error) {
	pol, err := e.memoryPolicy(alg, three)
	if err != nil {
		return nil, err
	}
	return limiterInstance(e, store.NewMemory(), pol)
}

func buildMemoryTake(e *env, alg ratelimit.Algorithm) (*instance, error) {
	pol, err := e.memoryPolicy(alg, false)
	if err != nil {
		return nil, err
	}
	st, keys := store.NewMemory(), e.ids.keys
	return &instance{
		op: func(ctx context.Context, id int) (bool, error) {
			d, err := st.Take(ctx, ratelimit.Request{Policy: pol, Keys: keys[id], Cost: 1})
			return !d.Allowed, err
		},
		close: func() {},
	}, nil
}

// sethvargoStore is go-limiter's memory store for the section's single
// limit.
func sethvargoStore(e *env) (limiter.Store, error) {
	l := e.sc.limits[0]
	return memorystore.New(&memorystore.Config{Tokens: uint64(l.rate), Interval: l.period})
}

func buildSethvargoTake(e *env) (*instance, error) {
	st, err := sethvargoStore(e)
	if err != nil {
		return nil, err
	}
	keys := e.ids.keys
	return &instance{
		op: func(ctx context.Context, id int) (bool, error) {
			_, _, _, ok, err := st.Take(ctx, keys[id][0])
			return !ok, err
		},
		close: func() { _ = st.Close(context.Background()) },
	}, nil
}

func buildSethvargoHTTP(e *env) (*instance, error) {
	st, err := sethvargoStore(e)
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.NewMiddleware(st, httplimit.IPKeyFunc())
	if err != nil {
		_ = st.Close(context.Background())
		return nil, err
	}
	return &instance{
		op:    handlerOp(mw.Handle(noContent), e.ids.reqs),
		close: func() { _ = st.Close(context.Background()) },
	}, nil
}

func buildBareHandler(e *env) (*instance, error) {
	return &instance{op: handlerOp(http.Handler(noContent), e.ids.reqs), close: func() {}}, nil
}
