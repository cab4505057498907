package ratelimitprom_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratelimitkit/ratelimit"
	ratelimitprom "github.com/ratelimitkit/ratelimit/metrics/prometheus"
	"github.com/ratelimitkit/ratelimit/store"
)

// A Limiter reports to a Collector registered on the program's registry,
// which promhttp serves on /metrics.
func ExampleNew() {
	col, err := ratelimitprom.New()
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)

	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("2/m", ratelimit.Named("api")),
		ratelimit.WithObserver(col))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", lim.Handler(http.NotFoundHandler()))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 { // 2 allowed, 1 denied
		resp, err := http.Get(srv.URL + "/api/x")
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "ratelimit_decisions_total") || strings.HasPrefix(line, "ratelimit_circuit") {
			fmt.Println(line)
		}
	}
	// Output:
	// ratelimit_circuit_open 0
	// ratelimit_circuit_openings_total 0
	// ratelimit_decisions_total{fallback="false",outcome="allowed",policy="api"} 2
	// ratelimit_decisions_total{fallback="false",outcome="denied",policy="api"} 1
}
