package ratelimitgrpc_test

import (
	"context"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimitkit/ratelimit"
	ratelimitgrpc "github.com/ratelimitkit/ratelimit/grpc"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// testClock is a controlled clock for the stores.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// backends are the stores the interceptors are tested on, each on a
// controlled clock: memory, miniredis and, with redis-server on PATH, a
// real Redis.
func backends(t *testing.T) map[string]func(t *testing.T) (ratelimit.Store, *testClock) {
	b := map[string]func(t *testing.T) (ratelimit.Store, *testClock){
		"memory": func(t *testing.T) (ratelimit.Store, *testClock) {
			clk := newTestClock()
			return store.NewMemory(store.WithClock(clk.Now)), clk
		},
		"miniredis": func(t *testing.T) (ratelimit.Store, *testClock) {
			return redisStore(t, miniredis.RunT(t).Addr())
		},
	}
	if _, err := exec.LookPath("redis-server"); err == nil || redistest.Require() {
		b["real Redis"] = func(t *testing.T) (ratelimit.Store, *testClock) {
			return redisStore(t, redistest.StartServer(t).Addr)
		}
	} else {
		t.Log("real Redis: not run (no redis-server on PATH)")
	}
	return b
}

func redisStore(t *testing.T, addr string) (ratelimit.Store, *testClock) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	clk := newTestClock()
	s, err := rlredis.New(c, rlredis.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// serve starts a gRPC server with the health service behind lim's
// interceptors on a real loopback listener, and returns a client of it.
func serve(t *testing.T, lim *ratelimit.Limiter, opts ...ratelimitgrpc.Option) (healthpb.HealthClient, *health.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim, opts...)),
		grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(lim, opts...)))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn), hs
}

// newLimiter builds a Limiter that never holds a call (so a refusal is
// immediate), or fails the test.
//
// It gives the store 10 s unless opts set a timeout: under a loaded -race
// run a call to miniredis can take longer than the default 100ms, which
// would hand the decision to the fallback, on counters of its own.
func newLimiter(t *testing.T, s ratelimit.Store, p *ratelimit.Policy, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(s, p, append([]ratelimit.Option{ratelimit.WithMaxHeld(0), ratelimit.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func background() context.Context { return context.Background() }
