package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// The peers' rows: each other limiter at its defaults, one limiter per
// limit, called in sequence per identity (inSequence).

func buildRedisRate(e *env, auto bool) (*instance, error) {
	c := e.newClient()
	var rl *redis_rate.Limiter
	if auto {
		ap, err := c.AutoPipeline()
		if err != nil {
			c.Close()
			return nil, err
		}
		rl = redis_rate.NewLimiter(ap)
	} else {
		rl = redis_rate.NewLimiter(c)
	}
	lims := make([]redis_rate.Limit, len(e.sc.limits))
	for i, l := range e.sc.limits {
		lims[i] = redis_rate.Limit{Rate: int(l.rate), Burst: int(l.rate), Period: l.period}
	}
	return &instance{
		op: inSequence(e.ids.perL, len(lims), func(ctx context.Context, j int, k string) (bool, error) {
			res, err := rl.Allow(ctx, k, lims[j])
			return err == nil && res.Allowed == 0, err
		}),
		close: func() { c.Close() },
	}, nil
}

func buildUlule(e *env) (*instance, error) {
	c := e.newClient()
	st, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: e.prefix + "ul"})
	if err != nil {
		c.Close()
		return nil, err
	}
	lims := make([]*limiter.Limiter, len(e.sc.limits))
	for i, l := range e.sc.limits {
		lims[i] = limiter.New(st, limiter.Rate{Period: l.period, Limit: l.rate})
	}
	return &instance{
		op: inSequence(e.ids.perL, len(lims), func(ctx context.Context, j int, k string) (bool, error) {
			res, err := lims[j].Get(ctx, k)
			return err == nil && res.Reached, err
		}),
		close: func() { c.Close() },
	}, nil
}

// ululeHTTPName is ulule/limiter through its own net/http middleware: the
// peer of our Handler rows.
const ululeHTTPName = "ulule/limiter v3, stdlib middleware"

// buildUluleHTTP chains one ulule middleware per limit, as a user of
// ulule/limiter limits a route by several rates: each keyed by the client
// IP (ulule's default key getter) and its limit's number, so that the
// limits count apart in one store.
func buildUluleHTTP(e *env) (*instance, error) {
	c := e.newClient()
	st, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: e.prefix + "ulh"})
	if err != nil {
		c.Close()
		return nil, err
	}
	var h http.Handler = noContent
	for i := len(e.sc.limits) - 1; i >= 0; i-- {
		l := e.sc.limits[i]
		lim := limiter.New(st, limiter.Rate{Period: l.period, Limit: l.rate})
		suffix := ":" + strconv.Itoa(i)
		h = stdlib.NewMiddleware(lim, stdlib.WithKeyGetter(func(r *http.Request) string { return lim.GetIPKey(r) + suffix })).Handler(h)
	}
	return &instance{op: handlerOp(h, e.ids.reqs), close: func() { c.Close() }}, nil
}

func buildThrottled(e *env) (*instance, error) {
	c := e.newClient()
	st, err := goredisstore.NewCtx(c, e.prefix+"th:")
	if err != nil {
		c.Close()
		return nil, err
	}
	lims := make([]*throttled.GCRARateLimiterCtx, len(e.sc.limits))
	for i, l := range e.sc.limits {
		q := throttled.RateQuota{MaxRate: throttled.PerDuration(int(l.rate), l.period), MaxBurst: int(l.rate) - 1}
		if lims[i], err = throttled.NewGCRARateLimiterCtx(st, q); err != nil {
			c.Close()
			return nil, err
		}
	}
	return &instance{
		op: inSequence(e.ids.perL, len(lims), func(ctx context.Context, j int, k string) (bool, error) {
			limited, _, err := lims[j].RateLimitCtx(ctx, k, 1)
			return err == nil && limited, err
		}),
		close: func() { c.Close() },
	}, nil
}

// httprateCounters are httprate-redis counters, one per limit position,
// built once per run: httprate-redis builds its own go-redis client (it
// ignores Config.Client in v0.5.0, see README) and offers no way to close
// it, so making them per cell would leak connections.
type httprateCounters struct {
	mu       sync.Mutex
	counters []httprate.LimitCounter
	host     string
	port     uint16
	conc     int
}

func (h *httprateCounters) get(i int) (httprate.LimitCounter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.counters) <= i {
		rc, err := httprateredis.NewRedisLimitCounter(&httprateredis.Config{
			Host:             h.host,
			Port:             h.port,
			PrefixKey:        "hr" + strconv.Itoa(len(h.counters)),
			ClientName:       "ratelimit-bench",
			FallbackDisabled: true, // errors must show, not turn into an in-memory count
			FallbackTimeout:  time.Second,
			MaxActive:        h.conc,
			MaxIdle:          h.conc,
		})
		if err != nil {
			return nil, err
		}
		h.counters = append(h.counters, rc)
	}
	return h.counters[i], nil
}

func buildHTTPRate(e *env) (*instance, error) {
	if e.httprate == nil {
		return nil, errors.New("no address for httprate-redis")
	}
	lims := make([]*httprate.RateLimiter, len(e.sc.limits))
	for i, l := range e.sc.limits {
		c, err := e.httprate.get(i)
		if err != nil {
			return nil, err
		}
		lims[i] = httprate.NewRateLimiter(int(l.rate), l.period, httprate.WithLimitCounter(c))
	}
	perL, nl, reqs := e.ids.perL, len(lims), e.ids.reqs
	return &instance{
		op: func(_ context.Context, id int) (bool, error) {
			w := &discardRW{h: make(http.Header, 4)}
			for j, k := range perL[id] {
				if lims[j%nl].OnLimit(w, reqs[id], k) {
					if w.code != 0 { // httprate's error handler answered
						return false, fmt.Errorf("httprate: status %d", w.code)
					}
					return true, nil
				}
			}
			return false, nil
		},
		close: func() {},
	}, nil
}

// tripCounter is a go-redis hook that counts round trips: every command
// sent alone, and every pipeline or transaction sent as one. The commands
// go-redis sends to set up a new connection (HELLO, CLIENT SETINFO, …) are
// left out, as they are from the INFO counts: they are not the limiter's.
type tripCounter struct{ n *atomic.Int64 }

func (t tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setupCmd(cmd) {
			t.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (t tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !setupCmd(c) {
				t.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// setupCmd reports a command of go-redis's connection setup.
func setupCmd(c redis.Cmder) bool {
	switch c.Name() {
	case "hello", "client", "auth", "select", "readonly":
		return true
	}
	return false
}

// inSequence is the op of a peer that needs one call per limit and identity:
// it makes them in order and stops at the first denial, as a middleware
// would. call(ctx, j, key) asks limit j about key and reports a denial.
func inSequence(perL [][]string, nl int, call func(ctx context.Context, j int, key string) (bool, error)) func(context.Context, int) (bool, error) {
	return func(ctx context.Context, id int) (bool, error) {
		for j, k := range perL[id] {
			if denied, err := call(ctx, j%nl, k); err != nil || denied {
				return denied, err
			}
		}
		return false, nil
	}
}
