package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// The tests here that start a real Redis Cluster, those of
// cluster_outage_test.go and nodecircuit_test.go, and the Cluster and
// Sentinel conformance runs call t.Parallel: a new cluster serves only
// about 2s after its masters start (a master holds its writes that long),
// a Sentinel topology about 2s after its sentinels do, time the others use.

// TestClusterDeniedRefunds: on a real 3-master Redis Cluster, identities in
// different slots are checked in one pipeline, and a request denied by one
// is refunded on the others.
func TestClusterDeniedRefunds(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	// Find two identities on different masters.
	p := ratelimit.MustParsePolicy("5/h, 50/24h", ratelimit.Named("cluster"))
	user := "user:1"
	ip := ""
	for i := 0; ip == ""; i++ {
		cand := fmt.Sprintf("ip:192.0.2.%d", i)
		if cl.NodeForKey(redisKey(DefaultPrefix, p.ID(), cand)) != cl.NodeForKey(redisKey(DefaultPrefix, p.ID(), user)) {
			ip = cand
		}
	}
	for _, alg := range algorithms {
		p := ratelimit.MustParsePolicy("5/h, 50/24h", ratelimit.WithAlgorithm(alg), ratelimit.Named("cluster"+strconv.Itoa(int(alg))))
		if d := mustTake(t, s, p, 5, user); !d.Allowed {
			t.Fatalf("%s: first charge denied", alg)
		}
		if d := mustTake(t, s, p, 2, ip, user); d.Allowed || d.Key != 1 || d.Limits[1].Remaining != 45 {
			t.Fatalf("%s: want a denial by the user, whose day limit has 45 left, got %+v", alg, d)
		}
		waitRefunded(t, s, p, ip, 5, 50)
		if d := mustTake(t, s, p, 2, ip); !d.Allowed || d.Remaining != 3 {
			t.Fatalf("%s: %+v, want allowed with 3 left", alg, d)
		}
	}
	// The cluster also recovers from a script flush on every master.
	p = ratelimit.MustParsePolicy("5/h, 50/24h", ratelimit.Named("cluster0")) // the user spent its 5 above
	if err := client.ForEachMaster(context.Background(), func(ctx context.Context, c *goredis.Client) error {
		return c.ScriptFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, s, p, 1, ip, user); d.Allowed || d.Key != 1 {
		t.Fatalf("after flush: %+v, want denial by the user", d)
	}
	waitRefunded(t, s, p, ip, 3, 48) // the ip spent 2 of 5 and of 50 above
}

// waitRefunded waits for s's background refunds, including those still
// waiting for a charge in flight when Take returned, then requires a peek
// at key to show rem and day left. (Polling the key alone is not enough:
// before a late charge lands, the key looks refunded already.)
func waitRefunded(t *testing.T, s *Store, p *ratelimit.Policy, key string, rem, day int64) {
	t.Helper()
	done := make(chan struct{})
	go func() { s.refunds.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * refundTimeout):
		t.Fatalf("background refunds still running after %s", 2*refundTimeout)
	}
	if d := mustTake(t, s, p, 0, key); d.Remaining != rem || d.Limits[1].Remaining != day {
		t.Fatalf("%s was charged by a denied request and not refunded: %+v, want %d and %d left", key, d, rem, day)
	}
}

// TestBatchingPerNodeOnCluster: on a Cluster or Ring client WithBatching
// batches per node (no pipeline of the whole client: one spanning nodes
// answers when its slowest node does), whatever the option order; 0 turns
// it off; a plain client keeps its one batcher.
func TestBatchingPerNodeOnCluster(t *testing.T) {
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { cluster.Close() })
	for i, c := range []struct {
		opts []Option
		want int
	}{{nil, DefaultNodeBatching}, {[]Option{WithBatching(8)}, 8}, {[]Option{WithBatching(0)}, 0}, {[]Option{WithBatching(0), WithBatching(2)}, 2}} {
		cs, err := New(cluster, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if cs.batch != nil || cs.nodeBatching != c.want {
			t.Fatalf("step %d: a Cluster store batches the whole client (%v) or per node %d, want per node %d", i, cs.batch != nil, cs.nodeBatching, c.want)
		}
	}
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { plain.Close() })
	ps, err := New(plain, WithBatching(4))
	if err != nil {
		t.Fatal(err)
	}
	if ps.batch == nil || ps.batch.client != plain || ps.nodeBatching != 0 {
		t.Fatal("a single-server store dropped WithBatching")
	}
}

// TestRingPerKeyShards: on a *goredis.Ring each identity is counted on its
// own shard, whichever identities share a request: the key of b charged
// along with a is the key that b alone reads later.
func TestRingPerKeyShards(t *testing.T) {
	m1, m2 := miniredis.RunT(t), miniredis.RunT(t)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"s1": m1.Addr(), "s2": m2.Addr()}})
	t.Cleanup(func() { ring.Close() })
	s, err := New(ring, WithBatching(4))
	if err != nil {
		t.Fatal(err)
	}
	if !s.cluster || s.batch != nil {
		t.Fatalf("a Ring store must send one script per key, unbatched (cluster %v, batching %v)", s.cluster, s.batch != nil)
	}
	p := ratelimit.MustParsePolicy("1/h", ratelimit.Named("ring"))
	for i := 0; i < 20; i++ {
		a, b := fmt.Sprintf("ip:a%d", i), fmt.Sprintf("user:b%d", i)
		if d := mustTake(t, s, p, 1, a, b); !d.Allowed {
			t.Fatalf("pair %d: first request denied: %+v", i, d)
		}
		if d := mustTake(t, s, p, 1, b); d.Allowed {
			t.Fatalf("pair %d: %s alone was admitted after being charged with %s: its key went to the wrong shard", i, b, a)
		}
	}
	if len(m1.Keys()) == 0 || len(m2.Keys()) == 0 {
		t.Fatalf("keys not spread over the ring: %d and %d", len(m1.Keys()), len(m2.Keys()))
	}
}

// gateRefunds holds any pipeline carrying a refund (the script called
// with the operation opRefund) until open is closed, after telling held
// (if set): a late second round trip, as a slow master would make it.
type gateRefunds struct {
	open chan struct{}
	held chan struct{}
}

// isRefund reports whether a command runs the script's refund.
func isRefund(a []any) bool {
	if len(a) < 3 || !strings.EqualFold(fmt.Sprint(a[0]), "fcall") && !strings.EqualFold(fmt.Sprint(a[0]), "evalsha") && !strings.EqualFold(fmt.Sprint(a[0]), "eval") {
		return false
	}
	nk, err := strconv.Atoi(fmt.Sprint(a[2]))
	return err == nil && len(a) > 3+nk && fmt.Sprint(a[3+nk]) == opRefund
}

func (h gateRefunds) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h gateRefunds) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h gateRefunds) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if isRefund(c.Args()) {
				if h.held != nil {
					h.held <- struct{}{}
				}
				<-h.open
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestClusterLateTokenRefund: a Cluster refund that arrives late never
// takes back a later request's charge. Under "100/s" (token bucket, burst
// 1), key a is charged by a request that key b denies, so a's charge is
// given back before that call returns, but the give-back is held up on
// the way; meanwhile another caller charges a at +31ms (its token was
// back). Once the late refund has run, a request at +32ms, 1ms after that
// charge, must be denied: the refund may undo only what its own charge
// still counted (nothing by then), not the later charge. The scripts run on
// the test's clock, so the timing is exact.
func TestClusterLateTokenRefund(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	client := honoringClient(t, cl)
	gate := gateRefunds{open: make(chan struct{}), held: make(chan struct{}, 1)}
	client.AddHook(gate)
	var clk clock
	st, err := New(client, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("100/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(1), ratelimit.Named("late"))
	a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.2.0.%d", 1)
	clk.Set(t0)
	mustTake(t, st, p, 1, b) // b is out of tokens for 10ms
	denied := make(chan ratelimit.Decision, 1)
	go func() {
		d, _ := st.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{a, b}, Cost: 1})
		denied <- d
	}()
	select {
	case <-gate.held: // the give-back is on its way, held up
	case <-time.After(10 * time.Second):
		t.Fatal("a with b: no give-back was sent")
	}
	clk.Set(t0.Add(31 * time.Millisecond))
	if d := mustTake(t, st, p, 1, a); !d.Allowed {
		t.Fatalf("a at +31ms: %+v, want admitted (its token is back)", d)
	}
	close(gate.open)
	if d := <-denied; d.Allowed {
		t.Fatalf("a with b: %+v, want b's denial", d)
	}
	clk.Set(t0.Add(32 * time.Millisecond))
	if d := mustTake(t, st, p, 1, a); d.Allowed {
		t.Fatal("a admitted at +32ms, 1ms after its charge at +31ms (burst 1, 10ms interval): the late refund undid that charge")
	}
}

// TestClusterRetryAfterLongest: a denial waits for every master's answer
// (within the budget) and reports the longest wait any of them gave, so a
// client that waits Retry-After succeeds. Key a denies with a 9s wait, key
// b (on a master frozen for 300ms, so its answer comes last) with nearly an
// hour's: the request must report b's.
func TestClusterRetryAfterLongest(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	var clk clock
	st, err := New(honoringClient(t, cl), WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("2/10s, 3/h", ratelimit.Named("longest"))
	a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.3.0.%d", 1)
	at := func(d time.Duration) { clk.Set(t0.Add(d)) }
	at(0)
	mustTake(t, st, p, 2, b)
	at(15 * time.Second)
	mustTake(t, st, p, 1, b) // b: 3 of 3 this hour, 1 of 2 these 10s
	at(19 * time.Second)
	mustTake(t, st, p, 2, a) // a: 2 of 2 these 10s, 2 of 3 this hour
	at(20 * time.Second)
	done := make(chan struct{})
	cl.Pause(t, 1)
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		cl.Resume(t, 1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{a, b}, Cost: 1})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	want := time.Hour - 20*time.Second
	if d.Allowed || d.RetryAfter != want || d.Key != 1 || d.Limit != 1 {
		t.Fatalf("%+v: want a denial by b's hourly limit, RetryAfter %s (a's own wait is 9s)", d, want)
	}
}

// TestClusterUpToAndReset: on a Cluster, a grant across keys on different
// masters is the smallest of their grants (the excess is refunded), and a
// Reset forgets keys on several masters in one round trip.
func TestClusterUpToAndReset(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	st, err := New(honoringClient(t, cl))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, alg := range algorithms {
		p := ratelimit.MustParsePolicy("10/h", ratelimit.WithAlgorithm(alg), ratelimit.Named("upto"+alg.String()))
		a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.4.0.%d", 2)
		mustTake(t, st, p, 7, b) // b has 3 left, a 10
		d, err := st.TakeUpTo(ctx, ratelimit.Request{Policy: p, Keys: []string{a, b}, Cost: 5})
		if err != nil || !d.Allowed || d.Granted != 3 {
			t.Fatalf("%s: TakeUpTo 5: %+v %v, want 3 granted", alg, d, err)
		}
		st.WaitRefunds()
		if left := mustTake(t, st, p, 0, a); left.Remaining != 7 {
			t.Fatalf("%s: a has %d left after a grant of 3, want 7 (the excess refunded)", alg, left.Remaining)
		}
		if err := st.Reset(ctx, p, a, b); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{a, b} {
			if left := mustTake(t, st, p, 0, k); left.Remaining != 10 {
				t.Fatalf("%s: %s has %d left after Reset, want 10", alg, k, left.Remaining)
			}
		}
	}
}

// TestClusterBlockAcrossMasters: on a Redis Cluster, where each key of a
// request runs its own script on its own master, a blocked key denies the
// request whatever another key's request-ID record says, and a grant of
// nothing on one master starts that key's block.
func TestClusterBlockAcrossMasters(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	var clk clock
	st, err := New(honoringClient(t, cl), WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(time.Hour), ratelimit.Named("cblock"))
	a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.9.0.%d", 1)
	take := func(i int, at time.Duration, want bool, id string, keys ...string) {
		t.Helper()
		clk.Set(t0.Add(at))
		d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1, ID: id})
		if err != nil || d.Allowed != want {
			t.Fatalf("step %d (%q id %q): %+v, %v; want allowed %v", i, keys, id, d, err, want)
		}
	}
	take(0, 0, true, "x", a, b)
	take(1, 0, true, "", a)
	take(2, time.Second, false, "", a) // a's hour of block starts
	take(3, 2*time.Second, false, "x", a, b)
	st.WaitRefunds()
	take(4, 3*time.Second, true, "", b) // b was not charged by the denied repeat
	take(5, 61*time.Minute, true, "", a)

	g := keyOn(cl, p, "key:%d", 2)
	clk.Set(t0.Add(2 * time.Hour))
	mustTake(t, st, p, 2, g)
	if d, err := st.TakeUpTo(ctx, ratelimit.Request{Policy: p, Keys: []string{g, b}, Cost: 2}); err != nil || d.Allowed {
		t.Fatalf("grant with g full: %+v, %v", d, err)
	}
	st.WaitRefunds()
	clk.Set(t0.Add(2*time.Hour + 2*time.Minute))
	if d := mustTake(t, st, p, 1, g); d.Allowed || d.RetryAfter < 57*time.Minute {
		t.Fatalf("g after a grant of nothing: %+v, want its block", d)
	}
}
