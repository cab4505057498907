package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// Wait until a job may run, rather than dropping it: Wait returns once the
// event is charged, in order of arrival under a policy that can reserve
// (here, the exact log of "2 per 100ms").
func ExampleLimiter_Wait() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/100ms"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for i, turn := range []time.Duration{0, 0, 100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		if _, err := lim.Wait(ctx, "job:reindex"); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("job %d started after its turn (%s): %v\n", i, turn, time.Since(start) >= turn)
	}
	// Output:
	// job 0 started after its turn (0s): true
	// job 1 started after its turn (0s): true
	// job 2 started after its turn (100ms): true
	// job 3 started after its turn (100ms): true
	// job 4 started after its turn (200ms): true
}

// WaitN refuses at once, charging nothing, a wait that would pass the
// context's deadline.
func ExampleLimiter_WaitN() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("10/m"))
	if err != nil {
		log.Fatal(err)
	}
	lim.AllowN(context.Background(), 10, "tenant:acme")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = lim.WaitN(ctx, 5, "tenant:acme")
	fmt.Println(err != nil, strings.Contains(fmt.Sprint(err), "deadline"))
	// Output: true true
}

// Hand out quota in chunks: AllowUpTo grants what is left, up to the ask,
// and charges exactly that.
func ExampleLimiter_AllowUpTo() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1000/m", ratelimit.Named("tokens")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, ask := range []int64{600, 600, 600} {
		granted, _, err := lim.AllowUpTo(ctx, ask, "llm:team-a")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("asked %d, granted %d\n", ask, granted)
	}
	// Output:
	// asked 600, granted 600
	// asked 600, granted 400
	// asked 600, granted 0
}

// Refund gives a charge back, exactly and once, for work that turned out
// not to count.
func ExampleLimiter_Refund() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("3/h"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	d, _ := lim.Allow(ctx, "export:acme")
	if err := lim.Refund(ctx, d); err != nil { // the export failed: it does not count
		log.Fatal(err)
	}
	lim.Refund(ctx, d) // a second refund of the same charge does nothing
	left, _ := lim.AllowN(ctx, 0, "export:acme")
	fmt.Println(left.Remaining)
	// Output: 3
}

// Reset forgets a key's counters, and its penalty: after a successful
// login, say.
func ExampleLimiter_Reset() {
	p := ratelimit.MustParsePolicy("3/15m", ratelimit.BlockFor(time.Hour))
	lim, err := ratelimit.New(store.NewMemory(), p)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		lim.Allow(ctx, "login:alice")
	}
	d, _ := lim.Allow(ctx, "login:alice")
	fmt.Println(d.Allowed, d.RetryAfter.Round(time.Minute))
	lim.Reset(ctx, "login:alice")
	d, _ = lim.Allow(ctx, "login:alice")
	fmt.Println(d.Allowed)
	// Output:
	// false 1h0m0s
	// true
}

// ResetPolicy resets keys under a policy chosen per request.
func ExampleLimiter_ResetPolicy() {
	free := ratelimit.MustParsePolicy("1/h", ratelimit.Named("free"))
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("100/h", ratelimit.Named("paid")),
		ratelimit.WithPolicyFunc(func(*http.Request) *ratelimit.Policy { return free }))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	send := func() int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	fmt.Print(send(), " ", send())
	lim.ResetPolicy(context.Background(), free, "ip:203.0.113.7")
	fmt.Println(" ", send())
	// Output: 200 429  200
}

// Hold requests for up to 100ms instead of refusing them: a leaky bucket
// with a queue. Six clients arrive at once; "2 per 100ms" serves two at
// once, holds two for their turn, and refuses the two that would wait
// longer.
func ExampleWithMaxDelay() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/100ms"), ratelimit.WithMaxDelay(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	start := time.Now()
	type result struct {
		code   int
		waited time.Duration
	}
	results := make(chan result, 6)
	for i := 0; i < 6; i++ {
		go func() {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = "203.0.113.7:4711"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			results <- result{w.Code, time.Since(start)}
		}()
	}
	served, held, refused := 0, 0, 0
	for i := 0; i < 6; i++ {
		switch r := <-results; {
		case r.code == http.StatusTooManyRequests:
			refused++
		case r.waited >= 100*time.Millisecond:
			held++
		default:
			served++
		}
	}
	fmt.Println(served+held, "served,", held >= 2, "(at least two held for their turn),", refused, "refused")
	// Output: 4 served, true (at least two held for their turn), 2 refused
}

// Count only failed logins: successes are refunded after the handler.
func ExampleWithRefundIf() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/15m"),
		ratelimit.WithRefundIf(func(_ *http.Request, status int) bool { return status < 400 }))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "wonderland" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	for _, pw := range []string{"wonderland", "wonderland", "nope", "wonderland", "nope", "nope"} {
		r := httptest.NewRequest(http.MethodPost, "/login?password="+pw, nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 200 401 200 401 429
}

// Charge a retried request once: the same Idempotency-Key gets the first
// decision again.
func ExampleWithIdempotencyKey() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("5/h"),
		ratelimit.WithIdempotencyKey("Idempotency-Key"))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		r.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Header().Get("RateLimit"))
	}
	// Output:
	// "default-1h";r=4;t=3600
	// "default-1h";r=4;t=3600
	// "default-1h";r=4;t=3600
}

// Exempt health checks from the internal network.
func ExampleClientIn() {
	internal, err := ratelimit.ClientIn(nil, "10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/h"), ratelimit.WithSkip(internal))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, from := range []string{"10.0.0.5:80", "10.0.0.5:80", "203.0.113.7:4711", "203.0.113.7:4711"} {
		r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		r.RemoteAddr = from
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 200 200 429
}

// Limit by API key when there is one, else by IP: key holders get their own
// budget instead of sharing their IP's.
func ExampleFirstOf() {
	byKey, _ := ratelimit.ByHeader("X-API-Key")
	byIP, _ := ratelimit.ByIP()
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/h"),
		ratelimit.WithIdentifiers(ratelimit.FirstOf(byKey, byIP)))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, key := range []string{"", "", "k-123", "k-123"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 429 200 429
}

// Handlers behind stacked Limiters see every Result, outermost first.
func ExampleAllFromContext() {
	st := store.NewMemory()
	global, _ := ratelimit.New(st, ratelimit.MustParsePolicy("100/m", ratelimit.Named("global")))
	login, _ := ratelimit.New(st, ratelimit.MustParsePolicy("5/m", ratelimit.Named("login")))
	h := global.Handler(login.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, res := range ratelimit.AllFromContext(r.Context()) {
			fmt.Println(res.Policy.Name(), res.Decision.Remaining)
		}
	})))
	r := httptest.NewRequest(http.MethodPost, "/login", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	h.ServeHTTP(httptest.NewRecorder(), r)
	// Output:
	// global 99
	// login 4
}

// countOutcomes is an Observer that counts decisions by outcome.
type countOutcomes map[string]int

func (c countOutcomes) ObserveDecision(e ratelimit.DecisionEvent) { c[e.Outcome.String()]++ }
func (c countOutcomes) ObserveStore(ratelimit.StoreEvent)         {}
func (c countOutcomes) ObserveCircuit(ratelimit.CircuitEvent)     {}

// Observers see every decision, store call and circuit change; the
// metrics modules (metrics/prometheus, metrics/otel) are Observers.
func ExampleWithObserver() {
	seen := countOutcomes{}
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/m"), ratelimit.WithObserver(seen))
	if err != nil {
		log.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		lim.Allow(context.Background(), "k")
	}
	fmt.Println(seen["allowed"], seen["denied"])
	// Output: 2 1
}

// BlockFor keeps a key denied for a while once it went over a limit.
func ExampleBlockFor() {
	p := ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(10*time.Minute))
	lim, _ := ratelimit.New(store.NewMemory(), p)
	for i := 0; i < 3; i++ {
		d, _ := lim.Allow(context.Background(), "k")
		fmt.Println(d.Allowed, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 0s
	// true 0s
	// false 10m0s
}

// Reserves tells whether Limiter.Wait and WithMaxDelay reserve a place in
// line in the same store call (every limit an exact log or a token bucket)
// or wait and ask again.
func ExamplePolicy_Reserves() {
	fmt.Println(ratelimit.MustParsePolicy("10/s").Reserves())   // an exact log
	fmt.Println(ratelimit.MustParsePolicy("1000/s").Reserves()) // sub-buckets
	fmt.Println(ratelimit.MustParsePolicy("1000/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket)).Reserves())
	// Output:
	// true
	// false
	// true
}
