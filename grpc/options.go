package ratelimitgrpc

import (
	"net/http"
	"strings"

	"github.com/ratelimitkit/ratelimit"
)

// Option configures an interceptor.
type Option func(*config)

type config struct {
	skip map[string]bool
	line line // the places promised to refused calls' retries
}

func newConfig(opts []Option) *config {
	c := &config{skip: map[string]bool{}}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c
}

// SkipMethods leaves the given full methods ("/grpc.health.v1.Health/Check")
// unlimited: no decision, no metadata. For a choice that needs more than
// the method, use the Limiter's WithSkip, which sees the call's request.
func SkipMethods(methods ...string) Option {
	return func(c *config) {
		for _, m := range methods {
			c.skip[m] = true
		}
	}
}

// MethodPolicies returns a function for ratelimit.WithPolicyFunc that
// picks a call's policy by its full method: byMethod["/pkg.Service/Method"],
// else byMethod["/pkg.Service/*"], else the Limiter's own policy.
func MethodPolicies(byMethod map[string]*ratelimit.Policy) func(*http.Request) *ratelimit.Policy {
	return func(r *http.Request) *ratelimit.Policy {
		m := r.URL.Path
		if p := byMethod[m]; p != nil {
			return p
		}
		if i := strings.LastIndexByte(m, '/'); i > 0 {
			return byMethod[m[:i+1]+"*"]
		}
		return nil
	}
}
