package ratelimit_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// SetHeaders writes what a Limiter writes on its own, Retry-After for a
// denial included; call it when deciding with a Store in a custom handler.
func ExampleSetHeaders() {
	p := ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("api"))
	// A denial by the per-minute limit: nothing left, the first unit back
	// in 1.5s (so the limit admits nothing for 1 whole second: t=1), room
	// for this request again then, the whole quota back in 42.3s (the t of
	// draft-10, as X-RateLimit-Reset says).
	d := ratelimit.Decision{
		Allowed:     false,
		Limit:       1,
		Remaining:   0,
		ResetAfter:  42300 * time.Millisecond,
		RefillAfter: 1500 * time.Millisecond,
		RetryAfter:  1500 * time.Millisecond,
	}

	h := http.Header{}
	ratelimit.SetHeaders(h, ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit, p, d)
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// RateLimit-Policy: "api-1s";q=10;w=1, "api-1m";q=120;w=60, "api-1h";q=240;w=3600
	// RateLimit: "api-1m";r=0;t=1
	// X-RateLimit-Limit: 120
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 43
	// Retry-After: 2
}
