package ratelimitgrpc_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratelimitkit/ratelimit"
	ratelimitgrpc "github.com/ratelimitkit/ratelimit/grpc"
	"github.com/ratelimitkit/ratelimit/store"
)

// peerContext is a call's context from addr with metadata md.
func peerContext(addr string, md metadata.MD) context.Context {
	ctx := context.Background()
	if a, err := net.ResolveTCPAddr("tcp", addr); err == nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: a})
	}
	if md != nil {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	return ctx
}

// grpcUnary is lim's unary interceptor for the method "/test.v1.Svc/Call".
func grpcUnary(lim *ratelimit.Limiter, opts ...ratelimitgrpc.Option) func(context.Context, any, grpc.UnaryHandler) (any, error) {
	ic := ratelimitgrpc.UnaryServerInterceptor(lim, opts...)
	return func(ctx context.Context, req any, h grpc.UnaryHandler) (any, error) {
		return ic(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/test.v1.Svc/Call"}, h)
	}
}

// keyOf returns the key id gives a call from addr with md, through the
// unary interceptor of a Limiter with id as its only identifier.
func keyOf(t *testing.T, id ratelimit.Identifier, addr string, md metadata.MD) string {
	t.Helper()
	var mu sync.Mutex
	key := ""
	rec := ratelimit.IdentifierFunc(func(r *http.Request) (string, bool) {
		k, ok := id.Identify(r)
		mu.Lock()
		key = k
		mu.Unlock()
		return k, ok
	})
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1000/s"), ratelimit.WithIdentifiers(rec))
	if _, err := grpcUnary(lim)(peerContext(addr, md), nil, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return key
}

func mustByIP(t *testing.T, opts ...ratelimit.IPOption) ratelimit.Identifier {
	t.Helper()
	id := ratelimit.ByIP(opts...)
	if _, err := ratelimit.New(store.NewMemory(), ratelimit.MustParsePolicy("1/s"), ratelimit.WithIdentifiers(id)); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestIdentitiesCannotBeSpoofed holds the interceptors to the HTTP
// middleware's spoofing tests: from a peer that is not a trusted proxy,
// no metadata changes the key (rotating forged addresses, naming the
// victim, naming a proxy); behind a trusted proxy that appends the peer it
// saw, forged entries to its left are never reached.
func TestIdentitiesCannotBeSpoofed(t *testing.T) {
	const attacker = "198.51.100.66:5555"
	const attackerKey = "ip:198.51.100.66"
	trusted := ratelimit.TrustedProxies("10.0.0.0/8")
	configs := map[string]ratelimit.Identifier{
		"no trusted proxies": mustByIP(t),
		"x-forwarded-for":    mustByIP(t, trusted),
		"forwarded":          mustByIP(t, trusted, ratelimit.ClientIPHeader("Forwarded")),
		"x-real-ip":          mustByIP(t, trusted, ratelimit.ClientIPHeader("X-Real-IP")),
		"cf-connecting-ip":   mustByIP(t, trusted, ratelimit.ClientIPHeader("cf-connecting-ip")),
	}
	spoof := func(addr string) metadata.MD {
		return metadata.MD{
			"x-forwarded-for":  {addr, addr + ", 10.0.0.1"},
			"forwarded":        {"for=" + addr, `for="[` + addr + `]:1"`},
			"x-real-ip":        {addr},
			"cf-connecting-ip": {addr},
			"true-client-ip":   {addr},
		}
	}
	for name, id := range configs {
		t.Run(name, func(t *testing.T) {
			for i := range 20 {
				addr := fmt.Sprintf("203.0.%d.%d", i/10, i)
				if i%2 == 1 {
					addr = fmt.Sprintf("2001:db8:%x::1", i)
				}
				if got := keyOf(t, id, attacker, spoof(addr)); got != attackerKey {
					t.Fatalf("step %d: spoofed %s: key %q, want %q", i, addr, got, attackerKey)
				}
			}
			for i, addr := range []string{"203.0.113.7", "10.0.0.1"} { // the victim, a proxy
				if got := keyOf(t, id, attacker, spoof(addr)); got != attackerKey {
					t.Fatalf("step %d: naming %s: key %q, want %q", i, addr, got, attackerKey)
				}
			}
		})
	}
	id := configs["x-forwarded-for"]
	for i := range 10 {
		forged := fmt.Sprintf("203.0.113.%d, 10.0.0.%d", i, i)
		md := metadata.MD{"x-forwarded-for": {forged + ", 198.51.100.66"}}
		if got := keyOf(t, id, "10.0.0.1:443", md); got != attackerKey {
			t.Fatalf("step %d: forged %q via a trusted proxy: key %q, want %q", i, forged, got, attackerKey)
		}
	}
	// A trusted proxy's word is taken: the client it names is the key.
	if got := keyOf(t, id, "10.0.0.1:443", metadata.MD{"x-forwarded-for": {"203.0.113.7"}}); got != "ip:203.0.113.7" {
		t.Errorf("from a trusted proxy: key %q, want ip:203.0.113.7", got)
	}
}

// TestIdentityFromMetadataAndContext: an API key in metadata is a hashed
// key (never the key itself, and never from a binary "-bin" value); a
// function of the context identifies by anything the call carries.
func TestIdentityFromMetadataAndContext(t *testing.T) {
	const secret = "sk_live_abcdef"
	byKey := ratelimit.ByHeader("x-api-key")
	got := keyOf(t, byKey, "192.0.2.1:1", metadata.MD{"x-api-key": {secret}})
	if !strings.HasPrefix(got, "key:") || strings.Contains(got, secret) {
		t.Errorf("API key: key %q, want a hash", got)
	}
	if other := keyOf(t, byKey, "192.0.2.9:1", metadata.MD{"x-api-key": {secret}}); other != got {
		t.Errorf("the same API key from another peer: %q, want %q", other, got)
	}
	if bin := keyOf(t, ratelimit.ByHeader("x-api-key-bin"), "192.0.2.1:1", metadata.MD{"x-api-key-bin": {secret}}); bin != "" {
		t.Errorf("a binary value became a key: %q", bin)
	}
	type tenantKey struct{}
	byTenant := ratelimit.IdentifierFunc(func(r *http.Request) (string, bool) {
		v, ok := r.Context().Value(tenantKey{}).(string)
		return "tenant:" + v, ok
	})
	var seen string
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/m"), ratelimit.WithIdentifiers(byTenant))
	ctx := context.WithValue(peerContext("192.0.2.1:1", nil), tenantKey{}, "acme")
	h := func(ctx context.Context, _ any) (any, error) {
		res, _ := ratelimit.FromContext(ctx)
		seen = strings.Join(res.Keys, ",")
		return nil, nil
	}
	if _, err := grpcUnary(lim)(ctx, nil, h); err != nil || seen != "tenant:acme" {
		t.Errorf("by context: %v, keys %q", err, seen)
	}
	if _, err := grpcUnary(lim)(ctx, nil, h); err == nil {
		t.Error("the tenant's second call of 1/m was admitted")
	}
}

// TestMethodPoliciesAndSkip: a call's policy follows its method (exact,
// then the service's "/*"), SkipMethods leaves a method unlimited.
func TestMethodPoliciesAndSkip(t *testing.T) {
	query := ratelimit.MustParsePolicy("1/m", ratelimit.Named("query"))
	svc := ratelimit.MustParsePolicy("2/m", ratelimit.Named("svc"))
	pick := ratelimitgrpc.MethodPolicies(map[string]*ratelimit.Policy{"/s.v1.S/Query": query, "/s.v1.S/*": svc})
	for i, c := range []struct {
		method string
		want   *ratelimit.Policy
	}{{"/s.v1.S/Query", query}, {"/s.v1.S/Other", svc}, {"/t.v1.T/Query", nil}, {"", nil}} {
		r, _ := http.NewRequest(http.MethodPost, "http://x"+c.method, nil)
		if got := pick(r); got != c.want {
			t.Errorf("step %d (%q): policy %v, want %v", i, c.method, got, c.want)
		}
	}
	lim := newLimiter(t, store.NewMemory(), ratelimit.MustParsePolicy("1/m"))
	unary := grpcUnary(lim, ratelimitgrpc.SkipMethods("/test.v1.Svc/Call"))
	for i := range 3 {
		if _, err := unary(peerContext("192.0.2.1:1", nil), nil, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
			t.Fatalf("step %d: a skipped method was limited: %v", i, err)
		}
	}
}
