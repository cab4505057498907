package ratelimit_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// documentedPK is pk as the README documents it, computed apart from the
// package: the first 8 bytes of HMAC-SHA-256 keyed "ratelimit pk" of the
// identity key, base64 between colons.
func documentedPK(key string) string {
	m := hmac.New(sha256.New, []byte("ratelimit pk"))
	m.Write([]byte(key))
	return ":" + base64.StdEncoding.EncodeToString(m.Sum(nil)[:8]) + ":"
}

// TestPartitionKey: the RateLimit item names its identity with pk, as
// documented, the same on two instances (Limiters on stores of their
// own), and no field carries the raw key (the address, the API key);
// RateLimit-Policy's items carry it when one identity is limited, not
// when several share the policy.
func TestPartitionKey(t *testing.T) {
	const apiKey = "sk_live_0123456789abcdef"
	p := ratelimit.MustParsePolicy("10/s, 100/m", ratelimit.Named("api"))
	get := func(h http.Handler, withKey bool) http.Header {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		if withKey {
			r.Header.Set("X-API-Key", apiKey)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Header()
	}
	instance := func(ids ...ratelimit.Identifier) http.Handler {
		lim, err := ratelimit.New(store.NewMemory(), p, ratelimit.WithIdentifiers(ids...))
		if err != nil {
			t.Fatal(err)
		}
		return lim.Handler(okHandler)
	}
	ipPK := ";pk=" + documentedPK("ip:203.0.113.7")
	a, b := get(instance(ratelimit.ByIP()), false), get(instance(ratelimit.ByIP()), false)
	for i, c := range []struct {
		field, got, want string
	}{
		{"RateLimit", a.Get("RateLimit"), `"api-1s";r=9;t=1` + ipPK},
		{"RateLimit, another instance", b.Get("RateLimit"), a.Get("RateLimit")},
		{"RateLimit-Policy", a.Get("RateLimit-Policy"), `"api-1s";q=10;w=1` + ipPK + `, "api-1m";q=100;w=60` + ipPK},
	} {
		if c.got != c.want {
			t.Errorf("step %d: %s %q, want %q", i, c.field, c.got, c.want)
		}
	}
	two := get(instance(ratelimit.ByHeader("X-API-Key"), ratelimit.ByIP()), true)
	if got := two.Get("RateLimit-Policy"); strings.Contains(got, "pk=") {
		t.Errorf("two identities: RateLimit-Policy %q names one, want no pk (the limits apply to both)", got)
	}
	if got := two.Get("RateLimit"); !strings.Contains(got, ";pk=:") {
		t.Errorf("two identities: RateLimit %q, want the pk of the identity it speaks for", got)
	}
	for i, h := range []http.Header{a, b, two} {
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, "203.0.113.7") || strings.Contains(v, apiKey) || strings.Contains(v, "ip:") || strings.Contains(v, "key:") {
					t.Errorf("step %d: %s %q carries the raw key", i, k, v)
				}
			}
		}
	}
}
