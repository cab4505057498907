package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// New checks the whole configuration up front.
func ExampleNew() {
	_, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("10/s"),
		ratelimit.WithTimeout(0))
	fmt.Println(err)
	// Output:
	// ratelimit: WithTimeout(0s): timeout must be positive
}

// Limit every route of a net/http ServeMux by client IP.
func ExampleLimiter_Handler() {
	// One server: an in-memory store. For a fleet, share the counters in
	// Redis instead (see the WithFallback example).
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/m, 100/h"))
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	srv := &http.Server{Addr: ":8080", Handler: lim.Handler(mux)}
	// log.Fatal(srv.ListenAndServe())

	// Three requests from one client: the third is over 2/m.
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/hello", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := httptest.NewRecorder()
		srv.Handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "default-1m";q=2;w=60;pk=:L1jjML8dtlA=:, "default-1h";q=100;w=3600;pk=:L1jjML8dtlA=:
	// 200 "default-1m";q=2;w=60;pk=:L1jjML8dtlA=:, "default-1h";q=100;w=3600;pk=:L1jjML8dtlA=:
	// 429 "default-1m";q=2;w=60;pk=:L1jjML8dtlA=:, "default-1h";q=100;w=3600;pk=:L1jjML8dtlA=:
}

// With chi, a Limiter's Handler goes in Use, With or Group. Here every
// route shares the "api" policy and the login route has a stricter one on
// top. Both limiters share one store; their counters stay apart because
// their policies differ.
func ExampleLimiter_Handler_chi() {
	// Behind a load balancer at 10.0.0.0/8: believe its X-Forwarded-For.
	ip := ratelimit.ByIP(ratelimit.TrustedProxies("10.0.0.0/8"))
	st := store.NewMemory()
	api, err := ratelimit.New(st, ratelimit.MustParsePolicy("10/s, 120/m", ratelimit.Named("api")),
		ratelimit.WithIdentifiers(ip))
	if err != nil {
		log.Fatal(err)
	}
	login, err := ratelimit.New(st, ratelimit.MustParsePolicy("3/m, 10/h", ratelimit.Named("login")),
		ratelimit.WithIdentifiers(ip))
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Use(api.Handler)
	r.Get("/items", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "items") })
	r.With(login.Handler).Post("/login", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "welcome") })

	send := func(method, path string) {
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "10.1.2.3:5000" // the load balancer
		req.Header.Set("X-Forwarded-For", "198.51.100.9")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(method, path, w.Code)
	}
	for range 4 {
		send(http.MethodPost, "/login")
	}
	send(http.MethodGet, "/items")
	// Output:
	// POST /login 200
	// POST /login 200
	// POST /login 200
	// POST /login 429
	// GET /items 200
}

// Read the decision in the handler, for example to tell a client how much
// of its quota is left.
func ExampleFromContext() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("5/m"))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := ratelimit.FromContext(r.Context())
		if ok {
			fmt.Fprintf(w, "%s may make %d more requests", res.Keys[0], res.Decision.Remaining)
		}
	}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Body.String())
	// Output:
	// ip:203.0.113.7 may make 4 more requests
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

// Plan tiers: the policy is chosen per request. Signed-in users are
// limited by user (and by IP, so one client cannot rotate accounts
// without limit); anonymous requests by IP alone.
func ExampleWithPolicyFunc() {
	free := ratelimit.MustParsePolicy("1/m", ratelimit.Named("free"))
	pro := ratelimit.MustParsePolicy("100/m", ratelimit.Named("pro"))

	// In a real server an authentication middleware that runs first puts
	// the user in the request context; here a header stands in for it.
	user := ratelimit.ByUser(func(r *http.Request) (string, bool) {
		id := r.Header.Get("X-Demo-User")
		return id, id != ""
	})
	ip := ratelimit.ByIP()
	lim, err := ratelimit.New(store.NewMemory(), free,
		ratelimit.WithIdentifiers(user, ip),
		ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy {
			if r.Header.Get("X-Demo-User") == "42" { // user 42 pays
				return pro
			}
			return nil // the default policy: free
		}))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := ratelimit.FromContext(r.Context())
		fmt.Fprint(w, res.Policy.Name(), " ", res.Keys)
	}))

	for _, u := range []string{"", "", "42", "42"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		if u != "" {
			r.Header.Set("X-Demo-User", u)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			fmt.Println(w.Code, w.Header().Get("Content-Type"))
			continue
		}
		fmt.Println(w.Code, w.Body.String())
	}
	// Output:
	// 200 free [ip:203.0.113.7]
	// 429 application/problem+json
	// 200 pro [user:42 ip:203.0.113.7]
	// 200 pro [user:42 ip:203.0.113.7]
}

// A fleet shares its counters in Redis. If Redis fails or is slow, each
// server falls back to counting on its own, and only if that fails too
// does it refuse requests. Store errors go to the log (throttled) and to a
// hook, for metrics.
func ExampleWithFallback() {
	client := redis.NewClient(&redis.Options{
		Addr: "localhost:6379",
		// Let the Limiter's timeout cut a slow call short on the socket.
		ContextTimeoutEnabled: true,
	})
	shared, err := store.NewRedis(client)
	if err != nil {
		log.Fatal(err)
	}
	var storeErrors atomic.Int64 // in real code: a metrics counter
	lim, err := ratelimit.New(shared, ratelimit.MustParsePolicy("10/s, 120/m, 240/h"),
		ratelimit.WithFallback(store.NewMemory()),
		ratelimit.WithFailureMode(ratelimit.FailClosed),
		ratelimit.WithTimeout(50*time.Millisecond),
		ratelimit.WithLogger(slog.Default()),
		ratelimit.WithErrorHook(func(r *http.Request, err error) { storeErrors.Add(1) }),
	)
	if err != nil {
		log.Fatal(err)
	}
	_ = lim // mux := ...; http.ListenAndServe(":8080", lim.Handler(mux))
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
	// "default-1h";r=4;t=3600;pk=:L1jjML8dtlA=:
	// "default-1h";r=4;t=3600;pk=:L1jjML8dtlA=:
	// "default-1h";r=4;t=3600;pk=:L1jjML8dtlA=:
}

// countOutcomes is an Observer that counts decisions by outcome.
type countOutcomes map[string]int

func (c countOutcomes) ObserveDecision(e ratelimit.DecisionEvent) { c[e.Outcome.String()]++ }

func (c countOutcomes) ObserveStore(ratelimit.StoreEvent) {}

func (c countOutcomes) ObserveCircuit(ratelimit.CircuitEvent) {}

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

// The default denied handler reads the Result the Limiter put in the
// request's context. Here the context is built by hand, as a custom stack
// or a test would.
func ExampleDefaultDeniedHandler() {
	res := ratelimit.Result{
		Policy: ratelimit.MustParsePolicy("10/s, 120/m"),
		Keys:   []string{"ip:203.0.113.7"},
		Cost:   1,
		Decision: ratelimit.Decision{
			Limit:      0,
			ResetAfter: time.Second,
			RetryAfter: 250 * time.Millisecond,
		},
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req = req.WithContext(ratelimit.NewContext(req.Context(), res))
	rec := httptest.NewRecorder()

	ratelimit.DefaultDeniedHandler().ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Print(rec.Body.String()) // the body ends with a newline
	// Output:
	// 429 application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Rate limit \"default-1s\" (10 per 1s) exceeded. Retry in 1 second.","violated-policies":["default-1s"],"limit":"default-1s","quota":10,"window":1,"identifier":"ip","retry_after":1}
}
