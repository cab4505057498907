// Package client is the client side of rate limiting: an http.RoundTripper
// that reads the rate-limit headers servers send (those of
// github.com/ratelimitkit/ratelimit among them), paces requests so that a
// well-behaved client is not refused, and retries a refused request when
// that is safe.
//
//	hc := &http.Client{Transport: client.NewTransport(nil)}
//	resp, err := hc.Get("https://api.example.com/hello")
//
// Every goroutine using the transport shares what the server said: how
// much of each quota policy remains, and when more comes back. A request
// whose quota is spent waits for it, within its context: it fails at once,
// with a [*WaitError] wrapping context.DeadlineExceeded, when the wait
// would pass the context's deadline.
//
// # Headers
//
// The transport understands the IETF fields of
// draft-ietf-httpapi-ratelimit-headers-10 and -11 (Structured Field Lists,
// RFC 9651, parsed strictly by the package itself),
//
//	RateLimit-Policy: "hello-1s";q=10;w=1, "hello-1m";q=120;w=60
//	RateLimit: "hello-1s";r=9;t=1
//
// the separate fields of draft-06 (RateLimit-Limit, RateLimit-Remaining,
// RateLimit-Reset), the legacy X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (delay seconds, or a Unix time from 10^9 up), and
// Retry-After (delay seconds or an HTTP-date). The IETF fields win over
// draft-06's, which win over the X- ones. A malformed field is ignored.
//
// The t parameter of RateLimit counts, in draft-11, the seconds until more
// quota is available (rounded down by this project's server), and in
// draft-10 the seconds until the whole quota is back; as a response does
// not say which draft it follows, the transport waits t+1 seconds, safe
// for both. When the client itself sent the last q requests of a window w
// (RateLimit-Policy's q and w), it knows sooner: the oldest of them leaves
// the window w after its answer came.
//
// # Retries
//
// A 429 is retried, after Retry-After and at most [WithMaxRetries] times
// (default [DefaultMaxRetries]), only for an idempotent method (GET, HEAD,
// OPTIONS, TRACE, PUT, DELETE) or a request carrying an Idempotency-Key
// header ([WithIdempotencyHeader]), and only when its body can be sent
// again (no body, or Request.GetBody). Otherwise the 429 is returned as it
// came.
package client
