// Package ratelimitgrpc limits gRPC servers with a ratelimit.Limiter: the
// same policies, identities, stores, failure modes and observers as its
// HTTP middleware, in unary and stream server interceptors.
//
//	lim, err := ratelimit.New(st, ratelimit.MustParsePolicy("5/s"),
//		ratelimit.WithPolicyFunc(ratelimitgrpc.MethodPolicies(map[string]*ratelimit.Policy{
//			"/search.v1.Search/Query": ratelimit.MustParsePolicy("2/s", ratelimit.Named("query")),
//		})))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim)),
//		grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(lim)))
//
// # How a call is decided
//
// The interceptors hand each call to the Limiter's Handler as an
// *http.Request, so every Limiter option applies as it does to HTTP:
//
//   - RemoteAddr is the peer's address, Header the call's incoming
//     metadata (keys ending in "-bin" and pseudo-headers left out), Host
//     its :authority, URL.Path the full method ("/pkg.Service/Method"),
//     and the context the call's.
//   - Identifiers see that request: ratelimit.ByIP limits by the peer's
//     address and reads x-forwarded-for (or forwarded, x-real-ip) from the
//     metadata only from proxies named with ratelimit.TrustedProxies, as
//     for HTTP; ratelimit.ByHeader("x-api-key") limits by a metadata key,
//     hashed; ratelimit.IdentifierFunc reads anything of the context
//     (r.Context()). A call no identifier applies to passes unlimited.
//   - WithPolicyFunc (MethodPolicies), WithCostFunc and WithSkip see the
//     method in URL.Path. WithRefundIf and WithCostAfter see the HTTP
//     status of the handler's gRPC code (HTTPStatus). A Concurrent limit
//     holds its slot for a unary call's handler, or for a stream's life.
//   - The handler's context carries the decision: ratelimit.FromContext.
//
// # What the client sees
//
// An admitted call carries the rate-limit fields the Limiter writes
// (ratelimit-policy, ratelimit, in the Limiter's header styles) as
// response header metadata. A denied call ends with codes.ResourceExhausted,
// its message the 429 problem's detail, a RetryInfo detail with the wait
// (none for a limit of requests in flight, which has no wait to promise),
// a QuotaFailure detail naming the limit, and the same fields plus
// retry-after as header metadata. When no store could decide and the
// failure mode is FailClosed, the call ends with codes.Unavailable and a
// RetryInfo of one second; FailOpen lets it through. A client that left
// while its call was held ends with its context's code.
package ratelimitgrpc
