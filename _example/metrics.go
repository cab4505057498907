package main

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/ratelimitkit/ratelimit"
)

// metrics is a small ratelimit.Observer that serves its counts in the
// Prometheus text format on /metrics, so the example needs no dependency
// beyond the library's. A real program would use the metrics/prometheus
// module (a Collector for its own registry) or metrics/otel instead.
type metrics struct {
	mu        sync.Mutex
	decisions map[[2]string]int64 // policy, outcome
	errors    map[string]int64    // error kind
	circuit   atomic.Int64        // 1 while the store's circuit is open
}

func newMetrics() *metrics {
	return &metrics{decisions: map[[2]string]int64{}, errors: map[string]int64{}}
}

func (m *metrics) ObserveDecision(e ratelimit.DecisionEvent) {
	m.mu.Lock()
	m.decisions[[2]string{e.Result.Policy.Name(), e.Outcome.String()}]++
	m.mu.Unlock()
}

func (m *metrics) ObserveStore(e ratelimit.StoreEvent) {
	if k := e.ErrorKind; k != "" {
		m.mu.Lock()
		m.errors[k]++
		m.mu.Unlock()
	}
}

func (m *metrics) ObserveCircuit(e ratelimit.CircuitEvent) {
	if e.Open {
		m.circuit.Store(1)
	} else {
		m.circuit.Store(0)
	}
}

// ServeHTTP writes the counts in the Prometheus text format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(w, "# HELP ratelimit_decisions_total Decisions of the example's limiters, by policy and outcome.")
	fmt.Fprintln(w, "# TYPE ratelimit_decisions_total counter")
	keys := make([][2]string, 0, len(m.decisions))
	for k := range m.decisions {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	for _, k := range keys {
		fmt.Fprintf(w, "ratelimit_decisions_total{policy=%q,outcome=%q} %d\n", k[0], k[1], m.decisions[k])
	}
	fmt.Fprintln(w, "# HELP ratelimit_store_errors_total Store errors, by kind.")
	fmt.Fprintln(w, "# TYPE ratelimit_store_errors_total counter")
	kinds := make([]string, 0, len(m.errors))
	for k := range m.errors {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "ratelimit_store_errors_total{kind=%q} %d\n", k, m.errors[k])
	}
	fmt.Fprintln(w, "# HELP ratelimit_circuit_open Whether the store's circuit is open (1) or closed (0).")
	fmt.Fprintln(w, "# TYPE ratelimit_circuit_open gauge")
	fmt.Fprintf(w, "ratelimit_circuit_open %d\n", m.circuit.Load())
}
