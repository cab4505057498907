package redis

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// TestRealRoundTrips counts the round trips of N calls of a 3-limit policy
// with 2 identities: the client sends exactly N commands, one at a time
// (a go-redis hook sees every command and pipeline), and INFO commandstats
// on the server shows N script calls (FCALL, or EVALSHA where the server
// has no functions) and, besides them, only the commands the
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
	// The library goes beside the first call, on a goroutine of its own: its
	// FUNCTION LOAD must land before the counts start.
	for i := 0; i < 500; i++ {
		libs, err := admin.FunctionList(ctx, goredis.FunctionListQuery{}).Result()
		if err != nil || len(libs) > 0 { // (an error: a server without functions, which loads nothing)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	if hook.cmds != n || hook.pipelines != 0 || hook.names["evalsha"]+hook.names["fcall"] != n {
		t.Fatalf("client sent %d commands (%v) and %d pipelines for %d Takes, want %d script calls", hook.cmds, hook.names, hook.pipelines, n, n)
	}
	stats := commandStats(t, admin)
	delete(stats, "info") // our own INFO call
	delete(stats, "config|resetstat")
	if scriptCalls(stats) != n {
		t.Fatalf("server saw %v for %d Takes, want %d script calls", stats, n, n)
	}
	for name := range stats {
		if !map[string]bool{"fcall": true, "evalsha": true, "time": true, "hmget": true, "hset": true, "pexpire": true}[name] {
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

// scriptCalls is how many calls of the store's script stats count: FCALL,
// or EVALSHA and EVAL where the server has no functions.
func scriptCalls(stats map[string]int64) int64 {
	return stats["fcall"] + stats["evalsha"] + stats["eval"]
}

func commandStats(t *testing.T, c *goredis.Client) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for name, st := range commandStatsFull(t, c) {
		out[name] = st.calls
	}
	return out
}
