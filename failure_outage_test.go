package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store"
)

// These tests run the middleware against real redis-server processes that
// die, stall, slow down or lose a cluster node, and check that every
// request still gets an answer within its budget, in the configured
// failure mode, and that limiting resumes by itself.
//
// Timing: the only time assertions are hang guards (a request answers
// within its budget plus outageHangSlack) and counts bounded by budgets (no
// more circuit probes than cooldowns elapsed). Latencies are logged, never
// compared with a speed.

// outageHangSlack is added to a request's budget (the store timeout, twice
// with a fallback) before a request counts as hung: generous, for a busy
// machine running -race.
const outageHangSlack = 900 * time.Millisecond

var outageLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// outageGet is a GET / from the IPv4 address ip (ByIP's key is "ip:"+ip).
func outageGet(ip string, header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = ip + ":40000"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

// outageHasLimitHeaders reports whether the response carries the rate-limit
// headers, which only a store's decision produces.
func outageHasLimitHeaders(w *httptest.ResponseRecorder) bool {
	return w.Header().Get("RateLimit") != "" && w.Header().Get("RateLimit-Policy") != ""
}

// outageNoLimitHeaders reports whether no rate-limit header of any style, nor
// Retry-After, is present.
func outageNoLimitHeaders(w *httptest.ResponseRecorder) bool {
	for k := range w.Header() {
		if strings.Contains(strings.ToLower(k), "ratelimit") || k == "Retry-After" {
			return false
		}
	}
	return true
}

// outageErrCounter counts store errors seen by the error hook: those of a
// skipped store (circuit open) apart.
type outageErrCounter struct {
	skipped atomic.Int64 // ErrCircuitOpen: the store was not asked
	failed  atomic.Int64 // the store (or fallback) was asked and failed
}

func (c *outageErrCounter) hook(_ *http.Request, err error) {
	if errors.Is(err, ratelimit.ErrCircuitOpen) {
		c.skipped.Add(1)
	} else {
		c.failed.Add(1)
	}
}

func (c *outageErrCounter) total() int64 { return c.skipped.Load() + c.failed.Load() }

// outageWaitGoroutines polls, for at most 5s, until the number of goroutines
// is at most want, and returns the last count.
func outageWaitGoroutines(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Phases of a load run. A request is judged by the phase in which it
// started and ended; one that spans a change is only hang-guarded.
const (
	phaseHealthy int32 = iota
	phaseKilling
	phaseDown
)

// outageMode is a failure configuration and what a request answered during
// an outage must look like under it.
type outageMode struct {
	name         string
	opts         func() []ratelimit.Option
	budget       time.Duration // timeout, or twice it with a fallback
	duringOutage func(w *httptest.ResponseRecorder) string
}

func outageModes(timeout time.Duration) []outageMode {
	return []outageMode{
		{
			name:   "fail-open",
			opts:   func() []ratelimit.Option { return []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)} },
			budget: timeout,
			duringOutage: func(w *httptest.ResponseRecorder) string {
				if w.Code != http.StatusOK || !outageNoLimitHeaders(w) {
					return fmt.Sprintf("status %d, headers %v; want 200 without rate-limit headers", w.Code, w.Header())
				}
				return ""
			},
		},
		{
			name:   "fail-closed",
			opts:   func() []ratelimit.Option { return []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)} },
			budget: timeout,
			duringOutage: func(w *httptest.ResponseRecorder) string {
				if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || outageHasLimitHeaders(w) {
					return fmt.Sprintf("status %d, headers %v; want 503 with Retry-After: 1 and no rate-limit headers", w.Code, w.Header())
				}
				return ""
			},
		},
		{
			name: "fallback",
			opts: func() []ratelimit.Option {
				return []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(store.NewMemory())}
			},
			budget: 2 * timeout,
			duringOutage: func(w *httptest.ResponseRecorder) string {
				if (w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests) || !outageHasLimitHeaders(w) {
					return fmt.Sprintf("status %d, headers %v; want 200 or 429 with rate-limit headers (the fallback decides)", w.Code, w.Header())
				}
				return ""
			},
		},
	}
}

// TestRealRedisDiesUnderLoad kills redis-server while 16 clients hammer
// the middleware, for each failure mode and for go-redis clients with and
// without ContextTimeoutEnabled. During the outage every request answers
// within the budget, as its mode says; after a restart (empty data, empty
// script cache) limiting resumes by itself; no goroutine is left behind.
// Each case takes seconds of real time, so without RATELIMIT_FULL=1 each
// failure mode runs once, the two clients taking turns (the fallback on
// go-redis's default client, without ContextTimeoutEnabled).
func TestRealRedisDiesUnderLoad(t *testing.T) {
	const (
		timeout  = 50 * time.Millisecond
		loaders  = 16
		healthy  = 250 * time.Millisecond  // load before the kill
		outage   = 1200 * time.Millisecond // load after the kill: longer than a cooldown, so a probe runs
		maxIters = 50_000                  // per load goroutine
	)
	clients := []struct {
		name       string
		ctxTimeout bool
	}{
		{"ctx-timeout", true},     // the deadline reaches the socket
		{"no-ctx-timeout", false}, // the store returns at the deadline itself
	}
	for ci, c := range clients {
		for mi, mode := range outageModes(timeout) {
			t.Run(c.name+"/"+mode.name, func(t *testing.T) {
				if (ci+mi)%2 == 0 {
					redistest.Need(t)
					testmode.SkipUnlessFull(t)
				}
				srv := redistest.StartServer(t)
				base := runtime.NumGoroutine()
				client := redis.NewClient(&redis.Options{
					Addr:                  srv.Addr,
					ContextTimeoutEnabled: c.ctxTimeout,
					DialTimeout:           100 * time.Millisecond,
				})
				closeClient := sync.OnceFunc(func() { _ = client.Close() })
				t.Cleanup(closeClient)
				load := ratelimit.MustParsePolicy("20/s, 600/m", ratelimit.Named("load"))
				strict := ratelimit.MustParsePolicy("3/h", ratelimit.Named("strict"))
				var errs outageErrCounter
				opts := append(mode.opts(),
					ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy {
						if r.Header.Get("X-Strict") != "" {
							return strict
						}
						return nil
					}))
				lim := outageLimiter(t, client, load, timeout, &errs, opts...)
				h := lim.Handler(okHandler)
				guard := mode.budget + outageHangSlack
				outageWarm(t, client, load, strict)

				var (
					phase      atomic.Int32
					stop       = make(chan struct{})
					wg         sync.WaitGroup
					bad        violations
					mu         sync.Mutex
					outageLats []time.Duration
					upDecided  atomic.Int64 // healthy phase: decided by a store (headers)
					upFailed   atomic.Int64 // healthy phase: failure mode
					served     atomic.Int64
					outCodes   sync.Map // status → *atomic.Int64, during the outage
				)
				stopLoad := sync.OnceFunc(func() { close(stop) })
				defer wg.Wait() // if the test ends early, after stopLoad
				defer stopLoad()
				for g := range loaders {
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer func() {
							if p := recover(); p != nil {
								bad.add("loader %d panicked: %v", g, p)
							}
						}()
						ip := fmt.Sprintf("10.0.%d.%d", g/200, g%200+1)
						var lats []time.Duration
						defer func() {
							mu.Lock()
							outageLats = append(outageLats, lats...)
							mu.Unlock()
						}()
						for range maxIters {
							select {
							case <-stop:
								return
							default:
							}
							before := phase.Load()
							w, took := timedServe(h, outageGet(ip))
							after := phase.Load()
							served.Add(1)
							if took > guard {
								bad.add("loader %d: request took %v, over the guard %v (phase %d→%d, status %d)", g, took, guard, before, after, w.Code)
							}
							switch {
							case before != after:
								// spans the kill: only hang-guarded
							case before == phaseHealthy:
								if outageHasLimitHeaders(w) && (w.Code == http.StatusOK || w.Code == http.StatusTooManyRequests) {
									upDecided.Add(1)
								} else {
									upFailed.Add(1)
								}
							case before == phaseDown:
								lats = append(lats, took)
								n, _ := outCodes.LoadOrStore(w.Code, new(atomic.Int64))
								n.(*atomic.Int64).Add(1)
								if msg := mode.duringOutage(w); msg != "" {
									bad.add("loader %d during the outage: %s", g, msg)
								}
							}
							time.Sleep(time.Millisecond) // many clients, each about 1000 requests/s at most
						}
					}()
				}

				time.Sleep(healthy)
				phase.Store(phaseKilling)
				srv.Kill(t)
				errsAtKill := errs.total()
				skipsAtKill := errs.skipped.Load()
				phase.Store(phaseDown)
				time.Sleep(outage)
				stopLoad()
				waitStopped(t, &wg, guard, "load goroutines")
				bad.report(t, "violations under load")

				mu.Lock()
				lats := slices.Clone(outageLats)
				mu.Unlock()
				skipped := errs.skipped.Load() - skipsAtKill
				failed := errs.total() - errsAtKill - skipped
				t.Logf("%d requests by %d clients; healthy phase: %d decided by Redis, %d in failure mode",
					served.Load(), loaders, upDecided.Load(), upFailed.Load())
				var byCode []string
				outCodes.Range(func(k, v any) bool {
					byCode = append(byCode, fmt.Sprintf("%d×%d", v.(*atomic.Int64).Load(), k))
					return true
				})
				slices.Sort(byCode)
				t.Logf("outage (%v, timeout %v): %d requests (%s), latency p50 %v, p99 %v, max %v; store calls failed after the kill %d, skipped by the open circuit %d",
					outage, timeout, len(lats), strings.Join(byCode, " "), percentile(lats, 0.5), percentile(lats, 0.99), percentile(lats, 1), failed, skipped)
				if len(lats) == 0 {
					t.Fatal("no request was served during the outage")
				}
				if upDecided.Load() == 0 {
					t.Error("no request was decided by Redis before the kill")
				}
				if skipped == 0 {
					t.Error("the circuit never opened during the outage: every request waited on the dead store")
				}

				// Restart: an empty Redis, without the scripts. Limiting must
				// resume by itself: the circuit's probe finds the store again
				// and the script is loaded again after NOSCRIPT.
				srv.Restart(t)
				restarted := time.Now()
				resumed := time.Duration(-1)
				for i := 0; i < 1000 && time.Since(restarted) < 5*time.Second; i++ {
					before := errs.total()
					w, took := timedServe(h, outageGet("10.9.9.9"))
					if took > guard {
						t.Errorf("after the restart: a request took %v, over the guard %v", took, guard)
					}
					if outageHasLimitHeaders(w) && errs.total() == before {
						resumed = time.Since(restarted)
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				if resumed < 0 {
					t.Fatalf("limiting by Redis did not resume within 5s of the restart (errors so far %d)", errs.total())
				}
				t.Logf("after the restart, Redis decides again after %v (circuit cooldown %v)", resumed, ratelimit.DefaultCircuitCooldown)

				// The strict policy's script is not in the restarted Redis
				// either: its first call loads it (the script by EVAL, its
				// library beside it), which on a loaded machine can take
				// longer than the timeout. Another identity waits for that
				// load, so that the fresh identity below meets a store that
				// answers at its usual pace, whatever the machine's.
				strictBack := false
				for i := 0; i < 1000 && time.Since(restarted) < 10*time.Second; i++ {
					before := errs.total()
					w, _ := timedServe(h, outageGet("10.7.7.7", "X-Strict", "1"))
					if outageHasLimitHeaders(w) && errs.total() == before {
						strictBack = true
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				if !strictBack {
					t.Fatalf("the strict policy was not decided by Redis within 10s of the restart (errors so far %d)", errs.total())
				}

				var codes []int
				before := errs.total()
				for range 4 {
					w, _ := timedServe(h, outageGet("10.8.8.8", "X-Strict", "1"))
					if !outageHasLimitHeaders(w) {
						t.Errorf("after the restart: status %d without rate-limit headers", w.Code)
					}
					codes = append(codes, w.Code)
				}
				if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) || errs.total() != before {
					t.Errorf("fresh identity on 3/h after the restart: %v with %d store errors, want %v with none", codes, errs.total()-before, want)
				}
				admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
				ctx := context.Background()
				key := "rl:{ip:10.8.8.8}:" + strict.ID()
				if n, err := admin.Exists(ctx, key).Result(); err != nil || n != 1 {
					t.Errorf("EXISTS %s = %d, %v: the counts are not in the restarted Redis", key, n, err)
				}
				if stats, err := admin.Info(ctx, "commandstats").Result(); err != nil || !strings.Contains(stats, "cmdstat_eval:") {
					t.Errorf("the restarted Redis never ran EVAL (script reloaded after NOSCRIPT): %v\n%s", err, stats)
				}
				_ = admin.Close()

				closeClient()
				if n := outageWaitGoroutines(base + 3); n > base+3 {
					buf := make([]byte, 1<<16)
					t.Errorf("%d goroutines after the run, %d before: leak?\n%s", n, base, buf[:runtime.Stack(buf, true)])
				} else {
					t.Logf("goroutines: %d before the client, %d after closing it", base, n)
				}
			})
		}
	}
}

// outageLimiter returns a Limiter of p on a Redis store over client, with the
// given timeout, its store errors counted in errs and logged to outageLogger,
// no holding (the hang guards measure the store's share of a request's
// time; a held request waits on purpose, see hold_test.go), and opts on
// top.
func outageLimiter(t *testing.T, client redis.UniversalClient, p *ratelimit.Policy, timeout time.Duration, errs *outageErrCounter, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	st, err := store.NewRedis(client)
	if err != nil {
		t.Fatal(err)
	}
	base := []ratelimit.Option{ratelimit.WithTimeout(timeout), ratelimit.WithLogger(outageLogger), ratelimit.WithErrorHook(errs.hook), ratelimit.WithMaxDelay(0)}
	lim, err := ratelimit.New(st, p, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// outageWarm loads the policies' scripts into Redis (the first call of a
// policy on a server sends the whole script), with a generous deadline, so
// that a loaded machine does not make the healthy phase's first calls miss
// a short timeout.
func outageWarm(t *testing.T, client redis.UniversalClient, ps ...*ratelimit.Policy) {
	t.Helper()
	st, err := store.NewRedis(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range ps {
		if _, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{"warm-up"}}); err != nil {
			t.Fatalf("warming up %s: %v", p.Name(), err)
		}
	}
}
