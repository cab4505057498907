package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// honoringClient returns a client of cl that enforces context deadlines on
// its sockets, as the store's documentation asks for Cluster.
func honoringClient(t *testing.T, cl *redistest.Cluster) *goredis.ClusterClient {
	o := cl.Client(t).Options()
	o.ContextTimeoutEnabled = true
	c := goredis.NewClusterClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// keyOn returns the first identifier from format whose key lands on master.
func keyOn(cl *redistest.Cluster, p *ratelimit.Policy, format string, master int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf(format, i)
		if cl.NodeForKey(redisKey(DefaultPrefix, p.ID(), k)) == master {
			return k
		}
	}
}

// TestClusterDeadMasterDenialStands: with one master dead, a request whose
// user (on a live master) is at its limit is denied, in time, even though
// its IP's master cannot answer: a known denial never turns into a store
// error that a fail-open Limiter would let through.
func TestClusterDeadMasterDenialStands(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	st, err := New(honoringClient(t, cl))
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("1/h", ratelimit.Named("dead"))
	user, ipDead := keyOn(cl, p, "user:%d", 1), keyOn(cl, p, "ip:10.1.0.%d", 0)
	mustTake(t, st, p, 1, user)
	cl.Kill(t, 0)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{ipDead, user}, Cost: 1})
		cancel()
		if err != nil || d.Allowed || d.Key != 1 {
			t.Fatalf("attempt %d: %+v, %v; want a denial by the user (key 1)", i, d, err)
		}
		if el := time.Since(start); el > 5*time.Second { // hang guard only
			t.Fatalf("attempt %d took %s", i, el)
		}
	}
}

// stallRefunds makes any pipeline carrying a refund (isRefund) wait until
// its context ends: a stalled second round trip.
type stallRefunds struct{}

func (h stallRefunds) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h stallRefunds) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h stallRefunds) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if isRefund(c.Args()) {
				<-ctx.Done()
				return ctx.Err()
			}
		}
		return next(ctx, cmds)
	}
}

// TestClusterStalledRefund: when the refund round trip stalls, the request
// is still denied (refunds are best effort, off the request's path).
func TestClusterStalledRefund(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	client := honoringClient(t, cl)
	client.AddHook(stallRefunds{})
	st, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("1/h", ratelimit.Named("refund"))
	lim, err := ratelimit.New(st, p, ratelimit.WithTimeout(200*time.Millisecond), ratelimit.WithCircuitBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lim.Allow(context.Background(), "user:victim"); !d.Allowed || err != nil {
		t.Fatalf("first: %+v %v", d, err)
	}
	for i := 0; i < 5; i++ {
		if d, err := lim.Allow(context.Background(), fmt.Sprintf("ip:198.51.100.%d", i), "user:victim"); d.Allowed || err != nil {
			t.Fatalf("request %d: %+v %v; the user is at 1/h", i, d, err)
		}
	}
}

// TestClusterBatchedPartialOutage: with one master dead, requests for keys
// on the live masters keep being answered, with or without WithBatching
// (which a Cluster store ignores: a batch would wait for the dead node).
func TestClusterBatchedPartialOutage(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	client := honoringClient(t, cl)
	p := ratelimit.MustParsePolicy("1000000/h", ratelimit.Named("po"))
	plain, _ := New(client)
	batched, _ := New(client, WithBatching(2))
	var keys []string
	for i := 0; i < 60; i++ {
		keys = append(keys, fmt.Sprintf("ip:10.0.%d.%d", i/256, i%256))
	}
	for _, k := range keys {
		mustTake(t, plain, p, 1, k)
	}
	cl.Kill(t, 0)
	for name, st := range map[string]*Store{"plain": plain, "batched": batched} {
		var liveErr, liveOK atomic.Int64
		var firstErr sync.Once
		var sample error
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					k := keys[(g*7+i)%len(keys)]
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					_, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{k}, Cost: 1})
					cancel()
					if cl.NodeForKey(redisKey(DefaultPrefix, p.ID(), k)) != 0 {
						if err != nil {
							liveErr.Add(1)
							firstErr.Do(func() { sample = err })
						} else {
							liveOK.Add(1)
						}
					}
				}
			}(g)
		}
		wg.Wait()
		t.Logf("%s: keys on live masters: %d answered, %d errors", name, liveOK.Load(), liveErr.Load())
		if liveErr.Load() != 0 || liveOK.Load() == 0 {
			t.Errorf("%s: %d errors for keys on live masters (%d answered), want none; first: %v", name, liveErr.Load(), liveOK.Load(), sample)
		}
	}
}
