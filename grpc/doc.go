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
// The interceptors hand each call to the Limiter's Serve as a
// ratelimit.Call, which the Limiter's identifiers and functions see as an
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
// response header metadata. A refused call sends no header: its response
// is trailers-only, so that a client's retry policy may retry it (grpc-go
// never retries a call once headers arrived). A denied call ends with
// codes.ResourceExhausted, its message the 429 problem's detail, a
// RetryInfo detail with the wait, a QuotaFailure detail naming the limit,
// and in the trailer the same fields, retry-after and
// grpc-retry-pushback-ms: the wait in milliseconds, the signal grpc-go's
// retry policy honours, or -1 where no wait helps (a cost above the
// limit: the client does not retry). Each refusal of one limit and keys is
// told a place of its own, one emission interval after the last one
// promised (and never before the store's wait), so that the retries of
// clients refused together arrive as the limit admits them rather than
// all at once. A refusal of a limit of requests in flight promises no
// wait (a slot frees when a call ends): the client's own backoff applies.
// When no store could decide and the failure mode is FailClosed, the call
// ends with codes.Unavailable and a wait of one second; FailOpen lets it
// through. A client that left while its call was held ends with its
// context's code.
//
// A stock grpc-go client with a service-config retryPolicy on
// RESOURCE_EXHAUSTED (maxAttempts 5), 16 goroutines calling a 10/s method
// back to back, makes about 1.5 to 1.7 attempts per admission without
// holding (a first attempt refused, its retry admitted) and 1.25 with the
// default holding; TestStockRetryPolicyHonoursRefusals runs it.
//
// # Clients
//
// UnaryClientInterceptor and StreamClientInterceptor pace a client by
// what the server says: a call leaves only when the limit the server
// named has room for it (counting calls under way and timing each
// admission by its answer), and waits out a refusal's pushback, within the
// call's deadline. They never retry; with a retry policy beside them, the
// same 16 goroutines are refused nothing once the client knows the limit.
package ratelimitgrpc
