package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/faultproxy"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
)

// TestRealResendChargedOnce: Redis runs a Take, then the connection breaks
// before its reply arrives; go-redis sends the script again (MaxRetries).
// The second run finds the call's resend ID among the key's last charges
// and charges nothing: the request counts once. Without resend IDs the
// same fault counts it twice, which is what the test would catch.
func TestRealResendChargedOnce(t *testing.T) {
	t.Parallel() // most of its time waits on the proxy's latency
	srv := redistest.StartServer(t)
	direct := srv.Client(t)
	ctx := context.Background()
	for _, withIDs := range []bool{true, false} {
		proxy := faultproxy.New(t, srv.Addr)
		client := goredis.NewClient(&goredis.Options{Addr: proxy.Addr(), MaxRetries: 3})
		t.Cleanup(func() { client.Close() })
		s, err := New(client, WithPrefix(map[bool]string{true: "ids:", false: "noids:"}[withIDs]))
		if err != nil {
			t.Fatal(err)
		}
		s.noResendIDs = !withIDs
		p := ratelimit.MustParsePolicy("5/h", ratelimit.Named("resend"))
		mustTake(t, s, p, 0, "user:r") // loads the script
		before := scriptCalls(commandStats(t, direct))
		proxy.SetLatency(300 * time.Millisecond)
		go func() {
			time.Sleep(450 * time.Millisecond) // Redis ran the call; its reply is still in the proxy
			proxy.Drop()
		}()
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := s.Take(tctx, ratelimit.Request{Policy: p, Keys: []string{"user:r"}, Cost: 1})
		cancel()
		proxy.SetLatency(0)
		if err != nil || !d.Allowed {
			t.Fatalf("ids %v: Take across the dropped reply: %+v, %v", withIDs, d, err)
		}
		runs := scriptCalls(commandStats(t, direct)) - before
		if proxy.Dropped() == 0 || runs != 2 {
			t.Fatalf("ids %v: %d connections dropped, the script ran %d times; want a drop and a resend (2 runs)", withIDs, proxy.Dropped(), runs)
		}
		peek, err := (&Store{client: direct, prefix: s.prefix, scripts: scripts{maxBaked: maxBaked}}).Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:r"}})
		if err != nil {
			t.Fatal(err)
		}
		want := int64(4)
		if !withIDs {
			want = 3 // counted twice: the fault this protects against
		}
		if peek.Remaining != want {
			t.Fatalf("ids %v: %d left after one request, want %d", withIDs, peek.Remaining, want)
		}
		t.Logf("resend IDs %v: one request across a dropped reply and its resend leaves %d of 5", withIDs, peek.Remaining)
	}
}

// TestRealResendIDCost measures what the resend IDs cost Redis: memory per
// key (the field of the last four IDs) and CPU per call (commandstats,
// with and without IDs, alternating rounds: 6 of 2,000 calls each, 2 of
// 250 without RATELIMIT_FULL=1). It logs the figures; it asserts only the
// memory bound, since timings here are noisy.
func TestRealResendIDCost(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("1000000/s, 10000000/m, 100000000/h", ratelimit.Named("cost"))
	with, _ := New(client, WithPrefix("wid:")) // prefixes of one length: MEMORY USAGE counts the key
	without, _ := New(client, WithPrefix("nid:"))
	without.noResendIDs = true
	usage := map[bool]int64{}
	for _, s := range []*Store{with, without} {
		mustTake(t, s, p, 1, "ip:203.0.113.9")
		u, err := client.MemoryUsage(ctx, redisKey(s.prefix, p.ID(), "ip:203.0.113.9"), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		usage[s == with] = u
	}
	var usec [2]float64
	var calls [2]int64
	rounds, perRound := testmode.Scale(6, 2), testmode.Scale(2000, 250)
	for round := 0; round < rounds; round++ {
		for i, s := range []*Store{with, without} {
			client.ConfigResetStat(ctx)
			for n := 0; n < perRound; n++ {
				mustTake(t, s, p, 1, "ip:203.0.113."+string(rune('0'+n%10)))
			}
			for _, st := range []cmdStat{commandStatsFull(t, client)["evalsha"], commandStatsFull(t, client)["fcall"]} {
				usec[i] += st.usec
				calls[i] += st.calls
			}
		}
	}
	perWith, perWithout := usec[0]/float64(calls[0]), usec[1]/float64(calls[1])
	t.Logf("resend IDs: %d bytes per key (%d with, %d without); Redis CPU %.2f µs per call with, %.2f without (%+.1f%%), 3-limit policy, %d calls each",
		usage[true]-usage[false], usage[true], usage[false], perWith, perWithout, 100*(perWith/perWithout-1), calls[0])
	if usage[true]-usage[false] > 64 {
		t.Fatalf("the resend IDs cost %d bytes per key, want at most 64", usage[true]-usage[false])
	}
}

type cmdStat struct {
	calls int64
	usec  float64
}

// commandStatsFull returns INFO commandstats: calls and total µs per command.
func commandStatsFull(t testing.TB, c *goredis.Client) map[string]cmdStat {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// TestResendCountsOnce replays go-redis's resends step by step: a call
// runs, and the same call (its resend ID now written as a resend) runs
// again. A request is charged at most once, whatever came between:
//   - a resend that finds its ID among the key's last lua.ResendIDs charges
//     is answered as the first run, uncharged;
//   - one pushed out by more charges than that fails (errResendLost),
//     uncharged, and the Limiter's fallback decides it;
//   - one whose first run was denied (nothing recorded) and whose key
//     pushed no ID out within the horizon is decided again;
//   - a pipeline of 10 calls on one key resent whole counts 10, not 20.
func TestResendCountsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type call struct {
		resendOf int  // -1: a new call; else the index of the call it resends
		allowed  bool // want
		lost     bool // want errResendLost
	}
	newCalls := func(n int) []call {
		out := make([]call, n)
		for i := range out {
			out[i].resendOf, out[i].allowed = -1, true
		}
		return out
	}
	cases := []struct {
		name    string
		rate    int64
		calls   []call
		charged int64
	}{
		{"resend next", 100, []call{{-1, true, false}, {0, true, false}}, 1},
		{"resend after 7 others", 100, append(newCalls(8), call{0, true, false}), 8},
		{"resend after 8 others", 100, append(newCalls(9), call{0, false, true}), 9},
		{"denied first run", 2, append(newCalls(2), call{-1, false, false}, call{2, false, false}), 2},
		{"pipeline of 10 resent", 100, func() []call {
			c := newCalls(10)
			for i := 0; i < 10; i++ {
				c = append(c, call{i, i >= 2, i < 2})
			}
			return c
		}(), 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, s := miniStore(t, WithBatching(0))
			p := ratelimit.MustParsePolicy(strconv.FormatInt(tc.rate, 10)+"/h", ratelimit.Named("resend"))
			ids := make([]*resendID, len(tc.calls))
			var next *resendID
			s.ridHook = func() *resendID { return next }
			for i, c := range tc.calls {
				if c.resendOf < 0 {
					ids[i] = &resendID{id: fmt.Sprintf("id%04d", i), horizon: time.Minute.Microseconds()}
				} else {
					ids[i] = ids[c.resendOf] // sent before: written as a resend
				}
				next = ids[i]
				d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1})
				if c.lost != errors.Is(err, errResendLost) || !c.lost && err != nil {
					t.Fatalf("step %d: error %v, want lost %v", i, err, c.lost)
				}
				if d.Allowed != c.allowed {
					t.Fatalf("step %d: allowed %v, want %v: %+v", i, d.Allowed, c.allowed, d)
				}
			}
			s.ridHook = nil
			if got := tc.rate - mustTake(t, s, p, 0, "k").Remaining; got != tc.charged {
				t.Fatalf("%d units charged, want %d", got, tc.charged)
			}
		})
	}
}

// TestRealResentPipelineCountsOnce: ten calls on one key share a pipeline
// (batching), Redis runs them, and the connection breaks before their
// replies arrive; go-redis sends the whole pipeline again. No request is
// charged twice: the key counts at most the 11 requests made, and every
// request answered as admitted was charged.
func TestRealResentPipelineCountsOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	direct := srv.Client(t)
	proxy := faultproxy.New(t, srv.Addr)
	client := goredis.NewClient(&goredis.Options{Addr: proxy.Addr(), MaxRetries: 3})
	t.Cleanup(func() { client.Close() })
	s, err := New(client, WithBatching(1))
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("100/h", ratelimit.Named("pipe"))
	ctx := context.Background()
	mustTake(t, s, p, 0, "k") // loads the script
	peek := &Store{client: direct, prefix: s.prefix, scripts: scripts{maxBaked: maxBaked}}
	charged := func() int64 { return 100 - mustTake(t, peek, p, 0, "k").Remaining }
	proxy.SetLatency(300 * time.Millisecond)
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 11; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			d, err := s.Take(tctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1})
			switch {
			case err != nil:
				failed.Add(1)
			case d.Allowed:
				admitted.Add(1)
			}
		}()
		if i == 0 {
			time.Sleep(50 * time.Millisecond) // the first call holds the one slot; the rest queue behind it
		}
	}
	// Drop the connections once Redis has run all eleven, while the
	// pipeline's replies are still in the proxy.
	deadline := time.Now().Add(15 * time.Second)
	for charged() < 11 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	proxy.Drop()
	proxy.SetLatency(0)
	wg.Wait()
	got := charged()
	t.Logf("11 requests, %d connections dropped: %d admitted, %d failed (resend lost, decided by the fallback), %d units charged",
		proxy.Dropped(), admitted.Load(), failed.Load(), got)
	if proxy.Dropped() == 0 {
		t.Fatal("no connection was dropped: the fault did not happen")
	}
	if got > 11 || got < admitted.Load() {
		t.Fatalf("%d units charged for 11 requests of which %d were admitted: a request was charged twice, or admitted uncharged", got, admitted.Load())
	}
}
