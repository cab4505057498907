// Package ratelimit is net/http middleware that rate-limits API traffic
// across a fleet of servers, with Redis as the shared counter.
//
// A request is turned into keys by Identifiers (client IP, API key, user);
// a Policy of several limits ("10/s, 120/m, 240/h") is checked for every
// key at once by a Store, atomically: only if every limit of every key has
// room is the request admitted and charged (with a weight, its cost). The
// response carries the IETF RateLimit-Policy and RateLimit headers; a
// denied one gets 429 Too Many Requests with Retry-After and an RFC 9457
// problem document.
//
// # Entry points
//
// Build a [Limiter] once, at startup, with [New]: a [Store], a [*Policy]
// and [Option] values. New validates the whole configuration and returns
// an error rather than failing at request time. Then:
//
//   - [Limiter.Handler] is the middleware, a func(http.Handler)
//     http.Handler: chi's r.With(lim.Handler) or r.Use(lim.Handler);
//     net/http's mux.Handle(pattern, lim.Handler(h)). Wrapping a whole
//     router also limits (and charges) its 404 and 405 answers; wrap the
//     routes to avoid that.
//   - [Limiter.Allow] and [Limiter.AllowN] decide outside HTTP (jobs,
//     queues, exports) for keys you choose; AllowN takes a cost.
//   - [Limiter.Wait] and [Limiter.WaitN] wait for their turn instead of
//     being refused ([WithMaxDelay] holds HTTP requests the same way);
//     [Limiter.AllowUpTo] grants what is left of a quota.
//   - [Limiter.Refund] gives a charge back ([WithRefundIf] does it by the
//     response's status); [Limiter.Reset] forgets keys.
//   - [Limiter.Serve] decides a request of another transport (a [Call]:
//     the grpc module's interceptors) in the Handler's steps.
//
// A Limiter is safe for concurrent use.
//
//	st, err := store.NewRedisURL("redis://127.0.0.1:6379/0") // or store.NewMemory() for one process
//	...
//	lim, err := ratelimit.New(st, ratelimit.MustParsePolicy("10/s, 120/m, 240/h"))
//	...
//	r.With(lim.Handler).Get("/api/hello", hello) // chi
//
// The README's quick start has this as a whole program (_example/chi).
//
// # Identifiers
//
// [ByIP] (the default; proxies are trusted only when named with
// [TrustedProxies]), [ByHeader] for API keys (hashed), [ByUser] and
// [IdentifierFunc]; set them with [WithIdentifiers]. An identifier that
// does not apply to a request is skipped.
//
// # Policies and algorithms
//
// [ParsePolicy] and [MustParsePolicy] read "10/s, 120/m, 240/h";
// [NewPolicy] takes [Limit] values. [WithPolicyFunc] picks a policy per
// request, [WithCost] and [WithCostFunc] weigh requests. Algorithms:
// [SlidingWindow] (the default; never admits more than Rate in any window
// of Period, and counts small limits exactly, so a client that waits its
// Retry-After gets the promised rate), [SlidingLog] (exact for any rate up
// to [MaxLogRate]), [FixedWindow] (cheapest; up to 2× Rate across a window
// edge), [TokenBucket] (GCRA; a smooth rate with an explicit burst) and
// [SlidingWindowApprox] (two counters; under 2× Rate in any window). Each
// Algorithm's documentation states its guarantee. [BlockFor] adds a
// penalty after a denial; [Policy.With] copies a built policy under
// another name or penalty. [Concurrent] limits requests in flight.
// [WithLease] lets each process take a hot key's quota in grants and
// admit from them locally, still exact in true time (docs/leases.md).
//
// # Stores
//
// The store package has the implementations: store.NewRedis (a single
// Redis, Sentinel, Cluster or Ring, one round trip per request whatever
// the number of limits and identifiers, using Redis's own clock) and
// store.NewMemory (one process; the same decisions; also the fallback the
// Redis store names for when Redis fails). Your own store implements
// [Store], and the optional interfaces of package store/storekit it can
// (storekit.FallbackStore if it can fail and has a fallback to name).
//
// # Headers and the 429
//
// [WithHeaders] chooses the header styles ([HeadersIETF] by default);
// [SetHeaders] writes them for your own handlers.
// [DefaultDeniedHandler] writes the 429 problem document ([Problem],
// [NewProblem]); replace it with [WithDeniedHandler]. Handlers behind the
// middleware read the decision with [FromContext], and every decision of
// stacked Limiters with [AllFromContext].
//
// # When the store fails
//
// Each store call has a budget ([WithTimeout], 100ms by default). Then a
// fallback store decides: by default the store's own (storekit.FallbackStore; the
// Redis store names a memory store, so each server keeps limiting on its
// own and a fleet of N servers admits up to N times the limit while Redis
// is down), or the one [WithFallback] sets. When no store can decide, the
// failure mode does ([WithFailureMode]): [FailClosed] by default, [FailOpen]
// (unlimited) only when asked for, and giving either turns the store's own
// fallback off. A circuit breaker ([WithCircuitBreaker]) stops asking a
// store that keeps failing. A client that goes away does not cut a
// decision short. Observers ([WithObserver]; the metrics modules) see every
// decision, store call and circuit change, and [WithErrorHook] every
// error; the log ([WithLogger]) tells each outage in a few lines: when it
// starts, a summary a minute, when it ends. The Redis store's errors name
// their cause (a refused connection behind a timeout), and its Ping method
// checks the servers at startup.
//
// # Layout
//
// A request walks the package's files in one direction. middleware.go is
// the net/http front (Handler) and calls.go the others (Allow, Wait,
// AllowUpTo, Serve, Refund, Settle, Release); both hand a request to
// limiter.go, whose journey type is a request's one way through a
// Limiter: begin picks its keys (identity.go, ip.go), policy and cost;
// decideOrHold asks for a decision (decide.go: the store, the fallback,
// the failure mode, with a typed decidedBy; lease_grants.go for a leased
// policy) and holds a short wait; the fields go into the answer
// (headers.go), a refusal is told to the Limiters outside (context.go);
// execute (finish.go) runs a served request and finishes it once by
// outcome: a refund, a settle, its slots released. Below them: the policy
// (limit.go, policy.go, parse.go, lease.go, algorithm.go), the store's
// contract (store.go), outcomes and observers (outcome.go, observe.go),
// failure modes and the outage log (failure.go), the 429 (denied.go) and
// the options (options.go). The stores live under store/, each in its own
// package, with their shared helpers under store/internal; internal/
// holds the storage layout both sides derive from a policy
// (internal/layout), the circuit breaker and, under internal/testkit, the
// kits the tests run on; nothing in internal/ imports this package.
package ratelimit
