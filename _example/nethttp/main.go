// Command nethttp is the README's quick start with net/http: one policy
// for the GET /hello route of a ServeMux, counters in this process.
//
//	go run -C _example ./nethttp
package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	// One process: the in-memory store. For a fleet, store.NewRedis, as
	// in _example/chi.
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("100/m"))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /hello", lim.Handler(http.HandlerFunc(hello))) // limited
	mux.HandleFunc("GET /healthz", health)                         // not limited
	// lim.Handler(mux) would limit every request instead, the mux's 404
	// and 405 answers included (see the README's "Quick start").
	log.Fatal(http.ListenAndServe(":8080", mux))
}

func hello(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }

func health(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }
