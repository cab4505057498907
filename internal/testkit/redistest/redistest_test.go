package redistest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestServerReal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := StartServer(t)
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want a 127.0.0.1 address", s.Addr)
	}
	c := s.Client(t)
	if err := c.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "greeting").Result(); err != nil || got != "hello" {
		t.Fatalf("GET = %q, %v; want hello", got, err)
	}
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}
	if save, err := c.ConfigGet(ctx, "save").Result(); err != nil || save["save"] != "" {
		t.Fatalf("CONFIG GET save = %v, %v; want empty (no snapshots)", save, err)
	}

	s.Kill(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	s.Kill(t) // killing a dead server is a no-op

	addr := s.Addr
	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr)
	}
	if err := pingEventually(ctx, c); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := c.Get(ctx, "greeting").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil (empty data)", err)
	}
	if exists, err := c.ScriptExists(ctx, sha).Result(); err != nil || exists[0] {
		t.Fatalf("SCRIPT EXISTS after Restart = %v, %v; want [false] (empty script cache)", exists, err)
	}

	s.Restart(t) // restarting a running server kills it first
	if err := pingEventually(ctx, c); err != nil {
		t.Fatalf("PING after second Restart: %v", err)
	}
}

func TestServerRealExtraArgs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := StartServer(t, "--maxmemory", "12345678")
	got, err := s.Client(t).ConfigGet(ctx, "maxmemory").Result()
	if err != nil || got["maxmemory"] != "12345678" {
		t.Fatalf("CONFIG GET maxmemory = %v, %v; want 12345678", got, err)
	}
}

func TestServerRealParallel(t *testing.T) {
	serverBinary(t) // skip (or fail) here rather than in every subtest
	// The servers alive at one time: a port is free again once its server
	// is gone, so only servers that overlap must differ.
	var mu sync.Mutex
	alive := map[string]bool{}
	started := 0
	t.Run("group", func(t *testing.T) {
		for i := 0; i < 4; i++ {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				s := StartServer(t)
				if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
					t.Fatalf("PING: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if alive[s.Addr] {
					t.Errorf("two servers alive at once on %s", s.Addr)
				}
				alive[s.Addr] = true
				started++
				t.Cleanup(func() { // before the server's own cleanup stops it
					mu.Lock()
					defer mu.Unlock()
					delete(alive, s.Addr)
				})
			})
		}
	})
	if started != 4 {
		t.Errorf("%d servers started, want 4", started)
	}
}

// pingEventually lets a client whose pooled connections died with the old
// process reconnect.
func pingEventually(ctx context.Context, c *redis.Client) error {
	var err error
	for i := 0; i < 5; i++ {
		if err = c.Ping(ctx).Err(); err == nil {
			return nil
		}
	}
	return err
}

// The cluster and Sentinel tests call t.Parallel: they spend most of
// their time waiting (a cluster serves only about 2s after its masters
// start; a failover waits for the sentinels to agree), time the others use.

func TestClusterReal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const masters = 3
	cl := StartCluster(t, masters)
	if len(cl.Addrs) != masters {
		t.Fatalf("len(Addrs) = %d, want %d", len(cl.Addrs), masters)
	}
	cc := cl.Client(t)

	// One key per master, found by NodeForKey.
	keys := make([]string, masters)
	for n := 0; keys[0] == "" || keys[1] == "" || keys[2] == ""; n++ {
		k := fmt.Sprintf("key:%d", n)
		if i := cl.NodeForKey(k); keys[i] == "" {
			keys[i] = k
		}
	}
	for i, k := range keys {
		if err := cc.Set(ctx, k, fmt.Sprint("value-", i), 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for i, k := range keys {
		if got, err := cc.Get(ctx, k).Result(); err != nil || got != fmt.Sprint("value-", i) {
			t.Fatalf("GET %s = %q, %v; want value-%d", k, got, err, i)
		}
	}

	// Each key really lives on the master NodeForKey names: that master
	// answers it directly, the others redirect.
	direct := make([]*redis.Client, masters)
	for i, a := range cl.Addrs {
		direct[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		defer direct[i].Close()
	}
	for i, k := range keys {
		for j, d := range direct {
			got, err := d.Get(ctx, k).Result()
			if j == i {
				if err != nil || got != fmt.Sprint("value-", i) {
					t.Errorf("GET %s on master %d (owner) = %q, %v", k, j, got, err)
				}
			} else if err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
				t.Errorf("GET %s on master %d (not owner): err = %v, want MOVED", k, j, err)
			}
		}
	}

	// The local slot computation agrees with the server, hash tags included.
	probe := []string{"", "a", "123456789", "user:42", "{user:42}.a", "{user:42}.b",
		"foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{", "}", "{}", "x{y", "ключ", "\x00\xff"}
	for n := 0; n < 200; n++ {
		probe = append(probe, fmt.Sprintf("rl:{ip:203.0.113.%d}:policy", n), fmt.Sprint("k", n*7919))
	}
	for _, k := range probe {
		want, err := direct[0].ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		if got := keySlot(k); got != int(want) {
			t.Errorf("keySlot(%q) = %d, server says %d", k, got, want)
		}
		owner := cl.NodeForKey(k)
		if r := cl.ranges[owner]; int(want) < r.lo || int(want) > r.hi {
			t.Errorf("NodeForKey(%q) = %d, which does not own slot %d", k, owner, want)
		}
	}
	if cl.NodeForKey("{user:42}.a") != cl.NodeForKey("{user:42}.b") {
		t.Error("keys with the same hash tag map to different masters")
	}

	// Kill one master: its keys fail, the others keep working.
	const victim = 1
	cl.Kill(t, victim)
	if err := direct[victim].Ping(ctx).Err(); err == nil {
		t.Fatalf("master %d still answers after Kill", victim)
	}
	for i, k := range keys {
		err := cc.Get(ctx, k).Err()
		if i == victim {
			if err == nil {
				t.Errorf("GET %s on the killed master succeeded", k)
			}
		} else if err != nil {
			t.Errorf("GET %s on live master %d after killing %d: %v", k, i, victim, err)
		}
	}
	cl.Kill(t, victim) // no-op

	// Once the survivors have marked the victim as failed, they still serve
	// their own slots (cluster-require-full-coverage no, majority alive).
	deadline := time.Now().Add(20 * time.Second)
	for {
		nodes, err := direct[0].ClusterNodes(ctx).Result()
		if err == nil && victimFailed(nodes, cl.Addrs[victim]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("master %d not marked as failed in time; CLUSTER NODES (err %v):\n%s", victim, err, nodes)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, k := range keys {
		if i == victim {
			continue
		}
		if err := cc.Set(ctx, k, "after-failure", 0).Err(); err != nil {
			t.Errorf("SET %s on live master %d after %d failed: %v", k, i, victim, err)
		}
		info, err := direct[i].ClusterInfo(ctx).Result()
		if err != nil || !hasInfoLine(info, "cluster_state:ok") {
			t.Errorf("master %d: CLUSTER INFO after master %d failed (err %v):\n%s", i, victim, err, info)
		}
	}
}

// victimFailed reports whether CLUSTER NODES output flags the node at addr
// as failed (fail, not just the local suspicion fail?).
func victimFailed(nodes, addr string) bool {
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[1], addr+"@") {
			continue
		}
		for _, flag := range strings.Split(f[2], ",") {
			if flag == "fail" {
				return true
			}
		}
	}
	return false
}

func TestClusterRealOneMaster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := StartCluster(t, 1)
	cc := cl.Client(t)
	for _, k := range []string{"a", "b", "{t}x"} {
		if cl.NodeForKey(k) != 0 {
			t.Fatalf("NodeForKey(%q) = %d, want 0", k, cl.NodeForKey(k))
		}
		if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
}

func TestKeySlotKnownValue(t *testing.T) {
	// CRC-16/XMODEM check value: crc16("123456789") = 0x31C3.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	cases := []struct {
		a, b string
		same bool
	}{
		{"{user:42}.a", "{user:42}.b", true},
		{"x{tag}y", "tag", true},
		{"{}a", "{}b", false}, // empty tag: whole key is hashed
		{"foo{}{bar}", "bar", false},
		{"foo{{bar}}", "{bar", true}, // tag is from the first '{' to the first '}'
	}
	for _, c := range cases {
		if got := keySlot(c.a) == keySlot(c.b); got != c.same {
			t.Errorf("keySlot(%q)==keySlot(%q) is %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal and stops the
// goroutine the way the real ones do.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runRecorded(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestMissingServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // an empty directory: no redis-server

	t.Setenv(RequireEnv, "")
	if Require() {
		t.Fatal("Require() with the variable empty")
	}
	r := runRecorded(t, func(tb testing.TB) { StartServer(tb) })
	if r.skipped != skipMessage || r.failed != "" {
		t.Errorf("StartServer without redis-server, not required: skipped %q, failed %q", r.skipped, r.failed)
	}
	r = runRecorded(t, func(tb testing.TB) { StartCluster(tb, 3) })
	if r.skipped != skipMessage || r.failed != "" {
		t.Errorf("StartCluster without redis-server, not required: skipped %q, failed %q", r.skipped, r.failed)
	}

	t.Setenv(RequireEnv, "1")
	if !Require() {
		t.Fatal("Require() = false with the variable set to 1")
	}
	for name, start := range map[string]func(testing.TB){
		"StartServer":  func(tb testing.TB) { StartServer(tb) },
		"StartCluster": func(tb testing.TB) { StartCluster(tb, 3) },
	} {
		r = runRecorded(t, start)
		if r.skipped != "" || !strings.Contains(r.failed, "redis-server not found in PATH") ||
			!strings.Contains(r.failed, RequireEnv+"=1") {
			t.Errorf("%s without redis-server, required: skipped %q, failed %q", name, r.skipped, r.failed)
		}
	}
}
