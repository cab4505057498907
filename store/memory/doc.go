// Package memory is the in-process store: the same algorithms and
// decisions as the Redis store, for a single server, for tests, and as a
// Limiter's fallback when Redis fails. It is also the executable reference
// of every algorithm: the Redis store's script mirrors it, and the
// conformance suite (store/storetest) holds every store to its decisions.
//
// Its files, by job: memory.go the store (shards, identities); call.go
// one request's keys read, decided and written back (request IDs);
// refund.go Reset and Refund; engine.go one request over the states
// of its keys (all or nothing, penalties, places in line); algorithm.go
// the steps every algorithm has, one limit at a time (evaluate, report,
// refill, charge, refund), and one file per algorithm with those steps:
// sliding.go (sub-buckets), log.go (the exact log, and the layouts of
// rings grown by larger rates), fixed.go, token.go, approx.go (the
// weighted two-window approximation) and concurrent.go; pending.go places
// in line. The layout of an identity's state is internal/layout's.
//
// Most programs build it with store.NewMemory.
package memory
