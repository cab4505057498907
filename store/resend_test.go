package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/faultproxy"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
)

// TestRealResendChargedOnce: Redis runs a Take, then the connection breaks
// before its reply arrives; go-redis sends the script again (MaxRetries).
// The second run finds the call's resend ID among the key's last charges
// and charges nothing: the request counts once. Without resend IDs the
// same fault counts it twice, which is what the test would catch.
func TestRealResendChargedOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	direct := srv.Client(t)
	ctx := context.Background()
	for _, withIDs := range []bool{true, false} {
		proxy := faultproxy.New(t, srv.Addr)
		client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: 3})
		t.Cleanup(func() { client.Close() })
		s, err := NewRedis(client, WithPrefix(map[bool]string{true: "ids:", false: "noids:"}[withIDs]))
		if err != nil {
			t.Fatal(err)
		}
		s.noResendIDs = !withIDs
		p := ratelimit.MustParsePolicy("5/h", ratelimit.Named("resend"))
		mustTake(t, s, p, 0, "user:r") // loads the script
		before := commandStats(t, direct)["evalsha"]
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
		runs := commandStats(t, direct)["evalsha"] - before
		if proxy.Dropped() == 0 || runs != 2 {
			t.Fatalf("ids %v: %d connections dropped, the script ran %d times; want a drop and a resend (2 runs)", withIDs, proxy.Dropped(), runs)
		}
		peek, err := (&Redis{client: direct, prefix: s.prefix, maxBaked: maxBaked}).Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"user:r"}})
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

// TestRefundRaces: 64 goroutines mix charges and refunds (of their own
// charges, and of others') on one key; what remains charged, at the times
// the stores recorded, must keep every guarantee (the brute-force checker
// over every window), for every algorithm, on the memory store and Redis.
func TestRefundRaces(t *testing.T) {
	stores := map[string]func(*testing.T) ratelimit.Store{
		"memory": func(*testing.T) ratelimit.Store { return NewMemory() },
	}
	if realRedis() {
		srv := redistest.StartServer(t)
		stores["real"] = func(t *testing.T) ratelimit.Store {
			s, err := NewRedis(redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64}), WithPrefix("race:"+t.Name()+":"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	policies := map[ratelimit.Algorithm]string{
		ratelimit.SlidingWindow: "20/s, 200/m", ratelimit.FixedWindow: "20/s", ratelimit.TokenBucket: "20/s",
		ratelimit.SlidingLog: "20/s", ratelimit.SlidingWindowApprox: "20/s",
	}
	for name, mk := range stores {
		for _, alg := range algorithms {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				s := mk(t)
				p := ratelimit.MustParsePolicy(policies[alg], ratelimit.WithAlgorithm(alg), ratelimit.Named("race"+alg.String()))
				ctx := context.Background()
				var mu sync.Mutex
				var charged, all, refundedMarks []ratelimit.Receipt
				var ops atomic.Int64
				deadline := time.Now().Add(1500 * time.Millisecond)
				var wg sync.WaitGroup
				for g := 0; g < 64; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						for i := 0; time.Now().Before(deadline) && i < 200; i++ {
							ops.Add(1)
							if i%3 == 2 {
								mu.Lock()
								var r ratelimit.Receipt
								if n := len(charged); n > 0 {
									j := (g*7 + i) % n
									r = charged[j]
									charged = slices.Delete(charged, j, j+1)
								}
								mu.Unlock()
								if !r.IsZero() {
									if err := s.(ratelimit.Refunder).Refund(ctx, r); err != nil {
										t.Error(err)
									}
									mu.Lock()
									refundedMarks = append(refundedMarks, r)
									mu.Unlock()
								}
								continue
							}
							d, err := s.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"k"}, Cost: 1})
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								mu.Lock()
								charged = append(charged, d.Receipt)
								all = append(all, d.Receipt)
								mu.Unlock()
							}
						}
					}(g)
				}
				wg.Wait()
				// Events: every charge not refunded, at the time its store recorded.
				gone := map[ratelimit.Receipt]bool{}
				for _, r := range refundedMarks {
					gone[r] = true
				}
				var ev []event
				for _, r := range all {
					if !gone[r] {
						ev = append(ev, event{r.Marks()[0] - t0.UnixMicro(), 1})
					}
				}
				slices.SortFunc(ev, func(a, b event) int { return int(a.at - b.at) })
				t.Logf("%d operations: %d charged, %d refunded", ops.Load(), len(all), len(refundedMarks))
				if len(refundedMarks) == 0 || len(all) == 0 {
					t.Fatal("no refunds or no charges: the race did not happen")
				}
				checkAdmissions(t, p, ev, 0, len(ev))
			})
		}
	}
}

// TestRealResendIDCost measures what the resend IDs cost Redis: memory per
// key (the field of the last four IDs) and CPU per call (commandstats,
// with and without IDs, alternating rounds). It logs the figures; it
// asserts only the memory bound, since timings here are noisy.
func TestRealResendIDCost(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("1000000/s, 10000000/m, 100000000/h", ratelimit.Named("cost"))
	with, _ := NewRedis(client, WithPrefix("wid:")) // prefixes of one length: MEMORY USAGE counts the key
	without, _ := NewRedis(client, WithPrefix("nid:"))
	without.noResendIDs = true
	usage := map[bool]int64{}
	for _, s := range []*Redis{with, without} {
		mustTake(t, s, p, 1, "ip:203.0.113.9")
		u, err := client.MemoryUsage(ctx, redisKey(s.prefix, p.ID(), "ip:203.0.113.9"), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		usage[s == with] = u
	}
	var usec [2]float64
	var calls [2]int64
	for round := 0; round < 6; round++ {
		for i, s := range []*Redis{with, without} {
			client.ConfigResetStat(ctx)
			for n := 0; n < 2000; n++ {
				mustTake(t, s, p, 1, "ip:203.0.113."+string(rune('0'+n%10)))
			}
			st := commandStatsFull(t, client)["evalsha"]
			usec[i] += st.usec
			calls[i] += st.calls
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
func commandStatsFull(t *testing.T, c *redis.Client) map[string]cmdStat {
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
