package redis

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// TestRealFunctionsLoadedOnce: on a server with functions, a policy's
// first call finds no function, goes by EVAL and loads the library beside
// it; the calls after it go by FCALL. After FUNCTION FLUSH a call goes by
// EVAL again and reloads it. A denial (the general path) then costs Redis
// a fraction of what the same call costs by EVALSHA, which makes every
// function of the script on each call.
func TestRealFunctionsLoadedOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	s, hook := countedStore(t, &goredis.Options{Addr: srv.Addr})
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("3/h", ratelimit.Named("fn"))
	loaded := func() bool {
		libs, err := srv.Client(t).FunctionList(ctx, goredis.FunctionListQuery{}).Result()
		return err == nil && len(libs) > 0
	}
	for step, want := range []struct {
		flush    bool
		names    map[string]int // the script calls the client sends
		admitted bool
	}{
		{names: map[string]int{"fcall": 1, "eval": 1}, admitted: true},
		{names: map[string]int{"fcall": 1}, admitted: true},
		{flush: true, names: map[string]int{"fcall": 1, "eval": 1}, admitted: true},
		{names: map[string]int{"fcall": 1}, admitted: false},
	} {
		if want.flush {
			if err := srv.Client(t).FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 200 && step > 0 && !loaded(); i++ {
			time.Sleep(10 * time.Millisecond) // the load sent beside the first call
		}
		hook.reset()
		d := mustTake(t, s, p, 1, "ip:1")
		hook.mu.Lock()
		names := map[string]int{}
		for n, c := range hook.names {
			if n == "fcall" || n == "eval" || n == "evalsha" {
				names[n] = c
			}
		}
		hook.mu.Unlock()
		if d.Allowed != want.admitted || len(names) != len(want.names) || names["fcall"] != want.names["fcall"] || names["eval"] != want.names["eval"] {
			t.Fatalf("step %d: admitted %v by %v, want %v by %v", step, d.Allowed, names, want.admitted, want.names)
		}
	}

	// What a denial costs Redis, by FCALL and by EVALSHA.
	admin := srv.Client(t)
	usec := map[string]float64{}
	for _, mode := range []int32{fnUnknown, fnOff} {
		s.scripts.fn.Store(mode)
		admin.ConfigResetStat(ctx)
		for i := 0; i < 500; i++ {
			if d := mustTake(t, s, p, 1, "ip:1"); d.Allowed {
				t.Fatalf("call %d admitted past 3/h", i)
			}
		}
		for name, st := range commandStatsFull(t, admin) {
			if name == "fcall" || name == "evalsha" {
				usec[name] = st.usec / float64(st.calls)
			}
		}
	}
	t.Logf("Redis µs per denied call: FCALL %.1f, EVALSHA %.1f", usec["fcall"], usec["evalsha"])
	if usec["fcall"] <= 0 || usec["evalsha"] <= 0 {
		t.Fatalf("calls by FCALL and EVALSHA: %v, want both", usec)
	}
}

// TestNoFunctionsKeepsToEvalsha: on a server without functions
// (miniredis, as Redis 6), the first call's FCALL is refused and the call
// goes by EVAL; every call after it goes by EVALSHA alone.
func TestNoFunctionsKeepsToEvalsha(t *testing.T) {
	_, client, s := miniStore(t, WithBatching(0))
	hook := &countHook{}
	client.AddHook(hook)
	hook.reset()
	p := ratelimit.MustParsePolicy("100/h")
	for i := range 5 {
		mustTake(t, s, p, 1, "ip:"+strconv.Itoa(i))
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.names["fcall"] != 1 || hook.names["eval"] != 1 || hook.names["evalsha"] != 4 {
		t.Fatalf("5 calls sent %v, want one refused FCALL, one EVAL, then EVALSHA", hook.names)
	}
}

// TestRealLibrariesBounded: a library is kept with the data until
// deleted, so a store loads at most maxLibraries of them (and the generic
// script's): the policies after those go by EVALSHA.
func TestRealLibrariesBounded(t *testing.T) {
	srv := redistest.StartServer(t)
	s, hook := countedStore(t, &goredis.Options{Addr: srv.Addr})
	ctx := context.Background()
	const policies = maxLibraries + 4
	pols := make([]*ratelimit.Policy, policies)
	for i := range pols {
		pols[i] = ratelimit.MustParsePolicy(strconv.Itoa(10+i) + "/h")
		mustTake(t, s, pols[i], 1, "ip:1")
	}
	_ = s.Reset(ctx, ratelimit.MustParsePolicy("10/h"), "ip:1") // the generic script
	libs := func() int {
		l, err := srv.Client(t).FunctionList(ctx, goredis.FunctionListQuery{}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	for i := 0; i < 200 && libs() < maxLibraries+1; i++ {
		time.Sleep(10 * time.Millisecond) // the loads sent beside the first calls
	}
	if n := libs(); n != maxLibraries+1 {
		t.Fatalf("%d policies and a reset loaded %d libraries, want %d", policies, n, maxLibraries+1)
	}
	hook.reset()
	for _, p := range pols {
		mustTake(t, s, p, 1, "ip:2")
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.names["fcall"] != maxLibraries || hook.names["evalsha"] != policies-maxLibraries {
		t.Fatalf("%d policies sent %v, want %d FCALL and %d EVALSHA", policies, hook.names, maxLibraries, policies-maxLibraries)
	}
}

// TestRealFunctionLoadRefused: an ACL that lets a user call FCALL but not
// FUNCTION LOAD keeps the store to EVALSHA once its first load is refused;
// every call is answered meanwhile (by EVAL).
func TestRealFunctionLoadRefused(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "lim", "on", ">pw", "~*", "+@all", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	s, hook := countedStore(t, &goredis.Options{Addr: srv.Addr, Username: "lim", Password: "pw"})
	p := ratelimit.MustParsePolicy("100/h")
	mustTake(t, s, p, 1, "ip:1")
	for i := 0; i < 200 && s.scripts.fn.Load() != fnOff; i++ {
		time.Sleep(10 * time.Millisecond) // the load sent beside the first call
	}
	if s.scripts.fn.Load() != fnOff {
		t.Fatal("a refused FUNCTION LOAD left the store on FCALL")
	}
	for i := range 3 {
		mustTake(t, s, p, 1, "ip:"+strconv.Itoa(i))
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.names["fcall"] != 1 || hook.names["eval"] != 1 || hook.names["evalsha"] != 3 {
		t.Fatalf("4 calls sent %v, want one FCALL (not found), one EVAL, then EVALSHA", hook.names)
	}
}

// countedStore returns a store (batching off, each call its own command)
// on a client to addr whose commands hook counts from now on.
func countedStore(t *testing.T, opt *goredis.Options) (*Store, *countHook) {
	t.Helper()
	client := goredis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	hook := &countHook{}
	client.AddHook(hook)
	hook.reset()
	s, err := New(client, WithBatching(0))
	if err != nil {
		t.Fatal(err)
	}
	return s, hook
}
