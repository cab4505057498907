package ratelimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// SetHeaders and SetRetryAfter write what a Limiter writes on its own; call
// them directly when deciding with a Store in a custom handler.
func ExampleSetHeaders() {
	p := ratelimit.MustParsePolicy("10/s, 120/m, 240/h", ratelimit.Named("api"))
	// A denial by the per-minute limit: nothing left, the whole quota back
	// in 42.3s, room for this request again in 1.5s.
	d := ratelimit.Decision{
		Allowed:    false,
		Limit:      1,
		Remaining:  0,
		ResetAfter: 42300 * time.Millisecond,
		RetryAfter: 1500 * time.Millisecond,
	}

	h := http.Header{}
	ratelimit.SetHeaders(h, ratelimit.HeadersIETF|ratelimit.HeadersXRateLimit, p, d)
	ratelimit.SetRetryAfter(h, d)
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// RateLimit-Policy: "api-1s";q=10;w=1, "api-1m";q=120;w=60, "api-1h";q=240;w=3600
	// RateLimit: "api-1m";r=0;t=43
	// X-RateLimit-Limit: 120
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 43
	// Retry-After: 2
}

// The default denied handler reads the Result the Limiter put in the
// request's context. Here the context is built by hand, as a custom stack
// or a test would.
func ExampleDefaultDeniedHandler() {
	res := ratelimit.Result{
		Policy: ratelimit.MustParsePolicy("10/s, 120/m"),
		Keys:   []string{"ip:203.0.113.7"},
		Cost:   1,
		Decision: ratelimit.Decision{
			Limit:      0,
			ResetAfter: time.Second,
			RetryAfter: 250 * time.Millisecond,
		},
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req = req.WithContext(ratelimit.NewContext(req.Context(), res))
	rec := httptest.NewRecorder()

	ratelimit.DefaultDeniedHandler().ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Print(rec.Body.String()) // the body ends with a newline
	// Output:
	// 429 application/problem+json
	// {"type":"https://github.com/ratelimitkit/ratelimit#rate-limited","title":"Too Many Requests","status":429,"detail":"Rate limit \"default-1s\" (10 per 1s) exceeded. Retry in 1 second.","limit":"default-1s","quota":10,"window":1,"identifier":"ip","retry_after":1}
}
