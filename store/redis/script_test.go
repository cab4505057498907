package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

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

// scriptSHA picks, of a script call, the script hash of an EVALSHA or an
// EVAL (the hash of its text), or the function of an FCALL (callHook).
func scriptSHA(cmd goredis.Cmder) string {
	switch cmd.Name() {
	case "evalsha", "fcall":
		return fmt.Sprint(cmd.Args()[1])
	case "eval":
		sum := sha1.Sum([]byte(fmt.Sprint(cmd.Args()[1])))
		return hex.EncodeToString(sum[:])
	}
	return ""
}

// TestBakedThenGeneric: the first policies a store sees are sent with the
// script carrying their numbers (one per policy), later ones with the
// generic script, which reads them from the call, and a refund or a reset
// of a baked policy uses its script too.
func TestBakedThenGeneric(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(0))
	h := &callHook{pick: scriptSHA}
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
