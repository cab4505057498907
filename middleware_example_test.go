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
	// 200 "default-1m";q=2;w=60, "default-1h";q=100;w=3600
	// 200 "default-1m";q=2;w=60, "default-1h";q=100;w=3600
	// 429 "default-1m";q=2;w=60, "default-1h";q=100;w=3600
}

// With chi, a Limiter's Handler goes in Use, With or Group. Here every
// route shares the "api" policy and the login route has a stricter one on
// top. Both limiters share one store; their counters stay apart because
// their policies differ.
func ExampleLimiter_Handler_chi() {
	// Behind a load balancer at 10.0.0.0/8: believe its X-Forwarded-For.
	ip, err := ratelimit.ByIP(ratelimit.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
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

// Outside HTTP, AllowN limits any work by keys you choose: here exports
// of rows, per tenant, 100 rows an hour.
func ExampleLimiter_AllowN() {
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("100/h", ratelimit.Named("exports")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, rows := range []int64{40, 50, 30, 10} {
		d, err := lim.AllowN(ctx, rows, "tenant:acme")
		if err != nil {
			// No store could decide; d is the failure mode's answer.
			log.Print(err)
		}
		if !d.Allowed {
			fmt.Printf("%d rows: denied, %d left\n", rows, d.Remaining)
			continue
		}
		fmt.Printf("%d rows: allowed, %d left\n", rows, d.Remaining)
	}
	// Output:
	// 40 rows: allowed, 60 left
	// 50 rows: allowed, 10 left
	// 30 rows: denied, 10 left
	// 10 rows: allowed, 0 left
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
	ip, err := ratelimit.ByIP()
	if err != nil {
		log.Fatal(err)
	}
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

// New checks the whole configuration up front.
func ExampleNew() {
	_, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("10/s"),
		ratelimit.WithTimeout(0))
	fmt.Println(err)
	// Output:
	// ratelimit: WithTimeout(0s): timeout must be positive
}
