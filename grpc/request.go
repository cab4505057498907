package ratelimitgrpc

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// requestOf is the call of method on ctx as the Limiter's Handler sees
// it: the peer's address, the incoming metadata as headers, the method as
// the path.
func requestOf(ctx context.Context, method string) *http.Request {
	r := &http.Request{
		Method:     http.MethodPost,
		URL:        &url.URL{Path: method},
		RequestURI: method,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     http.Header{},
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, vs := range md {
			switch {
			case k == ":authority":
				if len(vs) > 0 {
					r.Host = vs[0]
				}
			case strings.HasPrefix(k, ":"), strings.HasSuffix(k, "-bin"):
				// pseudo-headers and binary values are no identities
			default:
				r.Header[http.CanonicalHeaderKey(k)] = vs
			}
		}
	}
	return r.WithContext(ctx)
}
