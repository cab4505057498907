package ratelimitprom_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	ratelimitprom "github.com/ratelimitkit/ratelimit/metrics/prometheus"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestPolicyCap: past WithMaxPolicies names, decisions count under
// "other"; WithoutPolicyLabel drops the label.
func TestPolicyCap(t *testing.T) {
	policies := map[string]*ratelimit.Policy{}
	for i := range 5 {
		name := fmt.Sprintf("tier%d", i)
		policies[name] = ratelimit.MustParsePolicy("10/h", ratelimit.Named(name))
	}
	byTier := ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy { return policies[r.Header.Get("Tier")] })

	col, reg := setup(t, ratelimitprom.WithMaxPolicies(2))
	lim := newLimiter(t, store.NewMemory(), policies["tier0"], ratelimit.WithObserver(col), byTier)
	h := lim.Handler(ok)
	for i := range 5 {
		serve(h, "203.0.113.7", 1, "Tier", fmt.Sprintf("tier%d", i))
	}
	serve(h, "203.0.113.7", 1, "Tier", "tier1") // keeps its label
	serve(h, "203.0.113.7", 1, "Tier", "tier4") // still other
	compare(t, reg, `
		ratelimit_decisions_total{fallback="false",outcome="allowed",policy="tier0"} 1
		ratelimit_decisions_total{fallback="false",outcome="allowed",policy="tier1"} 2
		ratelimit_decisions_total{fallback="false",outcome="allowed",policy="other"} 4
	`, "ratelimit_decisions_total")

	col2, reg2 := setup(t, ratelimitprom.WithoutPolicyLabel())
	lim2 := newLimiter(t, store.NewMemory(), policies["tier0"], ratelimit.WithObserver(col2), byTier)
	h2 := lim2.Handler(ok)
	for i := range 5 {
		serve(h2, "203.0.113.7", 1, "Tier", fmt.Sprintf("tier%d", i))
	}
	compare(t, reg2, `
		ratelimit_decisions_total{fallback="false",outcome="allowed"} 5
	`, "ratelimit_decisions_total")
}

// TestPolicyCapConcurrent: many goroutines, many policies: no decision is
// lost and no more than the cap of names (plus "other") is labelled.
func TestPolicyCapConcurrent(t *testing.T) {
	const workers, each, names, maxNames = 8, 50, 40, 10
	col, reg := setup(t, ratelimitprom.WithMaxPolicies(maxNames))
	var pols []*ratelimit.Policy
	for i := range names {
		pols = append(pols, ratelimit.MustParsePolicy("1000/h", ratelimit.Named(fmt.Sprintf("p%d", i))))
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				col.ObserveDecision(ratelimit.DecisionEvent{
					Result:  ratelimit.Result{Policy: pols[(w*each+i)%names]},
					Outcome: ratelimit.Allowed,
				})
			}
		}()
	}
	wg.Wait()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	labels := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "policy" {
					labels[lp.GetValue()] = true
				}
			}
		}
	}
	if total != workers*each {
		t.Errorf("decisions counted %v, want %d", total, workers*each)
	}
	if len(labels) != maxNames+1 || !labels[ratelimitprom.OtherPolicy] {
		t.Errorf("policy labels %v: want %d names plus %q", labels, maxNames, ratelimitprom.OtherPolicy)
	}
}
