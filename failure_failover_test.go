package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store"
)

// The Sentinel failover test: a master, a replica and three sentinels on
// loopback (redistest.StartSentinel); 16 clients send requests through the
// middleware, whose store is a go-redis failover client; the master is
// killed (SIGKILL) and a sentinel promotes the replica.
//
// Timing: the only time assertion is the hang guard (every request answers
// within its budget plus senSlack); the failover's duration and latencies
// are logged, never compared with a speed.

const (
	// senTimeout is the Limiter's store timeout (WithTimeout).
	senTimeout = 100 * time.Millisecond
	// senSlack is added to a request's budget (senTimeout, twice it with a
	// fallback store) before the request counts as hung: room for a shared
	// 2-core machine running -race, never a speed target.
	senSlack = 500 * time.Millisecond
	// senClients is the number of concurrent clients.
	senClients = 16
	// senHealthy is how long the clients run before the kill.
	senHealthy = time.Second
	// senFailoverBound bounds the wait for the failover and for limiting
	// by Redis to resume.
	senFailoverBound = 30 * time.Second
	// senAfter is how long the clients keep running once Redis decides again.
	senAfter = 500 * time.Millisecond
	// senMaxIters bounds each client's loop.
	senMaxIters = 200_000
)

// senLoad is the load policy: so large that no request of the test is
// denied, so every admission is a charge and the counters count them all.
var senLoad = ratelimit.MustParsePolicy("1000000/h", ratelimit.Named("failover"))

// senStrict is the policy of requests with the X-Strict header: a fourth
// request within the hour is denied.
var senStrict = ratelimit.MustParsePolicy("3/h", ratelimit.Named("strict"))

// senMode is a failure configuration and what a request the store could
// not decide must look like under it.
type senMode struct {
	name   string
	opts   []ratelimit.Option
	budget time.Duration // the store timeout, twice it with a fallback
	check  func(w *httptest.ResponseRecorder) string
}

func senModes() []senMode {
	noLimitHeaders := func(w *httptest.ResponseRecorder) bool {
		for k := range w.Header() {
			if strings.Contains(strings.ToLower(k), "ratelimit") {
				return false
			}
		}
		return true
	}
	return []senMode{
		{
			name:   "fail-open",
			opts:   []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)},
			budget: senTimeout,
			check: func(w *httptest.ResponseRecorder) string {
				if w.Code != http.StatusOK || !noLimitHeaders(w) || w.Header().Get("Retry-After") != "" {
					return fmt.Sprintf("status %d, headers %v; want 200 without rate-limit headers", w.Code, w.Header())
				}
				return ""
			},
		},
		{
			name:   "fail-closed",
			opts:   []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)},
			budget: senTimeout,
			check: func(w *httptest.ResponseRecorder) string {
				if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !noLimitHeaders(w) {
					return fmt.Sprintf("status %d, headers %v; want 503 with Retry-After: 1 and no rate-limit headers", w.Code, w.Header())
				}
				return ""
			},
		},
		{
			name:   "memory-fallback",
			opts:   []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(store.NewMemory())},
			budget: 2 * senTimeout,
			check: func(w *httptest.ResponseRecorder) string {
				if w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
					return fmt.Sprintf("status %d, headers %v; want 200 with rate-limit headers (the fallback admits under a million per hour)", w.Code, w.Header())
				}
				return ""
			},
		},
	}
}

// senErrMark is set by the error hook on the request it was called for.
type senErrMark struct {
	any, mayHaveRun atomic.Bool
}

type senMarkKey struct{}

// senRequest is a GET / as client id ("c:"+id is its key); strict selects
// the 3/h policy.
func senRequest(id string, strict bool) (*http.Request, *senErrMark) {
	m := new(senErrMark)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), senMarkKey{}, m))
	r.Header.Set("X-Client", id)
	if strict {
		r.Header.Set("X-Strict", "1")
	}
	return r, m
}

// senHook marks the request's store errors: any error, and whether the
// command may have reached a server (neither skipped by the open circuit
// nor refused at connect), so that it may have charged.
func senHook(r *http.Request, err error) {
	if r == nil {
		return
	}
	m, ok := r.Context().Value(senMarkKey{}).(*senErrMark)
	if !ok {
		return
	}
	m.any.Store(true)
	if !errors.Is(err, ratelimit.ErrCircuitOpen) && !errors.Is(err, syscall.ECONNREFUSED) {
		m.mayHaveRun.Store(true)
	}
}

// senDecided reports whether Redis decided the request: no store error and
// the rate-limit headers that only a decision writes.
func senDecided(w *httptest.ResponseRecorder, m *senErrMark) bool {
	return !m.any.Load() && w.Header().Get("RateLimit") != "" && (w.Code == http.StatusOK || w.Code == http.StatusTooManyRequests)
}

// senClientStats is what one load client saw with its first identity, the
// one it used until the kill.
type senClientStats struct {
	acked      int64 // admissions decided by Redis: charges the old master acknowledged
	mayHaveRun int64 // requests that failed after their command may have reached the old master
}

// TestSentinelRealFailover runs the failover once per failure mode. Each
// run takes a topology of its own and seconds of real time, so without
// RATELIMIT_FULL=1 only memory-fallback runs (fail-open and fail-closed
// answer an outage as TestRealRedisDiesUnderLoad checks).
func TestSentinelRealFailover(t *testing.T) {
	for _, mode := range senModes() {
		t.Run(mode.name, func(t *testing.T) {
			if mode.name != "memory-fallback" {
				redistest.Need(t)
				testmode.SkipUnlessFull(t)
			}
			senFailover(t, mode)
		})
	}
}

func senFailover(t *testing.T, mode senMode) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*senFailoverBound)
	defer cancel()
	topo := redistest.StartSentinel(t)
	opt := topo.FailoverOptions()
	opt.ContextTimeoutEnabled = true // the Limiter's timeout reaches the socket
	opt.MaxRetries = -1              // no resend: a charge is counted once, so lost charges can be counted
	opt.DialTimeout = time.Second    // the context's deadline is shorter anyway
	client := redis.NewFailoverClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	st, err := store.NewRedis(client)
	if err != nil {
		t.Fatal(err)
	}
	byClient := ratelimit.IdentifierFunc(func(r *http.Request) (string, bool) {
		id := r.Header.Get("X-Client")
		return "c:" + id, id != ""
	})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := append(slices.Clone(mode.opts),
		ratelimit.WithTimeout(senTimeout),
		ratelimit.WithLogger(logger),
		ratelimit.WithErrorHook(senHook),
		ratelimit.WithIdentifiers(byClient),
		ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy {
			if r.Header.Get("X-Strict") != "" {
				return senStrict
			}
			return nil
		}))
	lim, err := ratelimit.New(st, senLoad, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(okHandler)
	// peek reads a counter without charging (cost 0), from Redis only: no
	// fallback, no circuit, and an error when Redis did not answer.
	peek, err := ratelimit.New(st, senLoad, ratelimit.WithTimeout(time.Second), ratelimit.WithLogger(logger),
		ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithCircuitBreaker(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	guard := mode.budget + senSlack

	// A key denied before the failover, and replicated: WAIT on the admin
	// connection returns once the replica has acknowledged the replication
	// stream up to the admin's own write, which comes after these charges.
	var codes []int
	for range 4 {
		r, m := senRequest("denied-before", true)
		w, _ := timedServe(h, r)
		if !senDecided(w, m) {
			t.Fatalf("before the kill: status %d, headers %v, store error %v: not decided by Redis", w.Code, w.Header(), m.any.Load())
		}
		codes = append(codes, w.Code)
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("3/h before the kill: %v, want %v", codes, want)
	}
	admin := topo.Master.Client(t)
	if err := admin.Set(ctx, "replicated-marker", "1", 0).Err(); err != nil {
		t.Fatalf("SET marker: %v", err)
	}
	if n, err := admin.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 5000 = %d, %v: the replica did not acknowledge", n, err)
	}

	var (
		phase   atomic.Int32 // 0 healthy, 1 from the kill on
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		bad     violations
		served  atomic.Int64
		decided [2]atomic.Int64 // by phase
		stats   [senClients]senClientStats
		mu      sync.Mutex
		lats    []time.Duration // requests not decided by Redis
		maxLat  atomic.Int64
	)
	stopLoad := sync.OnceFunc(func() { close(stop) })
	defer wg.Wait()
	defer stopLoad()
	for g := range senClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					bad.add("client %d panicked: %v", g, p)
				}
			}()
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lats = append(lats, mine...)
				mu.Unlock()
			}()
			for range senMaxIters {
				select {
				case <-stop:
					return
				default:
				}
				ph := phase.Load()
				// A new identity from the kill on: the first one's counter
				// then holds only what the old master charged.
				r, m := senRequest(fmt.Sprintf("load-%d-%d", g, ph), false)
				w, took := timedServe(h, r)
				served.Add(1)
				for m := maxLat.Load(); int64(took) > m && !maxLat.CompareAndSwap(m, int64(took)); m = maxLat.Load() {
				}
				if took > guard {
					bad.add("client %d: request took %v, over the budget %v plus %v", g, took, mode.budget, senSlack)
				}
				switch {
				case senDecided(w, m):
					decided[ph].Add(1)
					if w.Code != http.StatusOK {
						bad.add("client %d: status %d from Redis under a policy of a million per hour", g, w.Code)
					}
					if ph == 0 {
						stats[g].acked++
					}
				case m.any.Load():
					mine = append(mine, took)
					if msg := mode.check(w); msg != "" {
						bad.add("client %d, store error: %s", g, msg)
					}
					if ph == 0 && m.mayHaveRun.Load() {
						stats[g].mayHaveRun++
					}
				default:
					bad.add("client %d: status %d, headers %v: neither decided by Redis nor a store error", g, w.Code, w.Header())
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}

	time.Sleep(senHealthy)
	old := topo.Master.Addr
	phase.Store(1)
	killed := time.Now()
	topo.Master.Kill(t)
	promoted := topo.WaitFailover(t, old, senFailoverBound)
	promotedAfter := time.Since(killed)
	for decided[1].Load() == 0 && time.Since(killed) < senFailoverBound {
		time.Sleep(10 * time.Millisecond)
	}
	resumedAfter := time.Since(killed)
	if decided[1].Load() == 0 {
		stopLoad()
		t.Fatalf("limiting by Redis did not resume within %v of the kill (promoted %s after %v)", senFailoverBound, promoted, promotedAfter)
	}
	time.Sleep(senAfter)
	stopLoad()
	waitStopped(t, &wg, guard, "load clients")
	bad.report(t, "violations under load")

	mu.Lock()
	outage := slices.Clone(lats)
	mu.Unlock()
	t.Logf("%d requests by %d clients: %d decided by Redis before the kill, %d after; %d by the failure mode or fallback (latency p50 %v, p99 %v); slowest request %v (budget %v + slack %v)",
		served.Load(), senClients, decided[0].Load(), decided[1].Load(), len(outage),
		percentile(outage, 0.5), percentile(outage, 0.99), time.Duration(maxLat.Load()), mode.budget, senSlack)
	t.Logf("failover: sentinels name %s as master %v after the kill (down-after %v); Redis decides requests again after %v",
		promoted, promotedAfter.Round(time.Millisecond), redistest.SentinelDownAfter, resumedAfter.Round(time.Millisecond))
	if decided[0].Load() == 0 {
		t.Error("no request was decided by Redis before the kill")
	}
	if promoted != topo.Replica.Addr {
		t.Errorf("promoted %s, want the replica %s", promoted, topo.Replica.Addr)
	}

	// (b) Limiting resumes on the promoted replica: a fresh identity on 3/h
	// is denied at its fourth request, and the key denied (and replicated)
	// before the kill is still denied. Retry while the circuit still skips
	// the store (a request answered by the failure mode or fallback).
	strictCodes := func(id string, n int) ([]int, bool) {
		var got []int
		for len(got) < n {
			r, m := senRequest(id, true)
			w, took := timedServe(h, r)
			if took > guard {
				t.Errorf("after the failover: a request took %v, over the guard %v", took, guard)
			}
			if !senDecided(w, m) {
				return got, false
			}
			got = append(got, w.Code)
		}
		return got, true
	}
	deadline := time.Now().Add(senFailoverBound)
	for {
		got, ok := strictCodes("denied-before", 1)
		if ok {
			if !slices.Equal(got, []int{429}) {
				t.Errorf("the key denied and replicated before the kill: %v after the failover, want [429]", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the failover, Redis did not decide a strict request within %v", senFailoverBound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, ok := strictCodes("fresh-after", 4); !ok || !slices.Equal(got, []int{200, 200, 200, 429}) {
		t.Errorf("fresh identity on 3/h after the failover: %v (all decided by Redis: %v), want [200 200 200 429]", got, ok)
	}
	newMaster := topo.Node(promoted).Client(t)
	// The library was replicated with the data (FCALL at once); a script
	// run by EVALSHA is reloaded after NOSCRIPT (EVAL).
	if stats, err := newMaster.Info(ctx, "commandstats").Result(); err != nil || !strings.Contains(stats, "cmdstat_fcall:") && !strings.Contains(stats, "cmdstat_eval:") {
		t.Errorf("the promoted replica ran neither FCALL nor EVAL: %v\n%s", err, stats)
	}

	// (c) Charges lost: each client's first identity was charged only by
	// the old master; its counter on the new master holds what reached the
	// replica. A cost-0 peek reports Remaining without charging.
	var acked, used, maybe, lostMin, lostMax int64
	for g := range senClients {
		d, err := peek.AllowN(ctx, 0, fmt.Sprintf("c:load-%d-0", g))
		if err != nil {
			t.Fatalf("peek at client %d's counter on the new master: %v", g, err)
		}
		u := senLoad.Limits()[0].Rate - d.Remaining
		s := stats[g]
		if u > s.acked+s.mayHaveRun {
			t.Errorf("client %d: %d charges on the new master, but only %d admissions and %d failed requests that may have run: counted twice?", g, u, s.acked, s.mayHaveRun)
		}
		acked += s.acked
		used += u
		maybe += s.mayHaveRun
		lostMin += max(0, s.acked-u)
		lostMax += min(s.acked, max(0, s.acked-u+s.mayHaveRun))
	}
	t.Logf("charges: %d admissions acknowledged by the old master before the kill, %d on the promoted replica; lost %d to %d (%.3f%% to %.3f%%), %d requests failed after reaching the old master",
		acked, used, lostMin, lostMax, 100*float64(lostMin)/float64(max(acked, 1)), 100*float64(lostMax)/float64(max(acked, 1)), maybe)
}

// TestRealMinReplicasToWrite pins what the README says of
// min-replicas-to-write: a master without enough replicas refuses the
// script's writes (NOREPLICAS), and the Limiter treats that like any other
// store error: the failure mode decides.
func TestRealMinReplicasToWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := redistest.StartServer(t, "--min-replicas-to-write", "1", "--min-replicas-max-lag", "10")
	st, err := store.NewRedis(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	var hooked atomic.Int64
	lim, err := ratelimit.New(st, senStrict, ratelimit.WithFailureMode(ratelimit.FailClosed),
		ratelimit.WithTimeout(2*time.Second), ratelimit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		ratelimit.WithErrorHook(func(*http.Request, error) { hooked.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.AllowN(ctx, 1, "no-replica")
	if err == nil || !strings.Contains(err.Error(), "NOREPLICAS") {
		t.Fatalf("AllowN on a master without its replica: err = %v, want a NOREPLICAS error", err)
	}
	if d.Allowed || hooked.Load() != 1 {
		t.Errorf("Decision %+v with %d errors hooked; want FailClosed's denial and one error", d, hooked.Load())
	}
}
