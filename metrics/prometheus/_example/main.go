// Command _example serves a rate-limited route and its metrics:
//
//	cd metrics/prometheus && go run ./_example
//	curl -i localhost:8080/api/hello       # 5 per minute per client IP
//	curl localhost:8080/metrics | grep ratelimit_
//
// ADDR sets the listen address (default 127.0.0.1:8080). The counters live
// in memory; use store.NewRedis for a fleet, the metrics are the same.
package main

import (
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratelimitkit/ratelimit"
	ratelimitprom "github.com/ratelimitkit/ratelimit/metrics/prometheus"
	"github.com/ratelimitkit/ratelimit/store"
)

func main() {
	col, err := ratelimitprom.New()
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col, collectors.NewGoCollector())

	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("5/m", ratelimit.Named("api")),
		ratelimit.WithObserver(col))
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /api/hello", lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	log.Printf("listening on %s: /api/hello (5/m per IP), /metrics", addr)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
