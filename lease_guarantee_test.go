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
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// TestLeaseNeverExceeded is the brute-force check of WithLease: random
// traces of several processes (Limiters) sharing one store, spending
// leased grants of a random policy, each process with lease terms of its
// own (chunks and holds change as in a rolling deploy, and a process that
// restarts may lease with others), with refunds, settles below the charge
// and above it (debts, within the hold and after it), partial grants,
// several keys (a shared one denying while per-client ones have room),
// processes that crash holding grants, and a store clock that steps back;
// every admission is recorded at the true time the caller got it, and
// every window of every limit, in true time, is checked by brute force
// against the limit's promise: no request admitted while what was
// admitted before it and the debts settled a hold (the longest) before it
// fill the window. Its trace count is RATELIMIT_LEASE_TRACES, else 1,000
// with RATELIMIT_FULL=1 and 100 without; it runs on the memory store and,
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
			t.Logf("%s, %d traces: %d requests in %d store calls: %d admitted, %d denied (%d on several keys); %d refunds, %d settles, %d debts (%d after the hold), %d crashes, %d holds changed, %d clock steps",
				name, traces, total.requests, total.calls, total.admitted, total.denied, total.multiDenied, total.refunds, total.settles, total.debts, total.lateDebts, total.crashes, total.holds, total.steps)
			// The traces must reach what they check: requests decided
			// from grants without a store call, denials, and each
			// operation.
			if total.calls >= total.requests || total.denied == 0 || total.multiDenied == 0 || total.refunds == 0 || total.settles == 0 ||
				total.lateDebts == 0 || total.debts == total.lateDebts || total.crashes == 0 || total.holds == 0 || total.steps == 0 {
				t.Errorf("the traces miss a case: %+v", total)
			}
		})
	}
}

type leaseTally struct {
	requests, admitted, calls, denied, multiDenied, refunds, settles, debts, lateDebts, crashes, holds, steps int
}

func (a *leaseTally) add(b leaseTally) {
	a.requests += b.requests
	a.admitted += b.admitted
	a.calls += b.calls
	a.denied += b.denied
	a.multiDenied += b.multiDenied
	a.refunds += b.refunds
	a.settles += b.settles
	a.debts += b.debts
	a.lateDebts += b.lateDebts
	a.crashes += b.crashes
	a.holds += b.holds
	a.steps += b.steps
}

// admission is one admitted request: when, how much (after refunds and
// settles below the charge) and for which keys; or a debt: what a settle
// charged above a request's cost, when.
type admission struct {
	at   time.Duration // true time from the trace's start
	cost int64
	keys []string
	d    ratelimit.Decision
	proc int // the Limiter that admitted it; -1 once it crashed
	// refunded, or settled: either happens once.
	refunded, settled bool
	until             time.Duration // when the hold of its process's lease terms ended
	debt              bool
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
		if p, err := ratelimit.ParsePolicy(s, append(opts, leaseTerms(rng))...); err == nil {
			return p
		}
	}
}

// leaseTerms draws lease terms: a chunk of 1 to 16 and a hold of 1 to 25ms.
func leaseTerms(rng *rand.Rand) ratelimit.PolicyOption {
	return ratelimit.WithLease(int64(1+rng.Intn(16)), time.Duration(1+rng.Intn(25))*time.Millisecond)
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
	// In half the traces each process leases with terms of its own, drawn
	// anew when it restarts (a rolling deploy that tunes them); they must
	// share the same counters exactly.
	varied := rng.Intn(2) == 0
	_, maxHold := p.Lease()
	newProc := func() (*ratelimit.Limiter, *ratelimit.Policy) {
		pp := p
		if varied {
			for {
				q, err := p.With(leaseTerms(rng))
				if err == nil {
					pp = q
					break
				}
			}
			if _, h := pp.Lease(); h != maxHold {
				tally.holds++
			}
		}
		// A grant's timer that settles after the trace's client closed
		// logs a failure: the log is not what this test checks.
		l := newLimiter(t, s, pp, ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithObserver(counting), patient,
			ratelimit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		ratelimit.SetLogClock(l, clk.Now)
		return l, pp
	}
	procs := make([]*ratelimit.Limiter, 2+rng.Intn(3))
	terms := make([]*ratelimit.Policy, len(procs))
	for i := range procs {
		procs[i], terms[i] = newProc()
	}
	holdOf := func(i int) time.Duration { _, h := terms[i].Lease(); return h }
	// Keys: two, both, and one shared with a client key of a few: the
	// shared key denies requests their client keys have room for.
	keySets := [][]string{{"a"}, {"b"}, {"a", "b"}, {"a"}, {"a", "c1"}, {"a", "c2"}, {"c1"}}
	var adm []*admission
	ctx := context.Background()
	start := clk.Now()
	steps, stepping := 100+rng.Intn(150), rng.Intn(4) == 0
	for step := range steps {
		_, hold := p.Lease()
		switch r := rng.Intn(100); {
		case r < 55: // requests: one, or a process's burst of them
			i := rng.Intn(len(procs))
			keys := keySets[rng.Intn(len(keySets))]
			n := 1
			if rng.Intn(4) == 0 {
				n = 2 + rng.Intn(8)
			}
			for range n {
				cost := int64(1 + rng.Intn(int(min(terms[i].MaxCost(), 3))))
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
					now := clk.Now().Sub(start)
					adm = append(adm, &admission{at: now, cost: d.Granted, keys: keys, d: d, proc: i, until: now + holdOf(i)})
					tally.admitted++
				} else {
					tally.denied++
					if len(keys) > 1 {
						tally.multiDenied++
					}
				}
			}
		case r < 80: // time passes: within a hold, to its end, or longer
			switch rng.Intn(8) {
			case 0:
				clk.Advance(hold - time.Duration(rng.Int63n(int64(hold)/10+1)))
			case 1:
				clk.Advance(time.Duration(rng.Int63n(int64(p.Limits()[0].Period) / 3)))
			case 2, 3:
				clk.Advance(time.Duration(rng.Int63n(int64(2*hold) + 1)))
			default:
				clk.Advance(time.Duration(rng.Int63n(int64(hold)/5 + 1)))
			}
		case r < 86 && len(adm) > 0: // a refund
			a := adm[rng.Intn(len(adm))]
			if !a.debt && !a.refunded && !a.settled && a.proc >= 0 {
				if err := procs[a.proc].Refund(ctx, a.d); err != nil {
					t.Fatalf("trace %d step %d: Refund: %v", seed, step, err)
				}
				a.refunded = true
				tally.refunds++
			}
		case r < 93 && len(adm) > 0: // a settle: below the charge, or above it (a debt)
			a := adm[rng.Intn(len(adm))]
			if a.debt || a.refunded || a.settled || a.proc < 0 {
				continue
			}
			actual := rng.Int63n(a.cost + 4)
			if err := procs[a.proc].Settle(ctx, a.d, actual); err != nil {
				t.Fatalf("trace %d step %d: Settle: %v", seed, step, err)
			}
			a.settled = true
			tally.settles++
			if actual <= a.cost {
				a.cost = actual
				continue
			}
			now := clk.Now().Sub(start)
			adm = append(adm, &admission{at: now, cost: actual - a.cost, keys: a.keys, proc: -1, debt: true})
			tally.debts++
			if now >= a.until {
				tally.lateDebts++
			}
		case r < 95: // a process crashes holding its grants; another starts
			i := rng.Intn(len(procs))
			procs[i], terms[i] = newProc()
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
	longest := time.Duration(0)
	for _, q := range terms {
		_, h := q.Lease()
		longest = max(longest, h)
	}
	if varied {
		longest = 25 * time.Millisecond // a process since replaced may have held longer
	}
	for _, key := range []string{"a", "b", "c1", "c2"} {
		checkLeaseWindows(t, seed, p, key, adm, longest)
	}
	return tally
}

// checkLeaseWindows checks every window of every limit of p for key: a
// window limit admits at most Rate in any window of length Period (the
// leases count fixed windows and the approximation as sliding ones, a
// stronger promise), a token bucket at most Burst + d ÷ interval in any
// interval of length d. Debts may pass a limit, but no request is
// admitted while what was admitted before it and the debts settled at
// least hold (the longest any process leased with) before it fill the
// window: a grant taken before a debt may be spent until its hold ends.
func checkLeaseWindows(t *testing.T, seed int64, p *ratelimit.Policy, key string, adm []*admission, hold time.Duration) {
	t.Helper()
	type use struct {
		at   time.Duration
		cost int64
		debt bool
	}
	var ev []use // in the order they happened
	for _, a := range adm {
		if slices.Contains(a.keys, key) && a.cost > 0 && !a.refunded {
			ev = append(ev, use{a.at, a.cost, a.debt})
		}
	}
	for li, lim := range p.Limits() {
		interval := (lim.Period.Microseconds() + lim.Rate - 1) / lim.Rate // a token bucket's emission interval, µs
		for j, last := range ev {
			if last.debt {
				continue
			}
			// What the store had counted when it admitted last: every
			// admission before it, and the debts settled a hold before.
			counts := func(e use, i int) bool { return !e.debt && i <= j || e.debt && e.at <= last.at-hold }
			if p.Algorithm() == ratelimit.TokenBucket {
				for i, first := range ev {
					if !counts(first, i) || first.at > last.at {
						continue
					}
					sum := int64(0)
					for k, e := range ev {
						if counts(e, k) && e.at >= first.at && e.at <= last.at {
							sum += e.cost
						}
					}
					if allowed := lim.Burst + (last.at-first.at).Microseconds()/interval; sum > allowed {
						t.Fatalf("trace %d (%s, lease %v): key %s, limit %d: %d counted in [%v, %v], the bucket allows %d", seed, p, leaseOf(p), key, li+1, sum, first.at, last.at, allowed)
					}
				}
				continue
			}
			sum := int64(0)
			for k, e := range ev {
				if counts(e, k) && e.at > last.at-lim.Period && e.at <= last.at {
					sum += e.cost
				}
			}
			if sum > lim.Rate {
				t.Fatalf("trace %d (%s %s, lease %v): key %s, limit %d: %d counted in the window of %v ending at %v (the admission there included), more than %d", seed, p, p.Algorithm(), leaseOf(p), key, li+1, sum, lim.Period, last.at, lim.Rate)
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
