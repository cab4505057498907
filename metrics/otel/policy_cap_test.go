package ratelimitotel_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	ratelimitotel "github.com/ratelimitkit/ratelimit/metrics/otel"
	"github.com/ratelimitkit/ratelimit/store"
)

// TestPolicyCap: past WithMaxPolicies names, decisions are recorded as
// "other"; WithoutPolicyAttribute drops the attribute.
func TestPolicyCap(t *testing.T) {
	policies := map[string]*ratelimit.Policy{}
	for i := range 5 {
		name := fmt.Sprintf("tier%d", i)
		policies[name] = ratelimit.MustParsePolicy("10/h", ratelimit.Named(name))
	}
	byTier := ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy { return policies[r.Header.Get("Tier")] })

	obs, reader := setup(t, ratelimitotel.WithMaxPolicies(2))
	h := newLimiter(t, store.NewMemory(), policies["tier0"], ratelimit.WithObserver(obs), byTier).Handler(ok)
	for i := range 5 {
		serve(h, "203.0.113.7", 1, "Tier", fmt.Sprintf("tier%d", i))
	}
	serve(h, "203.0.113.7", 1, "Tier", "tier1") // keeps its value
	serve(h, "203.0.113.7", 1, "Tier", "tier4") // still other
	collect(t, reader).want(t, "ratelimit.decisions", map[string]float64{
		"fallback=false,outcome=allowed,policy=tier0": 1,
		"fallback=false,outcome=allowed,policy=tier1": 2,
		"fallback=false,outcome=allowed,policy=other": 4,
	})

	obs2, reader2 := setup(t, ratelimitotel.WithoutPolicyAttribute())
	h2 := newLimiter(t, store.NewMemory(), policies["tier0"], ratelimit.WithObserver(obs2), byTier).Handler(ok)
	for i := range 5 {
		serve(h2, "203.0.113.7", 1, "Tier", fmt.Sprintf("tier%d", i))
	}
	collect(t, reader2).want(t, "ratelimit.decisions", map[string]float64{"fallback=false,outcome=allowed": 5})
}

// TestPolicyCapConcurrent: many goroutines, many policies: no decision is
// lost and no more than the cap of names (plus "other") is recorded.
func TestPolicyCapConcurrent(t *testing.T) {
	const workers, each, names, maxNames = 8, 50, 40, 10
	obs, reader := setup(t, ratelimitotel.WithMaxPolicies(maxNames))
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
				obs.ObserveDecision(ratelimit.DecisionEvent{
					Result:  ratelimit.Result{Policy: pols[(w*each+i)%names]},
					Outcome: ratelimit.Allowed,
				})
			}
		}()
	}
	wg.Wait()
	series := collect(t, reader)["ratelimit.decisions"]
	var total float64
	other := false
	for k, v := range series {
		total += v
		other = other || strings.Contains(k, "policy="+ratelimitotel.OtherPolicy)
	}
	if total != workers*each {
		t.Errorf("decisions recorded %v, want %d", total, workers*each)
	}
	if len(series) != maxNames+1 || !other {
		t.Errorf("series %s: want %d names plus %q", show(series), maxNames, ratelimitotel.OtherPolicy)
	}
}
