// Package store builds the stores a ratelimit.Limiter counts in, with short
// constructors: NewRedis, shared by a fleet of servers (a single Redis,
// Sentinel, a Cluster or a Ring); NewMemory, for one process, for tests,
// and as the fallback when Redis fails (a Redis store names one of its
// own, Redis.Fallback, which a Limiter uses unless told otherwise); and
// NewDenyCache, a local cache of denials in front of either, which names
// the fallback of the store it wraps. Each store lives in a package of its own
// (store/redis, store/memory, store/denycache), which users need only for
// what this package does not name.
//
// The memory store is the executable reference of the algorithms: the
// Redis store gives the same decisions for the same sequence of times,
// keys and costs. Package store/storetest checks any store against it;
// package store/storekit has what writers of other stores need.
package store
