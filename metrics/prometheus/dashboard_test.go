package ratelimitprom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// dashboard is the part of dashboard.json the test reads.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboard: dashboard.json parses as a Grafana dashboard whose every
// panel queries something, every metric it queries is one the Collector
// exports (a histogram's _bucket, _sum and _count included), and it shows
// what an operator needs: decisions by outcome, denials by policy, holds
// and their waits, store latency and errors, outages and the fallback.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	col, _ := setup(t)
	exported := map[string]bool{}
	descs := make(chan *prometheus.Desc, 64)
	col.Describe(descs)
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for desc := range descs {
		m := fqName.FindStringSubmatch(desc.String())
		if m == nil {
			t.Fatalf("no name in %s", desc)
		}
		exported[m[1]] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			exported[m[1]+suffix] = strings.HasSuffix(m[1], "_seconds") || exported[m[1]+suffix]
		}
	}
	metricName := regexp.MustCompile(`\bratelimit_[a-z_]+`)
	queried := map[string]bool{}
	for i, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("step %d: panel %q queries nothing", i, p.Title)
		}
		for _, tg := range p.Targets {
			names := metricName.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("step %d: panel %q: %q queries no ratelimit metric", i, p.Title, tg.Expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("step %d: panel %q queries %s, which the Collector does not export", i, p.Title, n)
				}
				queried[n] = true
			}
		}
	}
	for _, want := range []string{"ratelimit_decisions_total", "ratelimit_held_requests_total", "ratelimit_hold_wait_seconds_bucket",
		"ratelimit_store_call_duration_seconds_bucket", "ratelimit_store_errors_total", "ratelimit_circuit_open", "ratelimit_circuit_openings_total"} {
		if !queried[want] {
			t.Errorf("no panel queries %s", want)
		}
	}
	var titles []string
	for _, p := range d.Panels {
		titles = append(titles, strings.ToLower(p.Title))
	}
	for _, want := range []string{"outcome", "policy", "held", "wait", "latency", "errors", "circuit", "fallback"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no panel about %s: %q", want, titles)
		}
	}
}
