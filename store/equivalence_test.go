package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
)

var algorithms = []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow, ratelimit.TokenBucket,
	ratelimit.SlidingLog, ratelimit.SlidingWindowApprox}

// t0 is the first instant of every trace: a realistic epoch time, not
// aligned to any window, so traces cross window edges.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// clock is a controlled clock shared by a trace's stores.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// Operations a trace step may run.
const (
	opTake    = iota // Take (cost 0 peeks)
	opUpTo           // TakeUpTo
	opReserve        // Reserve
	opRefund         // Refund an earlier step's receipt
	opReset          // Reset
)

// step is one request of a trace.
type step struct {
	at       time.Duration // since t0
	keys     []string
	cost     int64
	op       int
	maxDelay time.Duration // opReserve
	ref      int           // opRefund: the step whose receipt is refunded
	id       string        // Request.ID
}

// randomPolicy draws a small policy: rates low enough that traces hit the
// limits often (and, for the sliding window, some above ExactRateMax, so
// both of its counters run), periods from sub-second to an hour, random
// precision and burst, and sometimes a penalty.
func randomPolicy(rng *rand.Rand, alg ratelimit.Algorithm) *ratelimit.Policy {
	periods := []time.Duration{250 * time.Millisecond, time.Second, 2 * time.Second, 10 * time.Second, time.Minute, time.Hour}
	rng.Shuffle(len(periods), func(i, j int) { periods[i], periods[j] = periods[j], periods[i] })
	n := 1 + rng.IntN(3)
	limits := make([]ratelimit.Limit, n)
	for i := range limits {
		l := ratelimit.Limit{Rate: int64(1 + rng.IntN(8)), Period: periods[i]}
		switch alg {
		case ratelimit.SlidingWindow:
			if rng.IntN(3) == 0 {
				l.Rate = ratelimit.ExactRateMax + 1 + int64(rng.IntN(12)) // sub-buckets
			}
			l.Precision = []int{0, 0, 0, 1, 2, 5, 10}[rng.IntN(7)]
		case ratelimit.SlidingLog:
			l.Rate = int64(1 + rng.IntN(12))
			if rng.IntN(4) == 0 {
				l.Rate = 40 + int64(rng.IntN(30)) // a log of several chunk fields
			}
		case ratelimit.TokenBucket:
			l.Burst = int64(rng.IntN(6)) // 0 = Rate
		}
		limits[i] = l
	}
	p, err := ratelimit.NewPolicy("p"+strconv.Itoa(rng.IntN(3)), alg, limits...)
	if err != nil {
		panic(err)
	}
	if rng.IntN(5) == 0 {
		if p, err = p.WithBlockFor((periods[rng.IntN(len(periods))] / time.Duration(1+rng.IntN(4))).Truncate(time.Microsecond)); err != nil {
			panic(err)
		}
	}
	return p
}

// randomTrace draws steps whose clock advances by amounts around the
// policy's periods and sub-buckets: zero, a microsecond, a bucket edge, a
// whole period, or random; with every operation mixed in.
func randomTrace(rng *rand.Rand, p *ratelimit.Policy, steps int) []step {
	periodUS, widthUS, _, _ := p.Compiled()
	keys := []string{"ip:192.0.2.1", "user:{42}", "key:a\nb"}
	var at time.Duration
	out := make([]step, steps)
	for i := range out {
		i2 := rng.IntN(len(periodUS))
		switch rng.IntN(6) {
		case 0: // same instant
		case 1:
			at += time.Microsecond
		case 2:
			at += time.Duration(widthUS[i2]) * time.Microsecond
		case 3:
			at += time.Duration(periodUS[i2]) * time.Microsecond
		default:
			at += time.Duration(rng.Int64N(periodUS[i2]/2+1)) * time.Microsecond
		}
		perm := rng.Perm(len(keys))[:1+rng.IntN(len(keys))]
		ks := make([]string, len(perm))
		for j, k := range perm {
			ks[j] = keys[k]
		}
		s := step{at: at, keys: ks, cost: int64(rng.IntN(5))} // 0 peeks
		switch r := rng.IntN(20); {
		case r < 2:
			s.op, s.cost = opUpTo, 1+int64(rng.IntN(6))
		case r < 5:
			s.op, s.cost = opReserve, 1+int64(rng.IntN(3))
			s.maxDelay = time.Duration(rng.Int64N(periodUS[i2]+1)) * time.Microsecond
		case r < 7 && i > 0:
			s.op, s.ref = opRefund, rng.IntN(i)
		case r < 8:
			s.op = opReset
		}
		if rng.IntN(4) == 0 {
			s.id = []string{"req-a", "req-b"}[rng.IntN(2)]
		}
		out[i] = s
	}
	return out
}

// traceCount is how many random traces each equivalence and guarantee
// test replays per algorithm: 1,000 by default (250 under the race
// detector, which slows miniredis's Lua tenfold; the plain run, which CI
// makes too, replays the full 1,000), RATELIMIT_TRACES to change it.
func traceCount(t *testing.T) int {
	if s := os.Getenv("RATELIMIT_TRACES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("RATELIMIT_TRACES=%q: %v", s, err)
		}
		return n
	}
	if raceDetector {
		return 250
	}
	return 1000
}

// TestEquivalenceMiniredis replays random traces against the memory store
// and the Redis store on miniredis, whose TIME follows SetTime (and whose
// key TTLs follow FastForward, so keys expire on the trace's clock), so
// the script reads the same clock as the memory store. Every decision must
// be identical, field by field.
func TestEquivalenceMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	client := replayClient(t, mr.Addr())
	var last time.Time
	equivalence(t, 7, client, false, false, func(at time.Time) {
		if !last.IsZero() && at.After(last) {
			mr.FastForward(at.Sub(last))
		}
		last = at
		mr.SetTime(at)
	})
}

// TestEquivalenceReal replays the same kind of traces against a real
// redis-server. Its TIME cannot be set, so the store passes the trace's
// clock to the script (the test-only override of TIME).
func TestEquivalenceReal(t *testing.T) {
	equivalence(t, 9, replayClient(t, redistest.StartServer(t).Addr), true, false, func(time.Time) {})
}

// TestEquivalenceCluster replays traces of one key per request on a local
// 3-master Redis Cluster: a request of one key runs the same script as on
// a single Redis (the common path included), on the master of its key, and
// must decide exactly as the memory store. (Requests of keys on several
// masters are charged per master and refunded when denied, by design not
// step for step the memory store's: the Cluster tests pin them.)
func TestEquivalenceCluster(t *testing.T) {
	o := redistest.StartCluster(t, 3).Client(t).Options()
	o.MaxRetries, o.ReadTimeout, o.WriteTimeout = -1, time.Minute, time.Minute
	c := redis.NewClusterClient(o)
	t.Cleanup(func() { c.Close() })
	equivalence(t, 13, c, true, true, func(time.Time) {})
}

// replayClient is a client that never resends a command: on a loaded
// machine a slow reply would otherwise make go-redis send the script again,
// which the resend ID then answers as "charged earlier", without a receipt,
// and the replay would see a difference that is not the stores'.
func replayClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return c
}

// equivalence replays traceCount random traces per algorithm through a
// Redis store on client and through the memory store, half of them with
// the policy baked into the script and half with it in ARGV. With
// overrideTime the store sends the trace's clock to the script; otherwise
// setTime must make Redis TIME follow it. With oneKey every request
// carries only the first of the keys the trace gave it.
func equivalence(t *testing.T, seed uint64, client redis.UniversalClient, overrideTime, oneKey bool, setTime func(time.Time)) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(alg)+seed*14, seed))
			for n := range traceCount(t) {
				p := randomPolicy(rng, alg)
				trace := randomTrace(rng, p, 16)
				if oneKey {
					for i := range trace {
						trace[i].keys = trace[i].keys[:1]
					}
				}
				var clk clock
				opts := []RedisOption{WithPrefix(fmt.Sprintf("eq%d:", n))}
				if overrideTime {
					opts = append(opts, withClock(clk.Now))
				}
				rs, err := NewRedis(client, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if n%2 == 1 {
					rs.maxBaked = 0 // odd traces: the script reading ARGV
				}
				replay(t, n, p, trace, rs, &clk, setTime)
				if baked := rs.prepared(p).tail == nil; baked != (n%2 == 0) {
					t.Fatalf("trace %d: baked script %v, want %v", n, baked, n%2 == 0)
				}
			}
		})
	}
}

// apply runs one step against s, refunding from receipts (the store's own
// receipts of earlier steps).
func apply(ctx context.Context, s ratelimit.Store, p *ratelimit.Policy, st step, receipts []ratelimit.Receipt) (ratelimit.Decision, error) {
	req := ratelimit.Request{Policy: p, Keys: st.keys, Cost: st.cost, ID: st.id}
	switch st.op {
	case opUpTo:
		return s.(ratelimit.Granter).TakeUpTo(ctx, req)
	case opReserve:
		return s.(ratelimit.Reserver).Reserve(ctx, req, st.maxDelay)
	case opRefund:
		return ratelimit.Decision{}, s.(ratelimit.Refunder).Refund(ctx, receipts[st.ref])
	case opReset:
		return ratelimit.Decision{}, s.(ratelimit.Resetter).Reset(ctx, p, st.keys...)
	}
	return s.Take(ctx, req)
}

// replay runs trace n against rs and a fresh memory store on clk (setTime
// moves any other clock, such as miniredis's), requiring identical
// decisions at every step.
func replay(t *testing.T, n int, p *ratelimit.Policy, trace []step, rs *Redis, clk *clock, setTime func(time.Time)) {
	t.Helper()
	ctx := context.Background()
	mem := NewMemory(WithClock(clk.Now))
	memR, redR := make([]ratelimit.Receipt, len(trace)), make([]ratelimit.Receipt, len(trace))
	for i, s := range trace {
		clk.Set(t0.Add(s.at))
		setTime(t0.Add(s.at))
		want, err := apply(ctx, mem, p, s, memR)
		if err != nil {
			t.Fatal(err)
		}
		got, err := apply(ctx, rs, p, s, redR)
		if err != nil {
			t.Fatalf("trace %d step %d: %v", n, i, err)
		}
		memR[i], redR[i] = want.Receipt, got.Receipt
		if !reflect.DeepEqual(receiptView(got.Receipt), receiptView(want.Receipt)) {
			t.Fatalf("trace %d step %d: receipts differ:\nredis  %+v\nmemory %+v", n, i, receiptView(got.Receipt), receiptView(want.Receipt))
		}
		got.Receipt, want.Receipt = ratelimit.Receipt{}, ratelimit.Receipt{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trace %d (%s %s, block %s) step %d at +%s op %d keys %q cost %d id %q:\nredis  %+v\nmemory %+v",
				n, p.Name(), p, p.BlockFor(), i, s.at, s.op, s.keys, s.cost, s.id, got, want)
		}
	}
}

// receiptView is what two stores' receipts of the same charge must agree
// on: the policy, keys, cost, and per key the charge time and the marks.
// The refund count each store keeps per key is left out: the stores count
// from different origins (a Redis key outlives its counters by up to a
// quarter TTL), and only its changes between a charge and its refund
// matter, which the refunds replayed later compare.
func receiptView(r ratelimit.Receipt) any {
	if r.IsZero() {
		return nil
	}
	p := r.Policy()
	stride := 2 + p.NumLimits()
	var marks []int64
	for i, m := range r.Marks() {
		if i%stride != 1 {
			marks = append(marks, m)
		}
	}
	return struct {
		Policy string
		Keys   []string
		Cost   int64
		Marks  []int64
	}{p.ID(), r.Keys(), r.Cost(), marks}
}
