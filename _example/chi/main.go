// Command chi is the README's quick start with chi: one policy for the
// /api routes, counters shared through the Redis that REDIS_URL names
// (127.0.0.1:6379 when unset).
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go run -C _example ./chi
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	// "redis://[user:password@]host:port/db", "rediss://" for TLS; the client
	// fails fast while Redis is down (see the production checklist).
	st, err := store.NewRedisURL(cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	// Say at startup where the counters live, or why Redis does not answer.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	info, err := st.Ping(ctx)
	cancel()
	if err != nil {
		log.Printf("redis does not answer; limiting per process until it does: %v", err)
	} else {
		log.Printf("counters in %v", info)
	}

	byIP := ratelimit.ByIP()                 // RemoteAddr (see "Behind a proxy")
	byKey := ratelimit.ByHeader("X-API-Key") // hashed; skipped when absent
	// If Redis fails, the Redis store's per-process memory store decides:
	// each server keeps limiting on its own until Redis answers again.
	lim, err := ratelimit.New(st, ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("api")),
		ratelimit.WithIdentifiers(byIP, byKey))
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.Get("/healthz", health) // not limited
	r.With(lim.Handler).Get("/api/hello", hello)
	r.Group(func(r chi.Router) { // several routes, one limiter
		r.Use(lim.Handler)
		r.Get("/api/time", now)
	})
	log.Fatal(http.ListenAndServe(":8080", r))
}

func health(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }

func hello(w http.ResponseWriter, r *http.Request) {
	res, ok := ratelimit.FromContext(r.Context()) // res.Decision.Remaining, res.Keys, res.Policy ...
	if !ok {
		http.Error(w, "not behind the limiter", http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "hello; %d left\n", res.Decision.Remaining)
}

func now(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintln(w, time.Now().UTC().Format(time.RFC3339))
}
