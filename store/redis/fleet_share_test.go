package redis

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// TestFleetShareDuringAnOutage: three instances (Handlers on Limiters of
// their own, each on a store of its own) share one real Redis and a 10/s
// limit; one client's requests go round-robin over them. Redis is killed
// and the client keeps sending for 2.5 s of real time: with
// WithFleetShare each instance's fallback admits its share (ceil(10/3) =
// 4), so the fleet admits at most 12 in any second; without it, each
// admits the whole limit (up to 30).
func TestFleetShareDuringAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a real Redis twice and sends for 5 s of real time; go test without -short runs it")
	}
	srv := redistest.StartServer(t)
	for i, c := range []struct {
		share       bool
		least, most int // admissions in the busiest second of the outage
	}{
		{share: true, least: 9, most: 12},
		{share: false, least: 25, most: 30},
	} {
		if i > 0 {
			srv.Restart(t)
		}
		var handlers []http.Handler
		var stores []*Store
		for range 3 {
			client := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true,
				DialerRetries: 1, DialerRetryTimeout: time.Millisecond, MaxRetries: -1})
			t.Cleanup(func() { client.Close() })
			opts := []Option{WithPrefix(fmt.Sprintf("share%d:", i))}
			if c.share {
				opts = append(opts, WithFleetShare())
			}
			s, err := New(client, opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			stores = append(stores, s)
			lim, err := ratelimit.New(s, ratelimit.MustParsePolicy("10/s", ratelimit.Named("api")), ratelimit.WithMaxDelay(0))
			if err != nil {
				t.Fatal(err)
			}
			handlers = append(handlers, lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		}
		if c.share {
			deadline := time.Now().Add(10 * time.Second)
			for _, s := range stores {
				for s.fleet.n.Load() != 3 {
					if time.Now().After(deadline) {
						t.Fatalf("step %d: a store counts %d instances, want 3", i, s.fleet.n.Load())
					}
					time.Sleep(10 * time.Millisecond) // the heartbeats run on their own
				}
			}
		}
		srv.Kill(t)
		// Each admission is timed before its call: the store decided it
		// within the call, so times closer than a second less the longest
		// call are of decisions within one second.
		var admitted []time.Time
		var longest time.Duration
		start := time.Now()
		for n := 0; time.Since(start) < 2500*time.Millisecond && n < 200_000; n++ {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "203.0.113.9:4000"
			w := httptest.NewRecorder()
			before := time.Now()
			handlers[n%3].ServeHTTP(w, r)
			longest = max(longest, time.Since(before))
			if w.Code == http.StatusOK {
				admitted = append(admitted, before)
			}
		}
		most := busiest(admitted, time.Second-longest)
		t.Logf("step %d (fleet share %v): %d admitted in 2.5 s of outage, at most %d in one second", i, c.share, len(admitted), most)
		if most > c.most || most < c.least {
			t.Errorf("step %d (fleet share %v): %d admitted in the busiest second, want %d to %d", i, c.share, most, c.least, c.most)
		}
	}
}

// busiest is the most of times within any window of length w.
func busiest(times []time.Time, w time.Duration) int {
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	most, lo := 0, 0
	for hi := range times {
		for times[hi].Sub(times[lo]) >= w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// TestFleetShareCounts: stores WithFleetShare on one Redis count each
// other, and the fallback of each admits the share of every limit among
// them, rounded up (a token bucket's burst too); a leased policy, whose
// grants spread the quota already, is not shared; one instance, or a
// store that never heard from Redis, admits the whole limit. On
// miniredis; the fallback counts on a controlled clock.
func TestFleetShareCounts(t *testing.T) {
	mr := miniredis.RunT(t)
	clk := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clk }
	var stores []*Store
	for range 3 {
		c := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { c.Close() })
		s, err := New(c, WithFleetShare(), WithClock(now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range stores {
		for s.fleet.n.Load() < 1 {
			if time.Now().After(deadline) {
				t.Fatal("no heartbeat answered")
			}
			time.Sleep(5 * time.Millisecond) // the first beat runs on its own goroutine
		}
	}
	stores[0].fleet.beat() // the others wrote theirs: three members now
	if n := stores[0].fleet.instances(); n != 3 {
		t.Fatalf("the store counts %d instances, want 3", n)
	}
	fb := stores[0].Fallback()
	for i, c := range []struct {
		policy *ratelimit.Policy
		admits int
	}{
		{ratelimit.MustParsePolicy("10/m, 100/h", ratelimit.Named("a")), 4},
		{ratelimit.MustParsePolicy("7/m", ratelimit.Named("b")), 3},
		{ratelimit.MustParsePolicy("1/m", ratelimit.Named("c")), 1},
		{ratelimit.MustParsePolicy("6/h", ratelimit.Named("d"), ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(9)), 3},
		{ratelimit.MustParsePolicy("6/m", ratelimit.Named("e"), ratelimit.WithLease(2, time.Second)), 6},
	} {
		req := ratelimit.Request{Policy: c.policy, Keys: []string{"ip:203.0.113.9"}, Cost: 1}
		got := 0
		for range 20 {
			var d ratelimit.Decision
			var err error
			if chunk, _ := c.policy.Lease(); chunk > 0 {
				d, err = fb.(storekit.Leaser).Lease(context.Background(), req, time.Second)
			} else {
				d, err = fb.Take(context.Background(), req)
			}
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if d.Allowed {
				got++
			}
		}
		if got != c.admits {
			t.Errorf("step %d (%s): the fallback admitted %d of 20 among 3 instances, want %d", i, c.policy, got, c.admits)
		}
	}
	lone, err := New(goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}), WithFleetShare(), WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	req := ratelimit.Request{Policy: ratelimit.MustParsePolicy("5/m", ratelimit.Named("f")), Keys: []string{"ip:203.0.113.9"}, Cost: 1}
	got := 0
	for range 10 {
		if d, err := lone.Fallback().Take(context.Background(), req); err == nil && d.Allowed {
			got++
		}
	}
	if got != 5 {
		t.Errorf("a store that never heard from Redis: its fallback admitted %d of 5/m, want the whole limit", got)
	}
}
