// Command tenants limits each tenant by its plan, read from a database
// with a cache, and shows what a plan change does: the plans are one
// policy name ("api") with different rates, so they share the tenant's
// counters and the new rate applies to what was used.
//
//	go run -C _example ./tenants
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// plans stands for a table of plans: requests a minute per tenant.
type plans struct {
	mu   sync.Mutex
	rate map[string]int64
}

func (p *plans) lookup(_ context.Context, tenant string) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.rate[tenant]; ok {
		return r, nil
	}
	return 10, nil // unknown tenants get the free plan
}

func (p *plans) set(tenant string, rate int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate[tenant] = rate
}

// policies caches each tenant's plan for ttl, and one Policy per rate:
// built once, they are shared by every tenant of that plan (a Redis
// store loads one script per policy it sees).
type policies struct {
	db  *plans
	ttl time.Duration

	mu      sync.Mutex
	tenants map[string]cached
	byRate  map[int64]*ratelimit.Policy
}

type cached struct {
	p       *ratelimit.Policy
	expires time.Time
}

func (c *policies) forTenant(ctx context.Context, tenant string) *ratelimit.Policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.tenants[tenant]; ok && time.Now().Before(e.expires) {
		return e.p
	}
	rate, err := c.db.lookup(ctx, tenant)
	if err != nil {
		return nil // the Limiter's own policy (the free plan) applies
	}
	p := c.byRate[rate]
	if p == nil {
		// One name for every plan: the counters belong to the name and
		// the tenant, the rates to the plan in force.
		p, err = ratelimit.ParsePolicy(strconv.FormatInt(rate, 10)+"/m", ratelimit.Named("api"))
		if err != nil {
			return nil
		}
		c.byRate[rate] = p
	}
	c.tenants[tenant] = cached{p, time.Now().Add(c.ttl)}
	return p
}

// forget drops a tenant's cached plan, as a plan change would (else the
// new plan applies within ttl).
func (c *policies) forget(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tenants, tenant)
}

func main() {
	db := &plans{rate: map[string]int64{"acme": 10}}
	cache := &policies{db: db, ttl: 30 * time.Second, tenants: map[string]cached{}, byRate: map[int64]*ratelimit.Policy{}}
	free := ratelimit.MustParsePolicy("10/m", ratelimit.Named("api"))
	lim, err := ratelimit.New(store.NewMemory(), free,
		ratelimit.WithIdentifiers(ratelimit.ByHeader("X-Tenant")),
		ratelimit.WithPolicyFunc(func(r *http.Request) *ratelimit.Policy {
			return cache.forTenant(r.Context(), r.Header.Get("X-Tenant"))
		}))
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})))
	defer srv.Close()

	burst := func(n int) (admitted int, policy string) {
		for i := 0; i < n; i++ {
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set("X-Tenant", "acme")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				log.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				admitted++
			}
			policy = resp.Header.Get("RateLimit-Policy")
		}
		return admitted, policy
	}
	n, pol := burst(8)
	fmt.Printf("free plan:     %d of 8 admitted (%s)\n", n, pol)
	db.set("acme", 20)
	cache.forget("acme")
	n, pol = burst(15)
	fmt.Printf("upgraded:      %d of 15 admitted (%s): 20 this minute, 8 used\n", n, pol)
	db.set("acme", 5)
	cache.forget("acme")
	n, pol = burst(3)
	fmt.Printf("downgraded:    %d of 3 admitted (%s): 20 used, none until the minute frees\n", n, pol)
}
