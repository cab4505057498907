package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestConcurrentNeverExceeded: 64 goroutines send slow requests through a
// Handler of "1000/s, 5 concurrent" for one client, on memory, miniredis
// and a real Redis; some handlers panic, some clients leave before the
// answer. A brute force over the handlers' start and end times finds no
// instant with more than 5 running, and every slot is free at the end.
func TestConcurrentNeverExceeded(t *testing.T) {
	for name, mk := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			st, _ := mk(t)
			// A store call that timed out may have taken a slot the
			// Limiter never learns of (it lapses after its lease): under
			// the race detector, a generous timeout keeps the count exact.
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("1000/s, 5 concurrent", ratelimit.Named("reports")),
				ratelimit.WithTimeout(10*time.Second))
			type span struct{ start, end time.Time }
			var mu sync.Mutex
			var spans []span
			h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s := span{start: time.Now()}
				defer func() {
					s.end = time.Now()
					mu.Lock()
					spans = append(spans, s)
					mu.Unlock()
				}()
				select {
				case <-time.After(2 * time.Millisecond):
				case <-r.Context().Done(): // the client left
					return
				}
				if r.URL.Query().Get("panic") == "1" {
					panic(http.ErrAbortHandler)
				}
			}))
			const workers, each = 64, 15
			var wg sync.WaitGroup
			var denied, admitted sync.Map
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						url := "/report"
						ctx, cancel := context.WithCancel(context.Background())
						switch (g + i) % 7 {
						case 0:
							url += "?panic=1"
						case 1:
							cancel() // a client that left
						}
						rec := httptest.NewRecorder()
						func() {
							defer func() { _ = recover() }()
							h.ServeHTTP(rec, httptest.NewRequest("GET", url, nil).WithContext(ctx))
						}()
						cancel()
						if rec.Code == http.StatusTooManyRequests {
							denied.Store(g*each+i, rec)
						} else {
							admitted.Store(g*each+i, true)
						}
					}
				}()
			}
			wg.Wait()
			n, d := 0, 0
			admitted.Range(func(any, any) bool { n++; return true })
			denied.Range(func(_, v any) bool {
				d++
				rec := v.(*httptest.ResponseRecorder)
				h := rec.Header()
				if !strings.Contains(rec.Body.String(), "reports-concurrent\\\" (5 requests in flight) reached") {
					t.Errorf("a denial by the concurrent limit says %q", rec.Body.String())
					return false
				}
				if h.Get("Retry-After") != "" || !strings.Contains(h.Get("RateLimit"), `"reports-concurrent";r=0`) || strings.Contains(h.Get("RateLimit"), ";t=") {
					t.Errorf("a denial by the concurrent limit: Retry-After %q, RateLimit %q; want none, and r=0 without t", h.Get("Retry-After"), h.Get("RateLimit"))
					return false
				}
				return true
			})
			if n == 0 || d == 0 {
				t.Fatalf("%d admitted, %d denied: want both", n, d)
			}
			most := 0
			for _, a := range spans {
				in := 0
				for _, b := range spans {
					if !b.start.After(a.start) && b.end.After(a.start) {
						in++
					}
				}
				most = max(most, in)
			}
			t.Logf("%d handlers ran, %d requests denied; most running at once: %d", len(spans), d, most)
			if most > 5 {
				t.Fatalf("%d handlers ran at once under 5 concurrent", most)
			}
			if dd, err := lim.AllowN(context.Background(), 0, "ip:192.0.2.1"); err != nil || dd.Limits[1].Remaining != 5 {
				t.Fatalf("after every request ended: %+v %v; want all 5 slots free", dd.Limits, err)
			}
		})
	}
}

// TestConcurrentSlotLapses: a slot taken and never released (its process
// died) holds for half its lease and frees itself within the lease;
// Release frees one at once, once; the policy header names the unit.
func TestConcurrentSlotLapses(t *testing.T) {
	ctx := context.Background()
	for name, mk := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			st, clk := mk(t)
			pol := ratelimit.MustParsePolicy("2 concurrent lease 10s", ratelimit.Named("jobs"))
			lim := newLimiter(t, st, pol)
			a, _ := lim.Allow(ctx, "k")
			b, _ := lim.Allow(ctx, "k")
			c, _ := lim.Allow(ctx, "k")
			if !a.Allowed || !b.Allowed || c.Allowed || !c.InFlight || c.RetryAfter <= 0 {
				t.Fatalf("step 1: %v %v %+v; want two slots then a denial in flight", a.Allowed, b.Allowed, c)
			}
			if err := lim.Release(ctx, a); err != nil {
				t.Fatal(err)
			}
			if err := lim.Release(ctx, a); err != nil { // once: frees nothing more
				t.Fatal(err)
			}
			d, _ := lim.Allow(ctx, "k")
			e, _ := lim.Allow(ctx, "k")
			if !d.Allowed || e.Allowed {
				t.Fatalf("step 2: after one release %v %v; want exactly one more", d.Allowed, e.Allowed)
			}
			// b and d are never released: they hold until their lease ends,
			// 10s after they were taken (the clock starts on an epoch's edge).
			clk.Advance(10*time.Second - time.Microsecond)
			if f, _ := lim.Allow(ctx, "k"); f.Allowed {
				t.Fatal("step 3: a slot lapsed before its lease ended")
			}
			clk.Advance(time.Microsecond)
			g, _ := lim.Allow(ctx, "k")
			h, _ := lim.Allow(ctx, "k")
			if !g.Allowed || !h.Allowed {
				t.Fatalf("step 4: a lease on, %v %v; want both slots back", g.Allowed, h.Allowed)
			}
			rec := httptest.NewRecorder()
			lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if got := withoutPK([]string{rec.Header().Get("RateLimit-Policy")})[0]; got != `"jobs-concurrent";q=2;qu="concurrent-requests"` {
				t.Fatalf("RateLimit-Policy %q", got)
			}
		})
	}
}

// TestConcurrentRenewed: a Handler renews its slot every quarter lease
// while the request runs, so a request longer than its lease keeps it:
// after each renewal the store's clock moves half a lease.
func TestConcurrentRenewed(t *testing.T) {
	for name, mk := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			st, clk := mk(t)
			renewed := make(chan struct{}, 16)
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("1 concurrent lease 1s", ratelimit.Named("long")),
				ratelimit.WithObserver(renewObserver(renewed)))
			finish, started := make(chan struct{}), make(chan struct{})
			h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				close(started)
				<-finish
			}))
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
			}()
			<-started
			for step := range 3 {
				select {
				case <-renewed:
				case <-time.After(10 * time.Second):
					t.Fatalf("step %d: no renewal", step)
				}
				clk.Advance(500 * time.Millisecond)
				if d, _ := lim.Allow(context.Background(), "ip:192.0.2.1"); d.Allowed {
					t.Fatalf("step %d: the running request's slot lapsed", step)
				}
			}
			close(finish)
			<-done
			if d, _ := lim.Allow(context.Background(), "ip:192.0.2.1"); !d.Allowed {
				t.Fatalf("after the request ended: %+v", d)
			}
		})
	}
}

type renewObserver chan struct{}

func (o renewObserver) ObserveDecision(ratelimit.DecisionEvent) {}
func (o renewObserver) ObserveCircuit(ratelimit.CircuitEvent)   {}
func (o renewObserver) ObserveStore(e ratelimit.StoreEvent) {
	if e.Op == "renew" && e.Err == nil {
		select {
		case o <- struct{}{}:
		default:
		}
	}
}

// TestParseConcurrent: the policy strings of concurrent limits.
func TestParseConcurrent(t *testing.T) {
	cases := []struct {
		in, want, err string
	}{
		{"10/s, 5 concurrent", "10/1s, 5 concurrent", ""},
		{"5 Concurrent lease 2m; 100/h", "5 concurrent lease 2m, 100/1h", ""},
		{"0 concurrent", "", "requests in flight"},
		{"5 concurrent lease 500ms", "", "lease"},
		{"5 concurrent soon", "", "want N concurrent"},
		{"5 concurrent, 6 concurrent", "", "at most one"},
	}
	for i, c := range cases {
		p, err := ratelimit.ParsePolicy(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("step %d: %q: error %v, want one saying %q", i, c.in, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("step %d: %q: %v", i, c.in, err)
		case c.err == "" && p.String() != c.want:
			t.Errorf("step %d: %q: String %q, want %q", i, c.in, p.String(), c.want)
		}
	}
	if _, err := ratelimit.NewPolicy("x", ratelimit.TokenBucket, ratelimit.Limit{Rate: 5, Period: time.Second}, ratelimit.Concurrent(2)); err != nil {
		t.Errorf("a concurrent limit beside a token bucket: %v", err)
	}
	if _, err := ratelimit.NewPolicy("x", ratelimit.SlidingWindow, ratelimit.Limit{Rate: 2, Concurrent: true, Burst: 1}); err == nil {
		t.Error("a concurrent limit with a burst accepted")
	}
}

// TestConcurrentDenialNotHeld: a denial in flight is answered at once,
// not held for a wait below the maximum delay as a rate limit's is (its
// RetryAfter, when an unrenewed slot could lapse, promises nothing): one
// store call, even 100ms before a lapse could come.
func TestConcurrentDenialNotHeld(t *testing.T) {
	st, clk := memoryStore()
	clk.Advance(15*time.Second - 100*time.Millisecond) // epochs of 15s (half the default lease) from an hour's start
	takes := make(chan struct{}, 8)
	lim := newLimiter(t, st, ratelimit.MustParsePolicy("1 concurrent", ratelimit.Named("one")),
		ratelimit.WithObserver(takeObserver(takes)))
	if d, _ := lim.Allow(context.Background(), "ip:192.0.2.1"); !d.Allowed {
		t.Fatal("the first slot was denied")
	}
	<-takes
	clk.Advance(15 * time.Second) // the slot's epoch is the one before: it could lapse in 100ms
	rec := httptest.NewRecorder()
	served := make(chan struct{})
	go func() {
		defer close(served)
		lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	}()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the denial in flight was held")
	}
	if rec.Code != http.StatusTooManyRequests || len(takes) != 1 {
		t.Fatalf("%d after %d store calls; want 429 after one", rec.Code, len(takes))
	}
}

type takeObserver chan struct{}

func (o takeObserver) ObserveDecision(ratelimit.DecisionEvent) {}
func (o takeObserver) ObserveCircuit(ratelimit.CircuitEvent)   {}
func (o takeObserver) ObserveStore(e ratelimit.StoreEvent) {
	if e.Op == "take" {
		o <- struct{}{}
	}
}

// TestConcurrentReplayTakesASlot: a replay of an idempotency key is no
// side door under a Concurrent limit: it is decided anew and needs a slot
// of its own, while the first request still holds the only one.
func TestConcurrentReplayTakesASlot(t *testing.T) {
	for name, mk := range settleBackends(t) {
		t.Run(name, func(t *testing.T) {
			st, _ := mk(t)
			lim := newLimiter(t, st, ratelimit.MustParsePolicy("100/h, 1 concurrent", ratelimit.Named("replay")),
				ratelimit.WithIdempotencyKey("Idempotency-Key"), ratelimit.WithTimeout(10*time.Second))
			started, finish := make(chan struct{}), make(chan struct{})
			h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				started <- struct{}{}
				<-finish
			}))
			get := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/", nil)
				r.Header.Set("Idempotency-Key", "order-7")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				return rec
			}
			done := make(chan int)
			go func() { done <- get().Code }()
			<-started
			replay := make(chan int, 1)
			go func() { replay <- get().Code }()
			select {
			case code := <-replay:
				if code != http.StatusTooManyRequests {
					t.Fatalf("step 1: a replay while the first holds the slot: %d, want 429", code)
				}
			case <-started:
				close(finish)
				t.Fatal("step 1: a replay ran while the first request held the only slot")
			}
			close(finish)
			if code := <-done; code != http.StatusOK {
				t.Fatalf("step 2: the first request: %d", code)
			}
			go func() { <-started }()
			if rec := get(); rec.Code != http.StatusOK {
				t.Fatalf("step 3: a replay once the slot is free: %d, want 200", rec.Code)
			}
		})
	}
}
