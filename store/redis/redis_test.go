package redis

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/bridge"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// realRedis reports whether tests should start a real redis-server: it is
// on PATH, or RATELIMIT_REQUIRE_REDIS=1 makes its absence a failure.
func realRedis() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil || redistest.Require()
}

// stores returns the stores every conformance test runs against: memory,
// Redis on miniredis (as NewRedis builds it, batching on, and with batching
// off), and Redis on a real redis-server (when one can be
// started; see internal/redistest).
func stores(t *testing.T) map[string]ratelimit.Store {
	t.Helper()
	mr := miniredis.RunT(t)
	mini, err := New(goredis.NewClient(&goredis.Options{Addr: mr.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	unbatched, err := New(goredis.NewClient(&goredis.Options{Addr: mr.Addr()}), WithBatching(0), WithPrefix("unbatched:"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ratelimit.Store{"memory": memory.New(), "miniredis": mini, "miniredis-unbatched": unbatched}
	if realRedis() {
		real, err := New(redistest.StartServer(t).Client(t))
		if err != nil {
			t.Fatal(err)
		}
		out["real"] = real
	}
	return out
}

// miniStore returns a Redis store with opts on its own client of a fresh
// miniredis, closed when the test ends.
func miniStore(t *testing.T, opts ...Option) (*miniredis.Miniredis, *goredis.Client, *Store) {
	t.Helper()
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { client.Close() })
	s, err := New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mr, client, s
}

func mustTake(t testing.TB, s ratelimit.Store, p *ratelimit.Policy, cost int64, keys ...string) ratelimit.Decision {
	t.Helper()
	d, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: keys, Cost: cost})
	if err != nil {
		t.Fatalf("Take(%q, cost %d): %v", keys, cost, err)
	}
	return d
}

// TestDeniedChargesNothing: a request denied by one identity's limit
// charges no other identity, and no limit of its own.
func TestDeniedChargesNothing(t *testing.T) {
	for name, s := range stores(t) {
		for _, alg := range algorithms {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				p := ratelimit.MustParsePolicy("5/h, 50/24h", ratelimit.WithAlgorithm(alg), ratelimit.Named("deny"+strconv.Itoa(int(alg))))
				user, ip := "user:"+t.Name(), "ip:"+t.Name()
				if d := mustTake(t, s, p, 5, user); !d.Allowed {
					t.Fatalf("first charge denied: %+v", d)
				}
				before := mustTake(t, s, p, 0, ip)
				for i := 0; i < 3; i++ {
					if d := mustTake(t, s, p, 1, ip, user); d.Allowed || d.Key != 1 || d.Limit != 0 {
						t.Fatalf("attempt %d: want denial by key 1 limit 0, got %+v", i, d)
					}
				}
				after := mustTake(t, s, p, 0, ip)
				if after.Remaining != before.Remaining || after.Limits[1].Remaining != before.Limits[1].Remaining {
					t.Fatalf("denied requests charged the ip: before %+v after %+v", before, after)
				}
				if after.Remaining != 5 {
					t.Fatalf("ip remaining %d, want 5", after.Remaining)
				}
			})
		}
	}
}

// TestConcurrentExact: 64 goroutines racing on one identity admit exactly
// the limit, never more, whatever the interleaving.
func TestConcurrentExact(t *testing.T) {
	for name, s := range stores(t) {
		for _, alg := range algorithms {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				spec := "100/10s"
				if alg != ratelimit.SlidingWindow {
					// Long periods so neither a window edge nor a refill can
					// fall inside the test's own run time.
					spec = "100/24h"
				}
				p := ratelimit.MustParsePolicy(spec, ratelimit.WithAlgorithm(alg), ratelimit.Named("conc"))
				key := "ip:" + t.Name()
				var admitted, errs atomic.Int64
				var wg sync.WaitGroup
				for g := 0; g < 64; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < 5; i++ {
							d, err := s.Take(context.Background(), ratelimit.Request{Policy: p, Keys: []string{key}, Cost: 1})
							if err != nil {
								errs.Add(1)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				if errs.Load() != 0 {
					t.Fatalf("%d errors", errs.Load())
				}
				got := admitted.Load()
				if alg == ratelimit.FixedWindow && got > 100 && got <= 200 {
					t.Skipf("admitted %d: the run crossed a midnight UTC window edge (documented 2× edge)", got)
				}
				if got != 100 {
					t.Fatalf("admitted %d of 320 attempts, want exactly 100", got)
				}
			})
		}
	}
}

// TestHugeCost: a cost far above every capacity, up to the largest int64,
// is denied as Never by every store and algorithm, charges nothing, and
// leaves the identity limited as before (no arithmetic overflow).
func TestHugeCost(t *testing.T) {
	for name, s := range stores(t) {
		for _, alg := range algorithms {
			p := ratelimit.MustParsePolicy("10/m, 100/h", ratelimit.WithAlgorithm(alg), ratelimit.Named("huge"))
			key := "ip:" + name + alg.String()
			mustTake(t, s, p, 10, key)
			for _, c := range []int64{1 << 62, 1<<63 - 1, 1537228672809, 11} {
				if d := mustTake(t, s, p, c, key); d.Allowed || d.RetryAfter != ratelimit.Never {
					t.Fatalf("%s/%s cost %d: %+v, want denied with Never", name, alg, c, d)
				}
			}
			if d := mustTake(t, s, p, 1, key); d.Allowed {
				t.Fatalf("%s/%s: still at the limit, yet admitted after huge costs: %+v", name, alg, d)
			}
		}
	}
}

// TestInvalidRequests: malformed requests are errors, never panics.
func TestInvalidRequests(t *testing.T) {
	p := ratelimit.MustParsePolicy("1/s")
	cases := []ratelimit.Request{
		{},
		{Policy: p},
		{Policy: p, Keys: []string{""}},
		{Policy: p, Keys: []string{"a"}, Cost: -1},
		{Policy: p, Keys: []string{"a", "a"}},
		{Policy: p, Keys: make([]string, ratelimit.MaxKeys+1)},
		{Policy: &ratelimit.Policy{}, Keys: []string{"a"}},
	}
	for name, s := range stores(t) {
		for i, req := range cases {
			if _, err := s.Take(context.Background(), req); !errors.Is(err, ratelimit.ErrInvalidRequest) {
				t.Errorf("%s case %d: err %v, want ratelimit.ErrInvalidRequest", name, i, err)
			}
		}
	}
}

// TestRealNoScriptRecovery: after SCRIPT FLUSH (as after a restart) the next
// Take reloads the script by itself.
func TestRealNoScriptRecovery(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("3/h")
	mustTake(t, s, p, 1, "a")
	if err := client.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, s, p, 1, "a"); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after SCRIPT FLUSH: %+v, want allowed with 1 remaining", d)
	}
}

// TestKeysExpire: every key carries a TTL no longer than the policy's,
// so idle identities leave Redis by themselves.
func TestKeysExpire(t *testing.T) {
	mr := miniredis.RunT(t)
	t1 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(t1)
	s, _ := New(goredis.NewClient(&goredis.Options{Addr: mr.Addr()}))
	for _, alg := range algorithms {
		p := ratelimit.MustParsePolicy("10/s, 120/m", ratelimit.WithAlgorithm(alg))
		key := redisKey(DefaultPrefix, p.ID(), "ip:192.0.2.1")
		mustTake(t, s, p, 1, "ip:192.0.2.1")
		ttl := mr.TTL(key)
		if ttl < p.TTL()*5/4 || ttl > p.TTL()*5/4+2*time.Millisecond {
			t.Fatalf("%s: TTL %s after a charge, want %s (a quarter TTL ahead) rounded up, plus 1ms", alg, ttl, p.TTL()*5/4)
		}
		// A charge soon after leaves the expiry alone (no PEXPIRE): it
		// still lies more than TTL ahead.
		mr.SetTime(t1.Add(p.TTL() / 8))
		mr.FastForward(p.TTL() / 8)
		mustTake(t, s, p, 1, "ip:192.0.2.1")
		if got := mr.TTL(key); got != ttl-p.TTL()/8 {
			t.Fatalf("%s: TTL %s, want %s: refreshed though more than TTL was left", alg, got, ttl-p.TTL()/8)
		}
		// Once less than TTL is left, a charge pushes it out again.
		mr.SetTime(t1.Add(p.TTL() / 2))
		mr.FastForward(p.TTL() * 3 / 8)
		mustTake(t, s, p, 1, "ip:192.0.2.1")
		if got := mr.TTL(key); got < p.TTL() {
			t.Fatalf("%s: TTL %s after a charge with less than TTL left, want at least %s", alg, got, p.TTL())
		}
		mr.FastForward(mr.TTL(key))
		if mr.Exists(key) {
			t.Fatalf("%s: key still there after its TTL", alg)
		}
		mr.SetTime(t1)
	}
}

// TestRealRoundTrips counts the round trips of N calls of a 3-limit policy
// with 2 identities: the client sends exactly N commands, one at a time
// (a go-redis hook sees every command and pipeline), and INFO commandstats
// on the server shows N EVALSHA and, besides them, only the commands the
// script itself runs.
func TestRealRoundTrips(t *testing.T) {
	srv := redistest.StartServer(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: 1})
	t.Cleanup(func() { client.Close() })
	hook := &countHook{}
	client.AddHook(hook)
	s, _ := New(client)
	p := ratelimit.MustParsePolicy("1000/s, 10000/m, 100000/h")
	ctx := context.Background()
	mustTake(t, s, p, 1, "ip:192.0.2.1", "user:1") // loads the script, opens the connection
	admin := srv.Client(t)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook.reset()
	const n = 200
	for i := 0; i < n; i++ {
		if d := mustTake(t, s, p, 1, "ip:192.0.2.1", "user:"+strconv.Itoa(i%7)); !d.Allowed {
			t.Fatalf("call %d denied", i)
		}
	}
	if hook.cmds != n || hook.pipelines != 0 || hook.names["evalsha"] != n {
		t.Fatalf("client sent %d commands (%v) and %d pipelines for %d Takes, want %d evalsha", hook.cmds, hook.names, hook.pipelines, n, n)
	}
	stats := commandStats(t, admin)
	delete(stats, "info") // our own INFO call
	delete(stats, "config|resetstat")
	if stats["evalsha"] != n {
		t.Fatalf("server saw %v for %d Takes, want %d evalsha", stats, n, n)
	}
	for name := range stats {
		if !map[string]bool{"evalsha": true, "time": true, "hmget": true, "hset": true, "pexpire": true}[name] {
			t.Fatalf("server saw %q: %v", name, stats)
		}
	}
	t.Logf("%d Takes (3 limits × 2 identities): client sent %d commands in %d round trips; server commandstats %v", n, hook.cmds, hook.cmds+hook.pipelines, stats)
}

// countHook counts the commands and pipelines a client sends.
type countHook struct {
	mu              sync.Mutex
	cmds, pipelines int
	names           map[string]int
}

func (h *countHook) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmds, h.pipelines, h.names = 0, 0, map[string]int{}
}

func (h *countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.mu.Lock()
		if h.names != nil {
			h.cmds++
			h.names[cmd.Name()]++
		}
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func commandStats(t *testing.T, c *goredis.Client) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name, st := range commandStatsFull(t, c) {
		out[name] = st.calls
	}
	return out
}

// TestRealMemoryPerIdentity measures MEMORY USAGE (SAMPLES 0: every field)
// of one identity's key for "10/s, 120/m, 240/h" under each algorithm, with
// every field of its layout written (the worst case: every sub-bucket of a
// sliding-window limit, every slot of a log); the default must stay within
// 1 KB. Then the sliding log's key at rates 10, 100 and 1000, for its bytes
// per unit of rate.
func TestRealMemoryPerIdentity(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	ctx := context.Background()
	usage := func(t *testing.T, p *ratelimit.Policy) int64 {
		t.Helper()
		var clk clock
		s, err := New(client, WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		const id = "ip:203.0.113.77"
		at := t0
		take := func(what string) {
			t.Helper()
			clk.Set(at)
			if d := mustTake(t, s, p, 1, id); !d.Allowed {
				t.Fatalf("%s: denied at %v", what, at.Sub(t0))
			}
		}
		// Logs first: as many admissions as the largest log has slots,
		// each a whole longest period after the last, so each is admitted
		// and every slot of every log is written. (Two at least, so the
		// weighted window writes its previous window too.)
		lay := bridge.Layout(p)
		lim, nf := lay.Limits, lay.MemFields
		slots := int64(2)
		for _, l := range lim {
			if l.Kind == layout.Log {
				slots = max(slots, l.Capacity)
			}
		}
		for i := int64(0); i < slots; i++ {
			take(fmt.Sprintf("log slot %d", i))
			at = at.Add(p.MaxPeriod() + time.Second)
		}
		// Then every sub-bucket: steps of n+2 sub-buckets visit the n+1
		// ring slots of a limit in turn, slowly enough to be admitted, and
		// leave each with a cost and an admission time (not zeros).
		for li, l := range lim {
			if l.Kind != layout.Buckets {
				continue
			}
			for b := int64(0); b <= l.N; b++ {
				take(fmt.Sprintf("limit %d sub-bucket %d", li, b))
				at = at.Add(time.Duration(l.Width*(l.N+2)) * time.Microsecond)
			}
		}
		key := redisKey(DefaultPrefix, p.ID(), id)
		n, err := client.MemoryUsage(ctx, key, 0).Result() // SAMPLES 0: every field
		if err != nil {
			t.Fatal(err)
		}
		fields, err := client.HLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := client.ObjectEncoding(ctx, key).Result()
		t.Logf("%-44s %4d bytes (%d hash fields, %s; %d numbers in the memory store)", p.ID(), n, fields, enc, nf)
		return n
	}

	const example = "10/s, 120/m, 240/h"
	for _, c := range []struct {
		name string
		opts []ratelimit.PolicyOption
	}{
		{"sliding-window (default)", nil},
		{"sliding-window, precision 5", []ratelimit.PolicyOption{ratelimit.WithPrecision(5)}},
		{"sliding-window, precision 10", []ratelimit.PolicyOption{ratelimit.WithPrecision(10)}},
		{"sliding-window, precision 20", []ratelimit.PolicyOption{ratelimit.WithPrecision(20)}},
		{"sliding-window, precision 50", []ratelimit.PolicyOption{ratelimit.WithPrecision(50)}},
		{"fixed-window", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.FixedWindow)}},
		{"token-bucket", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket)}},
		{"sliding-log", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingLog)}},
		{"sliding-window-approx", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := ratelimit.MustParsePolicy(example, append(c.opts, ratelimit.Named("mem"))...)
			n := usage(t, p)
			t.Logf("%s, %q: %d bytes per identity", c.name, example, n)
			if c.opts == nil && n > 1024 {
				t.Fatalf("default: %d bytes per identity, want ≤ 1024", n)
			}
		})
	}

	// The sliding log keeps 16 digits per unit of rate, 4 to a hash field
	// up to ExactRateMax (Redis's compact listpack encoding), 32 to a field
	// above (a hashtable, whose strings carry allocator overhead): from 100
	// to 1000 the key grows by a little more than 16 bytes per unit.
	t.Run("sliding-log by rate", func(t *testing.T) {
		rates := []int64{10, 100, 1000}
		sizes := make([]int64, len(rates))
		for i, r := range rates {
			p := ratelimit.MustParsePolicy(fmt.Sprintf("%d/s", r), ratelimit.WithAlgorithm(ratelimit.SlidingLog), ratelimit.Named("mem"))
			sizes[i] = usage(t, p)
			t.Logf("sliding-log, %d/s: %d bytes, %.1f per unit of rate", r, sizes[i], float64(sizes[i])/float64(r))
		}
		per := float64(sizes[2]-sizes[1]) / float64(rates[2]-rates[1])
		t.Logf("sliding-log from %d to %d: %.1f bytes per added unit of rate", rates[1], rates[2], per)
		if per < 16 || per > 24 {
			t.Errorf("sliding-log from rate %d to %d: %.1f bytes per added unit, want 16 (its digits) to 24", rates[1], rates[2], per)
		}
	})
}

// TestHostileKeys: identifiers that try to break out of their key (braces,
// colons, newlines, invalid UTF-8, 10 KB) stay inside their prefix and
// their own slot, and never meet another identity's key.
func TestHostileKeys(t *testing.T) {
	ids := []string{
		"ip:192.0.2.1", "user:{evil}", "user:}{", "user:{", "a}b{c}", "user:1\r\nDEL x", "key:\x00\xff\xfe",
		"user:%7B", "user:{", "#deadbeef", strings.Repeat("a", 10_000), strings.Repeat("a", 10_001),
		strings.Repeat("{", 129), "user:é", "user:\xc3", "ip:::1", "ip:0:0:0:0:0:0:0:1",
	}
	seen := map[string]string{}
	for _, id := range ids {
		key := redisKey("app:", "default:0000abcd", id)
		if !strings.HasPrefix(key, "app:{") || !strings.HasSuffix(key, "}:default:0000abcd") {
			t.Fatalf("%q: key %q left its prefix or suffix", id, key)
		}
		tag := key[len("app:{") : len(key)-len("}:default:0000abcd")]
		if strings.ContainsAny(tag, "{}\r\n\x00 ") || len(tag) > 3*layout.MaxPlainKey {
			t.Fatalf("%q: tag %q has a brace, control byte, or is too long", id, tag)
		}
		if prev, dup := seen[key]; dup && prev != id {
			t.Fatalf("%q and %q share key %q", prev, id, key)
		}
		seen[key] = id
	}
	if err := validPrefix("a{b"); err == nil {
		t.Fatal("prefix with a brace accepted")
	}
	if _, err := New(nil); err == nil {
		t.Fatal("nil client accepted")
	}
}

// TestClusterDeniedRefunds: on a real 3-master Redis Cluster, identities in
// different slots are checked in one pipeline, and a request denied by one
// is refunded on the others.
func TestClusterDeniedRefunds(t *testing.T) {
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

// TestBatchingSameDecisions: with batching on, concurrent Takes share
// pipelines and still admit exactly the limit; a script flush is
// recovered from; sequential Takes give the decisions of the memory store.
func TestBatchingSameDecisions(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(2))
	p := ratelimit.MustParsePolicy("100/24h, 1000/48h", ratelimit.Named("batch"))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:1", "user:" + strconv.Itoa(i%3)}, Cost: 1})
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != 100 {
		t.Fatalf("admitted %d of 320, want 100", admitted.Load())
	}
	if err := client.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if d := mustTake(t, s, p, 1, "ip:2"); !d.Allowed || d.Remaining != 99 {
		t.Fatalf("after SCRIPT FLUSH: %+v", d)
	}
	// A caller whose context ends does not wait for the batch.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:3"}, Cost: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Take: %v", err)
	}
}

// TestBatchingIgnoredOnCluster: WithBatching has no effect on a Cluster
// client (a pipeline spanning nodes answers when its slowest node does),
// whatever the option order; a plain client keeps it.
func TestBatchingIgnoredOnCluster(t *testing.T) {
	cluster := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { cluster.Close() })
	cs, err := New(cluster, WithBatching(4))
	if err != nil {
		t.Fatal(err)
	}
	if cs.batch != nil {
		t.Fatal("a Cluster store batches; it must send each key's script on its own")
	}
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { plain.Close() })
	ps, err := New(plain, WithBatching(4))
	if err != nil {
		t.Fatal(err)
	}
	if ps.batch == nil || ps.batch.client != plain {
		t.Fatal("a single-server store dropped WithBatching")
	}
}

// TestBatchingZeroTurnsOff: a later WithBatching(0) (or a negative value)
// undoes an earlier WithBatching(n).
func TestBatchingZeroTurnsOff(t *testing.T) {
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { plain.Close() })
	for _, off := range []int{0, -1} {
		s, err := New(plain, WithBatching(4), WithBatching(off))
		if err != nil {
			t.Fatal(err)
		}
		if s.batch != nil {
			t.Fatalf("WithBatching(4), WithBatching(%d): still batching", off)
		}
	}
}

// TestPreparedOncePerPolicy: many first calls racing on one policy prepare
// it once, so they use up one of the store's baked scripts, not many.
func TestPreparedOncePerPolicy(t *testing.T) {
	_, _, s := miniStore(t)
	for round := 0; round < 5; round++ {
		p := ratelimit.MustParsePolicy("100/s, 1000/m", ratelimit.Named(fmt.Sprintf("race%d", round)))
		start := make(chan struct{})
		got := make([]*prepared, 64)
		var wg sync.WaitGroup
		for g := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[g] = s.scripts.prepare(p, 0)
			}()
		}
		close(start)
		wg.Wait()
		for g, p := range got {
			if p != got[0] || p.tail != nil {
				t.Fatalf("round %d: caller %d got %p (tail %v), caller 0 %p: want one baked preparation", round, g, p, p.tail, got[0])
			}
		}
		if s.scripts.count != round+1 {
			t.Fatalf("round %d: %d policies counted, want %d", round, s.scripts.count, round+1)
		}
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

// TestBatchedErrorWrappedOnce: a batched call's error names the store once
// and carries the cause (here, the refused connection).
func TestBatchedErrorWrappedOnce(t *testing.T) {
	mr := miniredis.RunT(t)
	client := goredis.NewClient(&goredis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	s, err := New(client, WithBatching(2))
	if err != nil {
		t.Fatal(err)
	}
	mr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = s.Take(ctx, ratelimit.Request{Policy: ratelimit.MustParsePolicy("1/s"), Keys: []string{"ip:1"}, Cost: 1})
	if err == nil {
		t.Fatal("Take on a closed server succeeded")
	}
	if n := strings.Count(err.Error(), "ratelimit/store"); n != 1 {
		t.Fatalf("error %q names the store %d times, want once", err, n)
	}
	if !strings.Contains(err.Error(), "connect") {
		t.Fatalf("error %q does not say the connection failed", err)
	}
}

// TestClockStepsBack: when the clock steps back after a charge, the stores
// count from the last charge's time, and RetryAfter includes the step, so
// waiting exactly RetryAfter (on the stepped-back clock) is enough and
// 1µs less is not: never an early Retry-After.
func TestClockStepsBack(t *testing.T) {
	mr := miniredis.RunT(t)
	var clk clock
	mini, _ := New(goredis.NewClient(&goredis.Options{Addr: mr.Addr()}))
	set := func(at time.Time) { clk.Set(at); mr.SetTime(at) }
	for name, s := range map[string]ratelimit.Store{"memory": memory.New(memory.WithClock(clk.Now)), "miniredis": mini} {
		for _, alg := range algorithms {
			p := ratelimit.MustParsePolicy("1/s, 10/m", ratelimit.WithAlgorithm(alg), ratelimit.Named("back"))
			key := "ip:back-" + name + alg.String()
			set(t0)
			mustTake(t, s, p, 1, key)
			back := t0.Add(-10 * time.Second)
			set(back)
			d := mustTake(t, s, p, 1, key)
			if d.Allowed || d.RetryAfter <= 10*time.Second {
				t.Fatalf("%s/%s: %+v, want a denial waiting more than the 10s step", name, alg, d)
			}
			set(back.Add(d.RetryAfter - time.Microsecond))
			if mustTake(t, s, p, 1, key).Allowed {
				t.Fatalf("%s/%s: admitted 1µs before RetryAfter %s", name, alg, d.RetryAfter)
			}
			set(back.Add(d.RetryAfter))
			if got := mustTake(t, s, p, 1, key); !got.Allowed {
				t.Fatalf("%s/%s: denied after waiting RetryAfter %s: %+v", name, alg, d.RetryAfter, got)
			}
		}
	}
}

// TestWrongTypeHeals: a counter key overwritten with another type (say by
// a SET under our prefix) is replaced with fresh counters by the script,
// which logs it in Redis's log, instead of failing every request for that
// identity with WRONGTYPE forever (under FailOpen, never limited again).
func TestWrongTypeHeals(t *testing.T) {
	ctx := context.Background()
	clients := map[string]*goredis.Client{"miniredis": goredis.NewClient(&goredis.Options{Addr: miniredis.RunT(t).Addr()})}
	var srv *redistest.Server
	if realRedis() {
		srv = redistest.StartServer(t)
		clients["real"] = srv.Client(t)
	}
	for name, client := range clients {
		s, err := New(client)
		if err != nil {
			t.Fatal(err)
		}
		p := ratelimit.MustParsePolicy("2/h", ratelimit.Named("wt"))
		key := redisKey(DefaultPrefix, p.ID(), "ip:203.0.113.9")
		if err := client.Set(ctx, key, "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, true, false} {
			d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:203.0.113.9"}, Cost: 1})
			if err != nil || d.Allowed != want {
				t.Fatalf("%s: request %d: %+v, %v; want allowed %v (the key healed)", name, i, d, err, want)
			}
		}
		if typ := client.Type(ctx, key).Val(); typ != "hash" {
			t.Fatalf("%s: key type %q after healing", name, typ)
		}
		if name == "real" && !strings.Contains(srv.Logs(), "held another type") {
			t.Errorf("real: Redis's log does not mention the replaced key")
		}
	}
}

// TestBatchingOnByDefault: a store on a single Redis batches unless told
// not to, with DefaultBatching calls on the wire.
func TestBatchingOnByDefault(t *testing.T) {
	plain := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { plain.Close() })
	s, err := New(plain)
	if err != nil {
		t.Fatal(err)
	}
	if s.batch == nil || s.batch.max != DefaultBatching || s.batch.client != plain {
		t.Fatalf("default store: batcher %+v, want %d in flight on the client", s.batch, DefaultBatching)
	}
}

// gateHook holds every single command until gate is closed, and records the
// size of every pipeline of script calls.
type gateHook struct {
	gate  chan struct{}
	sent  atomic.Int64 // single commands that reached the hook
	mu    sync.Mutex
	pipes []int
}

func (h *gateHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *gateHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.sent.Add(1)
			<-h.gate
		}
		return next(ctx, cmd)
	}
}
func (h *gateHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		if cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval" { // not a connection's setup
			h.mu.Lock()
			h.pipes = append(h.pipes, len(cmds))
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// TestBatchingInlineThenShared: calls finding a free slot go out at once as
// plain commands on their callers' goroutines (no pipeline); calls arriving
// while every slot is busy queue and share one pipeline, sent as soon as a
// slot frees; every decision is exact.
func TestBatchingInlineThenShared(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(2))
	p := ratelimit.MustParsePolicy("5/h", ratelimit.Named("inline"))
	mustTake(t, s, p, 0, "warm") // loads the script before the gate shuts
	h := &gateHook{gate: make(chan struct{})}
	client.AddHook(h)

	const callers = 8
	results := make(chan bool, callers)
	take := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:1"}, Cost: 1})
		if err != nil {
			t.Error(err)
		}
		results <- d.Allowed
	}
	for i := 0; i < 2; i++ {
		go take()
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.sent.Load() < 2 { // both slots are on the wire, held at the gate
		if time.Now().After(deadline) {
			t.Fatal("the first two calls were not sent at once")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 2; i < callers; i++ {
		go take()
	}
	for {
		s.batch.mu.Lock()
		n := len(s.batch.queue)
		s.batch.mu.Unlock()
		if n == callers-2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", n, callers-2)
		}
		time.Sleep(time.Millisecond)
	}
	close(h.gate)
	admitted := 0
	for i := 0; i < callers; i++ {
		if <-results {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d of %d under 5/h", admitted, callers)
	}
	if got := h.sent.Load(); got != 2 {
		t.Fatalf("%d calls sent alone, want the 2 that found a free slot", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pipes) != 1 || h.pipes[0] != callers-2 {
		t.Fatalf("pipelines %v, want one of the %d queued calls", h.pipes, callers-2)
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if s.batch.busy != 0 || len(s.batch.queue) != 0 {
		t.Fatalf("after every call returned: %d slots busy, %d queued", s.batch.busy, len(s.batch.queue))
	}
}

// shaHook records the script hash of every EVALSHA.
type shaHook struct {
	mu   sync.Mutex
	shas []string
}

func (h *shaHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *shaHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.mu.Lock()
			h.shas = append(h.shas, fmt.Sprint(cmd.Args()[1]))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (h *shaHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *shaHook) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.shas) == 0 {
		return ""
	}
	return h.shas[len(h.shas)-1]
}

// TestBakedThenGeneric: the first policies a store sees are sent with the
// script carrying their numbers (one per policy), later ones with the
// generic script, which reads them from the call, and a refund or a reset
// of a baked policy uses its script too.
func TestBakedThenGeneric(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(0))
	h := &shaHook{}
	client.AddHook(h)
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("100/s, 1000/h", ratelimit.Named("baked"))
	d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"ip:1"}, Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	baked := h.last()
	if baked == generic.Hash() || baked != s.scripts.prepare(p, 0).script.Hash() {
		t.Fatalf("a first policy was sent script %s, want its baked script (generic %s)", baked, generic.Hash())
	}
	if err := s.Refund(ctx, d.Receipt); err != nil || h.last() != baked {
		t.Fatalf("refund: %v, script %s, want the policy's %s", err, h.last(), baked)
	}
	s.scripts.maxBaked = 0 // policies from now on are not baked
	unbaked := ratelimit.MustParsePolicy("7/s", ratelimit.Named("unbaked"))
	if _, err := s.Take(ctx, ratelimit.Request{Policy: unbaked, Keys: []string{"ip:1"}, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if got := h.last(); got != generic.Hash() {
		t.Fatalf("a policy past maxBaked was sent script %s, want the generic %s", got, generic.Hash())
	}
}
