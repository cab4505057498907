package ratelimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// ExampleByIP limits clients by address behind a load balancer in
// 10.0.0.0/8 that appends to X-Forwarded-For.
func ExampleByIP() {
	id := ratelimit.ByIP(
		ratelimit.TrustedProxies("10.0.0.0/8"),
		ratelimit.IPv6Prefix(56),
	)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:443"
	r.Header.Set("X-Forwarded-For", "192.0.2.99, 2001:db8:1:2a::7")

	key, _ := id.Identify(r)
	client, _ := id.ClientIP(r)
	fmt.Println(key)
	fmt.Println(client)
	// Output:
	// ip:2001:db8:1::/56
	// 2001:db8:1:2a::7
}

// ExampleByHeader limits by API key without storing the key itself.
func ExampleByHeader() {
	id := ratelimit.ByHeader("X-API-Key")
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "secret")
	fmt.Println(id.Identify(r))

	// Without the header, the identifier does not apply.
	_, ok := id.Identify(httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println(ok)
	// Output:
	// key:2bb80d537b1da3e38bd30361aa855686 true
	// false
}

// Limit by API key when there is one, else by IP: key holders get their own
// budget instead of sharing their IP's.
func ExampleFirstOf() {
	byKey := ratelimit.ByHeader("X-API-Key")
	byIP := ratelimit.ByIP()
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/h"),
		ratelimit.WithIdentifiers(ratelimit.FirstOf(byKey, byIP)))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, key := range []string{"", "", "k-123", "k-123"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 429 200 429
}

// Exempt health checks from the internal network.
func ExampleClientIn() {
	internal, err := ratelimit.ClientIn(nil, "10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	lim, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/h"), ratelimit.WithSkip(internal))
	if err != nil {
		log.Fatal(err)
	}
	h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, from := range []string{"10.0.0.5:80", "10.0.0.5:80", "203.0.113.7:4711", "203.0.113.7:4711"} {
		r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		r.RemoteAddr = from
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ")
	}
	fmt.Println()
	// Output: 200 200 200 429
}
