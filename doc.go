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
// Most callers want New and Limiter.Handler:
//
//	st, _ := store.NewRedis(redisClient)   // or store.NewMemory() for one process
//	lim, err := ratelimit.New(st, ratelimit.MustParsePolicy("10/s, 120/m, 240/h"))
//	...
//	r.With(lim.Handler).Get("/api/hello", hello) // chi; or lim.Handler(mux)
//
// Limiter.Allow and Limiter.AllowN decide outside HTTP (jobs, queues).
//
// With the Redis store, one request is one Redis round trip, whatever the
// number of limits and identifiers: one Lua script checks and charges
// everything using Redis's own clock. The in-memory store gives the same
// decisions in one process and serves as the fallback when Redis fails.
//
// Algorithms: SlidingWindow (the default; never admits more than Rate in
// any interval of length Period), FixedWindow (cheapest; up to 2× Rate
// across a window edge) and TokenBucket (GCRA; a smooth rate with an
// explicit burst). Each Algorithm's documentation states its guarantee.
//
// A Limiter is safe for concurrent use; build it once at startup: New
// validates the whole configuration and returns an error rather than
// failing at request time.
package ratelimit
