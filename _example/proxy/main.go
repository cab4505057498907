// Command proxy shows which client address ByIP limits behind a load
// balancer: forwarded headers count only when the peer is a trusted proxy.
//
//	go run -C _example ./proxy
package main

import (
	"fmt"
	"net/http/httptest"

	"github.com/ratelimitkit/ratelimit"
)

func main() {
	byIP := ratelimit.ByIP(
		ratelimit.TrustedProxies("10.0.0.0/8", "fd00::/8"), // your balancers, CIDRs or IPs
		ratelimit.ClientIPHeader("X-Forwarded-For"),        // default; or "Forwarded", "X-Real-IP", ...
	)

	for _, c := range []struct{ peer, xff, what string }{
		{"10.1.2.3:4711", "203.0.113.7", "through the balancer: the forwarded client"},
		{"198.51.100.9:4711", "203.0.113.7", "not from a proxy: the header is ignored"},
		{"10.1.2.3:4711", "203.0.113.7, 10.9.9.9", "trusted hops are skipped, from the right"},
		{"10.1.2.3:4711", "evil, 203.0.113.7", "what the client wrote stays left of its address"},
		{"10.1.2.3:4711", "not-an-ip", "a bad entry: the last trusted hop"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		r.Header.Set("X-Forwarded-For", c.xff)
		key, _ := byIP.Identify(r)
		addr, _ := byIP.ClientIP(r) // the address it resolved
		fmt.Printf("peer %-17s X-Forwarded-For %-24q -> %-12s key %-16s (%s)\n", c.peer, c.xff, addr, key, c.what)
	}
}
