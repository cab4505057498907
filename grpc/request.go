package ratelimitgrpc

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratelimitkit/ratelimit"
)

// callOf is the call of method on ctx as the Limiter decides it: the
// peer's address, the incoming metadata as header fields, the
// :authority as the host.
func callOf(ctx context.Context, method string) ratelimit.Call {
	c := ratelimit.Call{Method: method, Header: http.Header{}}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.RemoteAddr = p.Addr.String()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, vs := range md {
			switch {
			case k == ":authority":
				if len(vs) > 0 {
					c.Host = vs[0]
				}
			case strings.HasPrefix(k, ":"), strings.HasSuffix(k, "-bin"):
				// pseudo-headers and binary values are no identities
			default:
				c.Header[http.CanonicalHeaderKey(k)] = vs
			}
		}
	}
	return c
}
