package ratelimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

// These tests pin the safe default: a Limiter given only a store that can
// fail and a policy keeps limiting, per process, with the store's own
// fallback while the store fails; unlimited is only ever what the user
// asked for.

// namedFallback is a Store that names a fallback (ratelimit.FallbackStore).
type namedFallback struct {
	ratelimit.Store
	fallback ratelimit.Store
}

func (s *namedFallback) Fallback() ratelimit.Store { return s.fallback }

// countingStore counts the calls that reach a store.
type countingStore struct {
	ratelimit.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, req)
}

// TestDefaultFallback: which store, or which failure mode, decides while
// the store fails, for every way of configuring it.
func TestDefaultFallback(t *testing.T) {
	limited := [][]check{isAllowed, isAllowed, isDenied} // 2/h, counted by a fallback
	unlimited := [][]check{isUnlimited, isUnlimited, isUnlimited}
	refused := [][]check{isUnavailable, isUnavailable, isUnavailable}
	tests := []struct {
		name  string
		store func(fs *flakyStore, named ratelimit.Store) ratelimit.Store
		opts  func(given ratelimit.Store) []ratelimit.Option
		want  [][]check // of each request
		named bool      // the store's fallback decided
		given bool      // the fallback given with WithFallback decided
	}{
		{name: "the store's fallback by default", want: limited, named: true},
		{name: "FailOpen: unlimited, as asked", want: unlimited,
			opts: func(ratelimit.Store) []ratelimit.Option {
				return []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailOpen)}
			}},
		{name: "FailClosed: refused, as asked", want: refused,
			opts: func(ratelimit.Store) []ratelimit.Option {
				return []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed)}
			}},
		{name: "FailClosed and WithFallback: the fallback given", want: limited, given: true,
			opts: func(given ratelimit.Store) []ratelimit.Option {
				return []ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithFallback(given)}
			}},
		{name: "WithFallback replaces the store's", want: limited, given: true,
			opts: func(given ratelimit.Store) []ratelimit.Option {
				return []ratelimit.Option{ratelimit.WithFallback(given)}
			}},
		{name: "the store names no fallback: refused", want: refused,
			store: func(fs *flakyStore, _ ratelimit.Store) ratelimit.Store { return &namedFallback{Store: fs} }},
		{name: "the store is no FallbackStore: refused", want: refused,
			store: func(fs *flakyStore, _ ratelimit.Store) ratelimit.Store { return fs }},
		{name: "a deny cache names its store's fallback", want: limited, named: true,
			store: func(_ *flakyStore, named ratelimit.Store) ratelimit.Store { return store.NewDenyCache(named) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &flakyStore{mem: store.NewMemory()}
			fs.down.Store(true)
			namedFB := &countingStore{Store: store.NewMemory()}
			givenFB := &countingStore{Store: store.NewMemory()}
			var st ratelimit.Store = &namedFallback{Store: fs, fallback: namedFB}
			if tt.store != nil {
				st = tt.store(fs, st)
			}
			opts := []ratelimit.Option{ratelimit.WithLogger(discardLogger)}
			if tt.opts != nil {
				opts = append(opts, tt.opts(givenFB)...)
			}
			h := newLimiter(t, st, ratelimit.MustParsePolicy("2/h"), opts...).Handler(okHandler)
			for i, want := range tt.want {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, getFrom(ipA))
				t.Run(fmt.Sprintf("step %d", i), func(t *testing.T) {
					for _, c := range want {
						c(t, w)
					}
				})
			}
			if got := fs.calls.Load(); got != int64(len(tt.want)) {
				t.Errorf("the store was asked %d times, want %d", got, len(tt.want))
			}
			if got, want := namedFB.calls.Load() > 0, tt.named; got != want {
				t.Errorf("the store's fallback asked: %v, want %v", got, want)
			}
			if got, want := givenFB.calls.Load() > 0, tt.given; got != want {
				t.Errorf("the fallback given asked: %v, want %v", got, want)
			}
		})
	}
}

// selfFallback names itself as its fallback.
type selfFallback struct{ flakyStore }

func (s *selfFallback) Fallback() ratelimit.Store { return s }

// TestDefaultFallbackIsTheStore: New refuses a store that names itself.
func TestDefaultFallbackIsTheStore(t *testing.T) {
	_, err := ratelimit.New(&selfFallback{}, ratelimit.MustParsePolicy("1/s"))
	if err == nil || !strings.Contains(err.Error(), "is the store itself") {
		t.Fatalf("New = %v, want an error saying the fallback is the store itself", err)
	}
}

// captureDefaultLog makes slog.Default() record into the returned
// recorder until the test ends: for Limiters built with no options.
func captureDefaultLog(t *testing.T) *logRecorder {
	rec := &logRecorder{}
	old := slog.Default()
	slog.SetDefault(slog.New(rec))
	t.Cleanup(func() { slog.SetDefault(old) })
	return rec
}

// codesOf serves n requests from remote through h and returns their
// statuses; every response must carry the rate-limit headers, and every
// 429 a Retry-After.
func codesOf(t *testing.T, h http.Handler, remote string, n int) []int {
	t.Helper()
	var codes []int
	for i := range n {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, getFrom(remote))
		if w.Header().Get("RateLimit") == "" || w.Header().Get("RateLimit-Policy") == "" ||
			w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Errorf("%s, request %d: status %d with headers %v; want a store's decision, with its headers", remote, i, w.Code, w.Header())
		}
		codes = append(codes, w.Code)
	}
	return codes
}

// admitted returns n 200s then m 429s.
func admitted(n, m int) []int {
	return append(slices.Repeat([]int{http.StatusOK}, n), slices.Repeat([]int{http.StatusTooManyRequests}, m)...)
}

// TestDefaultFallbackMiniredis: a Limiter given only a Redis store and a
// policy keeps limiting when Redis goes away (miniredis closed), each
// identity counted by the process's fallback; when Redis is back, Redis
// decides again. The log says so in two lines. The Limiter's clock (its
// circuit and its log) is a controlled one; Redis's is real.
func TestDefaultFallbackMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	// The client a careful service builds: a refused connection fails at
	// once instead of retrying within the timeout (see store/redis).
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), DialerRetries: 1, DialerRetryTimeout: time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	st := mustRedis(t, client)
	logs := captureDefaultLog(t)
	p := ratelimit.MustParsePolicy("3/h", ratelimit.Named("api"))
	// patient: under a loaded -race run a call to the live miniredis can
	// pass the default 100ms, and the fallback would count it; a closed
	// one fails at once whatever the timeout.
	lim, err := ratelimit.New(st, p, patient)
	if err != nil {
		t.Fatal(err)
	}
	clk := newTestClock()
	ratelimit.SetLogClock(lim, clk.Now)
	h := lim.Handler(okHandler)
	inRedis := func(ip string) bool { return mr.Exists("rl:{ip:" + ip + "}:" + p.ID()) }

	if got := codesOf(t, h, "10.0.0.1:1", 4); !slices.Equal(got, admitted(3, 1)) || !inRedis("10.0.0.1") {
		t.Fatalf("Redis up: %v (counted in Redis: %v), want %v", got, inRedis("10.0.0.1"), admitted(3, 1))
	}
	mr.Close()
	for i, ip := range []string{"10.0.0.2", "10.0.0.1"} {
		clk.Advance(400 * time.Millisecond) // failures spanning the cooldown open the circuit
		// The fallback counts in this process from the outage on: 10.0.0.1
		// starts afresh (each server admits up to the limit).
		if got := codesOf(t, h, ip+":1", 4); !slices.Equal(got, admitted(3, 1)) {
			t.Errorf("step %d: Redis down, %s: %v, want %v", i, ip, got, admitted(3, 1))
		}
	}
	if recs := logs.all(); len(recs) != 1 || recs[0].Level != slog.LevelError || !strings.HasPrefix(recs[0].Message, msgFailing+actFallback) {
		t.Fatalf("log during the outage: %v, want one line: ERROR %s%s…", messages(recs), msgFailing, actFallback)
	}

	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	back := false
	for i := 0; i < 10 && !back; i++ {
		clk.Advance(2 * ratelimit.DefaultCircuitCooldown) // an open circuit probes
		codesOf(t, h, "10.0.0.3:1", 1)
		back = inRedis("10.0.0.3")
	}
	if !back {
		t.Fatal("Redis is back but the Limiter does not ask it again")
	}
	if got := codesOf(t, h, "10.0.0.4:1", 4); !slices.Equal(got, admitted(3, 1)) || !inRedis("10.0.0.4") {
		t.Errorf("Redis back: %v (counted in Redis: %v), want %v", got, inRedis("10.0.0.4"), admitted(3, 1))
	}
	clk.Advance(time.Second)
	codesOf(t, h, "10.0.0.4:1", 1)
	recs := logs.all()
	if len(recs) != 2 {
		t.Fatalf("log: %v, want two lines (failing, answers again)", messages(recs))
	}
	for _, b := range checkLine(recs[1], logLine{level: slog.LevelInfo, msg: msgAnswers, counts: map[string]int64{"unlimited": 0, "refused": 0}}) {
		t.Error(b)
	}
	if v, _ := attrOf(recs[1], "fallback"); v.Int64() < 8 {
		t.Errorf("answers-again line: fallback = %v, want at least the 8 requests of the outage", v)
	}
}

// TestDefaultFallbackRealRedis kills a real redis-server under a Limiter
// built with only its Redis store (a client with go-redis's defaults) and
// a policy: every request is still limited, by this process's fallback,
// with its headers; after a restart Redis decides again; the log has one
// line for the failure and one for the recovery. Latencies are logged,
// never compared.
func TestDefaultFallbackRealRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	admin := srv.Client(t)
	st := mustRedis(t, client)
	logs := captureDefaultLog(t)
	p := ratelimit.MustParsePolicy("10/h", ratelimit.Named("kill"))
	lim, err := ratelimit.New(st, p)
	if err != nil {
		t.Fatal(err)
	}
	h := lim.Handler(okHandler)
	ctx := context.Background()
	inRedis := func(ip string) bool {
		n, err := admin.Exists(ctx, "rl:{ip:"+ip+"}:"+p.ID()).Result()
		return err == nil && n == 1
	}

	if got := codesOf(t, h, "10.0.0.1:1", 11); !slices.Equal(got, admitted(10, 1)) || !inRedis("10.0.0.1") {
		t.Fatalf("Redis up: %v (counted in Redis: %v), want %v", got, inRedis("10.0.0.1"), admitted(10, 1))
	}
	srv.Kill(t)
	var lats []time.Duration
	var codes []int
	for i := range 15 {
		w, took := timedServe(h, getFrom("10.0.0.2:1"))
		lats = append(lats, took)
		codes = append(codes, w.Code)
		if w.Header().Get("RateLimit") == "" || w.Header().Get("RateLimit-Policy") == "" {
			t.Errorf("Redis down, request %d: status %d without rate-limit headers", i, w.Code)
		}
	}
	if !slices.Equal(codes, admitted(10, 5)) {
		t.Errorf("Redis down: %v, want %v: the routes must stay limited", codes, admitted(10, 5))
	}
	slow := 0
	for _, d := range lats {
		if d >= ratelimit.DefaultTimeout {
			slow++
		}
	}
	t.Logf("Redis down: 15 requests, latency p50 %v, max %v; %d waited the whole timeout (%v) before the circuit opened",
		percentile(lats, 0.5), percentile(lats, 1), slow, ratelimit.DefaultTimeout)
	if recs := logs.all(); len(recs) != 1 || recs[0].Level != slog.LevelError || !strings.HasPrefix(recs[0].Message, msgFailing+actFallback) {
		t.Fatalf("log during the outage: %v, want one line: ERROR %s%s…", messages(recs), msgFailing, actFallback)
	}

	srv.Restart(t)
	restarted := time.Now()
	for !inRedis("10.0.0.3") {
		if time.Since(restarted) > 5*time.Second {
			t.Fatal("Redis restarted 5s ago, and the Limiter still does not ask it")
		}
		codesOf(t, h, "10.0.0.3:1", 1)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("Redis decides again %v after the restart (circuit cooldown %v)", time.Since(restarted).Round(time.Millisecond), ratelimit.DefaultCircuitCooldown)
	if got := codesOf(t, h, "10.0.0.4:1", 11); !slices.Equal(got, admitted(10, 1)) || !inRedis("10.0.0.4") {
		t.Errorf("Redis back: %v (counted in Redis: %v), want %v", got, inRedis("10.0.0.4"), admitted(10, 1))
	}
	for len(logs.all()) < 2 && time.Since(restarted) < 10*time.Second {
		codesOf(t, h, "10.0.0.4:1", 1)
		time.Sleep(20 * time.Millisecond)
	}
	recs := logs.all()
	if len(recs) != 2 {
		t.Fatalf("log: %v, want two lines (failing, answers again)", messages(recs))
	}
	for _, b := range checkLine(recs[1], logLine{level: slog.LevelInfo, msg: msgAnswers, counts: map[string]int64{"unlimited": 0, "refused": 0}}) {
		t.Error(b)
	}
	if v, _ := attrOf(recs[1], "fallback"); v.Int64() < 15 {
		t.Errorf("answers-again line: fallback = %v, want at least the 15 requests of the outage", v)
	}
	for _, r := range recs {
		t.Logf("logged: %s %s %s", r.Level, r.Message, attrsText(r))
	}
}

// attrsText writes r's attributes as key=value pairs.
func attrsText(r slog.Record) string {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	return strings.TrimSpace(b.String())
}
