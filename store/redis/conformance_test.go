package redis

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store/storetest"
)

// replayClient is a client that never resends a command: on a loaded
// machine a slow reply would otherwise make go-redis send the script
// again, which a resend ID then answers as "charged earlier", without a
// receipt, and a replay would see a difference that is not the stores'.
func replayClient(t *testing.T, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConformanceMiniredis runs the conformance suite on the Redis store
// on miniredis, whose TIME follows the suite's clock (SetTime) and whose
// keys expire on it (FastForward): the scripts read Redis TIME, as in
// production, and keys expire as the policy's TTL says. Of every four
// stores (vary), one carries the policy in its script, one in each call,
// one sends even the common call (a plain take, no ID) down the script's
// general path, and one sends it as a batch's run of one, so that every
// path answers as the reference.
func TestConformanceMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	client := replayClient(t, mr.Addr())
	var last time.Time
	n := 0
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) ratelimit.Store {
			s, err := New(client, WithPrefix(storetest.Namespace()))
			if err != nil {
				t.Fatal(err)
			}
			vary(s, &n)
			return s
		},
		SetTime: func(at time.Time) {
			if !last.IsZero() && at.After(last) {
				mr.FastForward(at.Sub(last))
			}
			last = at
			mr.SetTime(at)
		},
		Marks: true,
	})
}

// TestRealConformance runs the conformance suite on a real redis-server,
// the scripts reading the suite's clock (WithClock: a real TIME cannot be
// set).
func TestRealConformance(t *testing.T) {
	client := replayClient(t, redistest.StartServer(t).Addr)
	n := 0
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) ratelimit.Store {
			s, err := New(client, WithClock(now), WithPrefix(storetest.Namespace()))
			if err != nil {
				t.Fatal(err)
			}
			vary(s, &n)
			return s
		},
		Marks: true,
	})
}

// TestClusterConformance runs the conformance suite on a local 3-master
// Redis Cluster, one key per request: a request of one key runs the same
// script as on a single Redis, on the master of its key, and must decide
// exactly as the memory store. (Requests of keys on several masters are
// charged per master and refunded when denied, by design not step for
// step the memory store's: the Cluster tests pin them.)
func TestClusterConformance(t *testing.T) {
	t.Parallel()
	o := redistest.StartCluster(t, 3).Client(t).Options()
	o.MaxRetries, o.ReadTimeout, o.WriteTimeout = -1, time.Minute, time.Minute
	c := goredis.NewClusterClient(o)
	t.Cleanup(func() { c.Close() })
	n := 0
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) ratelimit.Store {
			s, err := New(c, WithClock(now), WithPrefix(storetest.Namespace()))
			if err != nil {
				t.Fatal(err)
			}
			vary(s, &n)
			return s
		},
		Marks:  true,
		OneKey: true,
	})
}

// vary makes the n-th store of a harness (counting on) carry its policy in
// its script, in each call, take every call down the general path, or send
// every common call as a batch's run of one.
func vary(s *Store, n *int) {
	switch *n++; *n % 4 {
	case 1:
		s.scripts.maxBaked = 0
	case 2:
		s.general = true
	case 3:
		s.runs = true
	}
}

// TestSentinelConformance runs the conformance suite on a Redis behind
// Sentinel (a master, a replica and three sentinels on loopback), through
// go-redis's failover client, the scripts reading the suite's clock.
func TestSentinelConformance(t *testing.T) {
	t.Parallel()
	o := redistest.StartSentinel(t).FailoverOptions()
	o.MaxRetries, o.ReadTimeout, o.WriteTimeout = -1, time.Minute, time.Minute
	c := goredis.NewFailoverClient(o)
	t.Cleanup(func() { c.Close() })
	n := 0
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) ratelimit.Store {
			s, err := New(c, WithClock(now), WithPrefix(storetest.Namespace()))
			if err != nil {
				t.Fatal(err)
			}
			vary(s, &n)
			return s
		},
		Marks: true,
	})
}
