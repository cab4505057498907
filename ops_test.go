package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestRealWaitInLine: 20 Wait callers on "5/s" against a real Redis, in
// real time, are all released, in about 3s (4 windows of 5), and no window
// shorter than a second by a generous 200ms holds more than 5 (releases
// are measured on this process's clock, after Redis's).
func TestRealWaitInLine(t *testing.T) {
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	lim := newLimiter(t, mustRedis(t, c), ratelimit.MustParsePolicy("5/s", ratelimit.Named("realwait")))
	start := time.Now()
	var mu sync.Mutex
	var released []time.Time
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if d, err := lim.Wait(ctx, "job:realwait"); err != nil || !d.Allowed {
				t.Errorf("Wait: %+v %v", d, err)
				return
			}
			mu.Lock()
			released = append(released, time.Now())
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("20 waiters on 5/s released in %s", took)
	if len(released) != 20 || took < 2500*time.Millisecond || took > 8*time.Second {
		t.Fatalf("%d released in %s, want 20 in about 3s", len(released), took)
	}
	checkWindows(t, released, 800*time.Millisecond, 5)
}

// TestAllowUpTo grants exactly what is left across three limits and two
// keys, charges it, and grants 0 (a denial with the wait for one unit) once
// nothing is left.
func TestAllowUpTo(t *testing.T) {
	mem, clk := memoryStore()
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("5/s, 8/m, 20/h"))
	ctx := context.Background()
	lim.AllowN(ctx, 3, "a")
	lim.AllowN(ctx, 4, "b")
	clk.Advance(1500 * time.Millisecond) // the per-second limit has room again
	// a: 5 left this minute; b: 4. Both: 4.
	granted, d, err := lim.AllowUpTo(ctx, 10, "a", "b")
	if err != nil || granted != 4 || !d.Allowed || d.Granted != 4 {
		t.Fatalf("AllowUpTo(10): granted %d, %+v, %v; want 4", granted, d, err)
	}
	if g, d, _ := lim.AllowUpTo(ctx, 10, "a", "b"); g != 0 || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("AllowUpTo with nothing left: granted %d, %+v; want 0 and a wait", g, d)
	}
	if g, _, _ := lim.AllowUpTo(ctx, 10, "a"); g != 1 {
		t.Fatalf("a alone: granted %d, want its last unit", g)
	}
	if _, _, err := lim.AllowUpTo(ctx, 0, "a"); err == nil {
		t.Fatal("AllowUpTo(0) accepted")
	}
	bare := newLimiter(t, storeFunc(func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		return ratelimit.Decision{}, nil
	}), ratelimit.MustParsePolicy("5/s"))
	if _, _, err := bare.AllowUpTo(ctx, 3, "a"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("AllowUpTo on a store without it: %v", err)
	}
}

// TestIdempotencyKey: a request repeated with the same Idempotency-Key is
// charged once and answered with its first decision, at most MaxRepeats
// times; then it is charged like any request. Another key value, or none,
// is charged.
func TestIdempotencyKey(t *testing.T) {
	for name, s := range map[string]ratelimit.Store{"memory": store.NewMemory(), "miniredis": miniredisStore(t)} {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t, s, ratelimit.MustParsePolicy("10/h"), ratelimit.WithIdempotencyKey("Idempotency-Key"))
			var runs atomic.Int64
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				res, _ := ratelimit.FromContext(r.Context())
				w.Header().Set("X-Repeated", map[bool]string{true: "yes", false: "no"}[res.Decision.Repeated])
			}))
			send := func(key string) *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				r := getFrom(ipA)
				if key != "" {
					r.Header.Set("Idempotency-Key", key)
				}
				h.ServeHTTP(w, r)
				return w
			}
			first := send("order-17")
			for i := 0; i < ratelimit.MaxRepeats; i++ {
				w := send("order-17")
				if w.Header().Get("X-Repeated") != "yes" || w.Header().Get("RateLimit") != first.Header().Get("RateLimit") {
					t.Fatalf("repeat %d: repeated %q, RateLimit %q; want the first decision %q", i, w.Header().Get("X-Repeated"), w.Header().Get("RateLimit"), first.Header().Get("RateLimit"))
				}
			}
			if w := send("order-17"); w.Header().Get("X-Repeated") != "no" {
				t.Fatal("a repeat beyond MaxRepeats was not charged: reusing an ID is a free pass")
			}
			send("order-18")
			send("")
			if d, _ := lim.AllowN(context.Background(), 0, "ip:203.0.113.7"); d.Remaining != 6 {
				t.Fatalf("%d left, want 6: charged for order-17 twice (first, and beyond the repeats), order-18 and the request without a key", d.Remaining)
			}
			if runs.Load() != 7 {
				t.Fatalf("the handler ran %d times, want 7: every repeat runs it", runs.Load())
			}
		})
	}
}

// TestIdempotencyReplayDuringBlock: a block (BlockFor) holds against
// replays of Idempotency-Keys admitted before it: no handler runs for the
// identity until the block ends.
func TestIdempotencyReplayDuringBlock(t *testing.T) {
	mr := miniredis.RunT(t)
	mini, err := store.NewRedis(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]ratelimit.Store{"memory": store.NewMemory(), "miniredis": mini} {
		t.Run(name, func(t *testing.T) {
			lim := newLimiter(t, s, ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(time.Hour)), ratelimit.WithIdempotencyKey("Idempotency-Key"))
			var runs atomic.Int64
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
			send := func(key string) int {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, getFrom(ipA, "Idempotency-Key", key))
				return w.Code
			}
			for i, want := range []int{200, 200, 429} { // the third starts the hour's block
				if code := send(fmt.Sprintf("order-%d", i)); code != want {
					t.Fatalf("step %d: %d, want %d", i, code, want)
				}
			}
			before := runs.Load()
			for i := 0; i < 12; i++ {
				if code := send(fmt.Sprintf("order-%d", i%2)); code != http.StatusTooManyRequests {
					t.Fatalf("step %d: replay of an admitted key during the block answered %d", i+3, code)
				}
			}
			if runs.Load() != before {
				t.Fatalf("the handler ran %d times during the block, want 0", runs.Load()-before)
			}
		})
	}
}

// TestRefundIf: with WithRefundIf counting only failures, successful
// requests are given back; the status is seen through Flush and
// ResponseController.
func TestRefundIf(t *testing.T) {
	mem, _ := memoryStore()
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("3/h"),
		ratelimit.WithRefundIf(func(_ *http.Request, status int) bool { return status < 400 }))
	fail := false
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush through the status writer: %v", err)
		}
		io.WriteString(w, "welcome")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	// The refund runs after the handler returns, before the response ends:
	// reading each body to its end orders the next request after it.
	get := func() int {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; i < 10; i++ { // successes: refunded, never limited
		if code := get(); code != 200 {
			t.Fatalf("success %d: %d", i, code)
		}
	}
	fail = true
	codes := []int{}
	for i := 0; i < 4; i++ {
		codes = append(codes, get())
	}
	if want := []int{401, 401, 401, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("failures: statuses %v, want %v (only failures count)", codes, want)
	}
}

func miniredisStore(t *testing.T) *store.Redis {
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { c.Close() })
	return mustRedis(t, c)
}

// TestRefundAndReset: Limiter.Refund gives a charge back once, whoever
// asks; Reset forgets keys (penalty included); both say ErrUnsupported on
// a store without them.
func TestRefundAndReset(t *testing.T) {
	mem, _ := memoryStore()
	p := ratelimit.MustParsePolicy("2/h", ratelimit.BlockFor(time.Hour))
	lim := newLimiter(t, mem, p)
	ctx := context.Background()
	d1, _ := lim.Allow(ctx, "user:x")
	lim.Allow(ctx, "user:x")
	if err := lim.Refund(ctx, d1); err != nil {
		t.Fatal(err)
	}
	copyOfD1 := d1
	if err := lim.Refund(ctx, copyOfD1); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowN(ctx, 0, "user:x"); d.Remaining != 1 {
		t.Fatalf("%d left after refunding one charge twice, want 1 (refunded once)", d.Remaining)
	}
	lim.Allow(ctx, "user:x")
	if d, _ := lim.Allow(ctx, "user:x"); d.Allowed || d.RetryAfter != time.Hour {
		t.Fatalf("over the limit: %+v, want blocked for 1h", d)
	}
	if err := lim.Reset(ctx, "user:x"); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Allow(ctx, "user:x"); !d.Allowed {
		t.Fatalf("after Reset: %+v, want the block lifted and a fresh budget", d)
	}
	bare := newLimiter(t, storeFunc(func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		return mem.Take(ctx, req)
	}), p)
	d, _ := bare.Allow(ctx, "user:y")
	if err := bare.Reset(ctx, "user:y"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Reset on a store without it: %v", err)
	}
	if err := bare.Refund(ctx, d); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Refund on a store without it: %v", err)
	}
	if _, err := ratelimit.New(storeFunc(mem.Take), p, ratelimit.WithRefundIf(func(*http.Request, int) bool { return true })); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WithRefundIf on a store that cannot refund: %v", err)
	}
}

// TestBlockForHeaders: once denied, a key stays denied for the penalty:
// Retry-After and the RateLimit header's t say so.
func TestBlockForHeaders(t *testing.T) {
	mem, clk := memoryStore()
	lim := newLimiter(t, mem, ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(10*time.Minute), ratelimit.Named("login")))
	h := lim.Handler(okHandler)
	for i := 0; i < 2; i++ {
		h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, getFrom(ipA))
	if w.Code != 429 || w.Header().Get("Retry-After") != "600" || w.Header().Get("RateLimit") != `"login-1m";r=0;t=600` {
		t.Fatalf("denied: %d, Retry-After %q, RateLimit %q; want 600s", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
	clk.Advance(2 * time.Minute) // the minute limit has room, the block runs on
	w = httptest.NewRecorder()
	h.ServeHTTP(w, getFrom(ipA))
	if w.Code != 429 || w.Header().Get("Retry-After") != "480" {
		t.Fatalf("blocked: %d, Retry-After %q; want 429 and 480s", w.Code, w.Header().Get("Retry-After"))
	}
	clk.Advance(8 * time.Minute)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, getFrom(ipA))
	if w.Code != 200 {
		t.Fatalf("after the block: %d", w.Code)
	}
}

// TestSkipAndFirstOf: WithSkip exempts health checkers (ClientIn);
// FirstOf limits by the API key when there is one, else by IP, and the 429
// body names which kind ran out.
func TestSkipAndFirstOf(t *testing.T) {
	internal, err := ratelimit.ClientIn(nil, "10.0.0.0/8", "::1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ratelimit.ClientIn(nil, "10.0.0.0/33"); err == nil {
		t.Fatal("ClientIn accepted a bad CIDR")
	}
	byKey, _ := ratelimit.ByHeader("X-API-Key")
	byIP, _ := ratelimit.ByIP()
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/h"),
		ratelimit.WithIdentifiers(ratelimit.FirstOf(byKey, byIP)), ratelimit.WithSkip(internal))
	h := lim.Handler(okHandler)
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := 0; i < 5; i++ {
		if w := serve(getFrom("10.1.2.3:5555")); w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("internal client %d: %d, RateLimit %q; want served unlimited", i, w.Code, w.Header().Get("RateLimit"))
		}
	}
	serve(getFrom(ipA))
	if w := serve(getFrom(ipA)); w.Code != 429 || !strings.Contains(w.Body.String(), `"identifier":"ip"`) {
		t.Fatalf("second anonymous request: %d %s; want 429 naming ip", w.Code, w.Body)
	}
	if w := serve(getFrom(ipA, "X-API-Key", "k1")); w.Code != 200 {
		t.Fatalf("a key holder on the same IP: %d, want its own budget", w.Code)
	}
	w := serve(getFrom(ipA, "X-API-Key", "k1"))
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"identifier":"key"`) || strings.Contains(w.Body.String(), "k1") {
		t.Fatalf("key holder's second request: %d %s; want 429 naming key, not its value", w.Code, w.Body)
	}
}

// recObserver records what a Limiter reports.
type recObserver struct {
	mu        sync.Mutex
	decisions []ratelimit.DecisionEvent
	stores    []ratelimit.StoreEvent
	circuits  []ratelimit.CircuitEvent
}

func (o *recObserver) ObserveDecision(e ratelimit.DecisionEvent) {
	o.mu.Lock()
	o.decisions = append(o.decisions, e)
	o.mu.Unlock()
}

func (o *recObserver) ObserveStore(e ratelimit.StoreEvent) {
	o.mu.Lock()
	o.stores = append(o.stores, e)
	o.mu.Unlock()
}

func (o *recObserver) ObserveCircuit(e ratelimit.CircuitEvent) {
	o.mu.Lock()
	o.circuits = append(o.circuits, e)
	o.mu.Unlock()
}

// TestObservers: every observer sees every decision with its outcome,
// every store call with its error kind, and the circuit's changes; the
// decision hook keeps working beside them.
func TestObservers(t *testing.T) {
	clk := newTestClock()
	s := &panicStore{mem: store.NewMemory(store.WithClock(clk.Now))}
	a, b := &recObserver{}, &recObserver{}
	var hooked atomic.Int64
	lim := newLimiter(t, s, ratelimit.MustParsePolicy("1/h"), ratelimit.WithObserver(a), ratelimit.WithObserver(b),
		ratelimit.WithDecisionHook(func(*http.Request, ratelimit.Result) { hooked.Add(1) }),
		ratelimit.WithCircuitBreaker(1, time.Second), ratelimit.WithLogger(discardLogger))
	ratelimit.SetLogClock(lim, clk.Now)
	h := lim.Handler(okHandler)
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) // allowed
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) // denied
	s.down.Store(true)
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) // failed open
	clk.Advance(time.Second)
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) // failed open; failures span 1s: the circuit opens
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) // answered by the open circuit
	s.down.Store(false)
	clk.Advance(time.Second)
	h.ServeHTTP(httptest.NewRecorder(), getFrom(ipA)) // the probe: denied (1/h), the circuit closes
	for _, o := range []*recObserver{a, b} {
		var outcomes []string
		for _, e := range o.decisions {
			outcomes = append(outcomes, e.Outcome.String())
		}
		if got := strings.Join(outcomes, " "); got != "allowed denied failed_open failed_open failed_open denied" {
			t.Fatalf("outcomes %q", got)
		}
		var kinds []string
		for _, e := range o.stores {
			kinds = append(kinds, e.Op+":"+e.ErrorKind())
		}
		if got := strings.Join(kinds, " "); got != "take: take: take:error take:error take:circuit_open take:" {
			t.Fatalf("store events %q", got)
		}
		if len(o.circuits) != 2 || !o.circuits[0].Open || o.circuits[1].Open {
			t.Fatalf("circuit events %+v, want open then closed", o.circuits)
		}
	}
	if hooked.Load() != 6 {
		t.Fatalf("decision hook called %d times, want 6", hooked.Load())
	}
}

// TestObserverSeesEveryClose: a call that began before the circuit opened
// and succeeds after closes it; observers hear of that close too.
func TestObserverSeesEveryClose(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	mem := store.NewMemory()
	s := storeFunc(func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		if calls.Add(1) == 1 {
			<-release // the slow call: answers after the circuit opened
			return mem.Take(ctx, req)
		}
		return ratelimit.Decision{}, errBoom
	})
	o := &recObserver{}
	lim := newLimiter(t, s, ratelimit.MustParsePolicy("5/h"), ratelimit.WithObserver(o),
		ratelimit.WithCircuitBreaker(1, time.Hour), ratelimit.WithLogger(discardLogger), ratelimit.WithTimeout(10*time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		lim.Allow(context.Background(), "a")
	}()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	lim.Allow(context.Background(), "b") // fails: the circuit opens
	close(release)
	<-done
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.circuits) != 2 || !o.circuits[0].Open || o.circuits[1].Open {
		t.Fatalf("circuit events %+v, want open then closed", o.circuits)
	}
}
