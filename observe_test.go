package ratelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

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
		ratelimit.WithCircuitBreaker(1, time.Second), ratelimit.WithLogger(discardLogger), ratelimit.WithFailureMode(ratelimit.FailOpen))
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
			kinds = append(kinds, e.Op+":"+e.ErrorKind)
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
