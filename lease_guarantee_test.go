package ratelimit_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
	"github.com/ratelimitkit/ratelimit/internal/testmode"
	"github.com/ratelimitkit/ratelimit/store"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// TestLeaseNeverExceeded is the brute-force check of WithLease: random
// traces of several processes (Limiters) sharing one store, spending
// leased grants of a random policy, with refunds, settles below the
// charge, partial grants, several keys, processes that crash holding
// grants, and a store clock that steps back; every admission is recorded
// at the true time the caller got it, and every window of every limit,
// in true time, is checked by brute force against the limit's promise.
// Its trace count is RATELIMIT_LEASE_TRACES, else 1,000 with
// RATELIMIT_FULL=1 and 100 without; it runs on the memory store and,
// when there is a redis-server, on a real Redis.
func TestLeaseNeverExceeded(t *testing.T) {
	traces := testmode.Scale(1000, 100)
	if s := os.Getenv("RATELIMIT_LEASE_TRACES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("RATELIMIT_LEASE_TRACES=%q: want a positive number", s)
		}
		traces = n
	}
	backends := map[string]func(t *testing.T, now func() time.Time) ratelimit.Store{
		"memory": func(t *testing.T, now func() time.Time) ratelimit.Store {
			return store.NewMemory(store.WithClock(now))
		},
	}
	if realRedisAvailable() {
		var addr string
		backends["real Redis"] = func(st *testing.T, now func() time.Time) ratelimit.Store {
			if addr == "" {
				addr = redistest.StartServer(t).Addr
			}
			// A client of the trace's own: a grant's timer may settle after
			// the trace, and a store adds its hook to its client.
			c := redis.NewClient(&redis.Options{Addr: addr})
			st.Cleanup(func() { c.Close() })
			s, err := rlredis.New(c, rlredis.WithClock(now), rlredis.WithPrefix(fmt.Sprintf("lease%d:", time.Now().UnixNano())))
			if err != nil {
				st.Fatal(err)
			}
			return s
		}
	} else {
		t.Log("real Redis: not run (no redis-server on PATH)")
	}
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			var total leaseTally
			for i := range traces {
				total.add(runLeaseTrace(t, int64(i), newStore))
				if t.Failed() {
					return
				}
			}
			t.Logf("%s, %d traces: %d requests in %d store calls: %d admitted, %d denied; %d refunds, %d settles, %d crashes, %d clock steps",
				name, traces, total.requests, total.calls, total.admitted, total.denied, total.refunds, total.settles, total.crashes, total.steps)
			// The traces must reach what they check: requests decided
			// from grants without a store call, denials, and each
			// operation.
			if total.calls >= total.requests || total.denied == 0 || total.refunds == 0 || total.settles == 0 || total.crashes == 0 || total.steps == 0 {
				t.Errorf("the traces miss a case: %+v", total)
			}
		})
	}
}

type leaseTally struct{ requests, admitted, calls, denied, refunds, settles, crashes, steps int }

func (a *leaseTally) add(b leaseTally) {
	a.requests += b.requests
	a.admitted += b.admitted
	a.calls += b.calls
	a.denied += b.denied
	a.refunds += b.refunds
	a.settles += b.settles
	a.crashes += b.crashes
	a.steps += b.steps
}

// admission is one admitted request: when, how much (after refunds and
// settles) and for which keys.
type admission struct {
	at   time.Duration // true time from the trace's start
	cost int64
	keys []string
	d    ratelimit.Decision
	proc int // the Limiter that admitted it; -1 once it crashed
	// refunded, or settled: either happens once.
	refunded, settled bool
}

// leasePolicy draws a policy and lease terms for seed's trace.
func leasePolicy(rng *rand.Rand) *ratelimit.Policy {
	for {
		var s string
		var opts []ratelimit.PolicyOption
		switch rng.Intn(7) {
		case 0: // an exact sliding window (a log)
			s = fmt.Sprintf("%d/%dms", 3+rng.Intn(18), 50*(1+rng.Intn(4)))
		case 1: // sub-buckets
			s, opts = fmt.Sprintf("%d/s", 40+rng.Intn(160)), []ratelimit.PolicyOption{ratelimit.WithPrecision(10)}
		case 2:
			s, opts = fmt.Sprintf("%d/%dms", 3+rng.Intn(18), 100*(1+rng.Intn(3))), []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingLog)}
		case 3:
			s, opts = fmt.Sprintf("%d/%dms", 3+rng.Intn(18), 100*(1+rng.Intn(3))), []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.FixedWindow)}
		case 4:
			s, opts = fmt.Sprintf("%d/%dms", 30+rng.Intn(30), 100*(1+rng.Intn(3))), []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindowApprox)}
		case 5:
			// Tokens every few ms: a hold is worth several of them.
			s, opts = fmt.Sprintf("%d/100ms", 20+rng.Intn(80)), []ratelimit.PolicyOption{
				ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(int64(10 + rng.Intn(30)))}
		default: // two limits
			s = fmt.Sprintf("%d/50ms, %d/300ms", 3+rng.Intn(5), 10+rng.Intn(10))
		}
		opts = append(opts, ratelimit.WithLease(int64(1+rng.Intn(16)), time.Duration(1+rng.Intn(25))*time.Millisecond))
		if p, err := ratelimit.ParsePolicy(s, opts...); err == nil {
			return p
		}
	}
}

// runLeaseTrace replays one random trace and checks its admissions.
func runLeaseTrace(t *testing.T, seed int64, newStore func(t *testing.T, now func() time.Time) ratelimit.Store) (tally leaseTally) {
	rng := rand.New(rand.NewSource(seed))
	p := leasePolicy(rng)
	clk := newTestClock()
	var lagMu sync.Mutex
	lag := time.Duration(0) // how far the store's clock is behind true time
	storeNow := func() time.Time {
		lagMu.Lock()
		defer lagMu.Unlock()
		return clk.Now().Add(-lag)
	}
	s := newStore(t, storeNow)
	counting := &decisionCalls{}
	newProc := func() *ratelimit.Limiter {
		// A grant's timer that settles after the trace's client closed
		// logs a failure: the log is not what this test checks.
		l := newLimiter(t, s, p, ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithObserver(counting), patient,
			ratelimit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		ratelimit.SetLogClock(l, clk.Now)
		return l
	}
	procs := make([]*ratelimit.Limiter, 2+rng.Intn(3))
	for i := range procs {
		procs[i] = newProc()
	}
	keySets := [][]string{{"a"}, {"b"}, {"a", "b"}, {"a"}}
	var adm []*admission
	ctx := context.Background()
	start := clk.Now()
	_, hold := p.Lease()
	steps, stepping := 100+rng.Intn(150), rng.Intn(4) == 0
	for step := range steps {
		switch r := rng.Intn(100); {
		case r < 55: // requests: one, or a process's burst of them
			i := rng.Intn(len(procs))
			keys := keySets[rng.Intn(len(keySets))]
			n := 1
			if rng.Intn(4) == 0 {
				n = 2 + rng.Intn(8)
			}
			for range n {
				cost := int64(1 + rng.Intn(int(min(p.MaxCost(), 3))))
				var d ratelimit.Decision
				var err error
				if rng.Intn(8) == 0 {
					_, d, err = procs[i].AllowUpTo(ctx, cost, keys...)
				} else {
					d, err = procs[i].AllowN(ctx, cost, keys...)
				}
				if err != nil {
					t.Fatalf("trace %d step %d: %v", seed, step, err)
				}
				tally.requests++
				if d.Allowed {
					adm = append(adm, &admission{at: clk.Now().Sub(start), cost: d.Granted, keys: keys, d: d, proc: i})
					tally.admitted++
				} else {
					tally.denied++
				}
			}
		case r < 80: // time passes: within a hold, to its end, or longer
			switch rng.Intn(8) {
			case 0:
				clk.Advance(hold - time.Duration(rng.Int63n(int64(hold)/10+1)))
			case 1:
				clk.Advance(time.Duration(rng.Int63n(int64(p.Limit(0).Period) / 3)))
			case 2, 3:
				clk.Advance(time.Duration(rng.Int63n(int64(2*hold) + 1)))
			default:
				clk.Advance(time.Duration(rng.Int63n(int64(hold)/5 + 1)))
			}
		case r < 87 && len(adm) > 0: // a refund
			a := adm[rng.Intn(len(adm))]
			if !a.refunded && !a.settled && a.proc >= 0 {
				if err := procs[a.proc].Refund(ctx, a.d); err != nil {
					t.Fatalf("trace %d step %d: Refund: %v", seed, step, err)
				}
				a.refunded = true
				tally.refunds++
			}
		case r < 93 && len(adm) > 0: // a settle below the charge
			a := adm[rng.Intn(len(adm))]
			if !a.refunded && !a.settled && a.cost > 1 && a.proc >= 0 {
				actual := rng.Int63n(a.cost)
				if err := procs[a.proc].Settle(ctx, a.d, actual); err != nil {
					t.Fatalf("trace %d step %d: Settle: %v", seed, step, err)
				}
				a.cost, a.settled = actual, true
				tally.settles++
			}
		case r < 95: // a process crashes holding its grants; another starts
			i := rng.Intn(len(procs))
			procs[i] = newProc()
			for _, a := range adm {
				if a.proc == i {
					a.proc = -1 // its charges stay as they are
				}
			}
			tally.crashes++
		default: // in one trace of four, the store's clock steps back
			if !stepping {
				continue
			}
			lagMu.Lock()
			lag += time.Duration(rng.Int63n(int64(hold)*2 + 1))
			lagMu.Unlock()
			tally.steps++
		}
	}
	tally.calls = counting.count()
	for _, key := range []string{"a", "b"} {
		checkLeaseWindows(t, seed, p, key, adm)
	}
	return tally
}

// checkLeaseWindows checks every window of every limit of p for key: a
// window limit admits at most Rate in any window of length Period (the
// leases count fixed windows and the approximation as sliding ones, a
// stronger promise), a token bucket at most Burst + d ÷ interval in any
// interval of length d.
func checkLeaseWindows(t *testing.T, seed int64, p *ratelimit.Policy, key string, adm []*admission) {
	t.Helper()
	var at []time.Duration
	var cost []int64
	for _, a := range adm {
		if slices.Contains(a.keys, key) && a.cost > 0 && !a.refunded {
			at, cost = append(at, a.at), append(cost, a.cost)
		}
	}
	for li, lim := range p.Limits() {
		for i := range at {
			sum := int64(0)
			for j := i; j < len(at); j++ {
				if p.Algorithm() == ratelimit.TokenBucket {
					sum += cost[j]
					interval := (lim.Period.Microseconds() + lim.Rate - 1) / lim.Rate // the emission interval, µs
					if allowed := lim.Burst + (at[j]-at[i]).Microseconds()/interval; sum > allowed {
						t.Fatalf("trace %d (%s, lease %v): key %s, limit %d: %d admitted in [%v, %v], the bucket allows %d", seed, p, leaseOf(p), key, li+1, sum, at[i], at[j], allowed)
					}
					continue
				}
				if at[j]-at[i] >= lim.Period {
					break
				}
				if sum += cost[j]; sum > lim.Rate {
					t.Fatalf("trace %d (%s %s, lease %v): key %s, limit %d: %d admitted in [%v, %v], more than %d", seed, p, p.Algorithm(), leaseOf(p), key, li+1, sum, at[i], at[i]+lim.Period, lim.Rate)
				}
			}
		}
	}
}

func leaseOf(p *ratelimit.Policy) string {
	c, h := p.Lease()
	return fmt.Sprintf("%d per %s", c, h)
}

// decisionCalls counts the store calls that decide (takes and grants).
type decisionCalls struct {
	mu sync.Mutex
	n  int
}

func (o *decisionCalls) ObserveDecision(ratelimit.DecisionEvent) {}
func (o *decisionCalls) ObserveCircuit(ratelimit.CircuitEvent)   {}
func (o *decisionCalls) ObserveStore(e ratelimit.StoreEvent) {
	if e.Op == "lease" || e.Op == "take" || e.Op == "take_up_to" {
		o.mu.Lock()
		o.n++
		o.mu.Unlock()
	}
}

func (o *decisionCalls) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}
