package redis

import (
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Option configures NewRedis.
type Option func(*Store)

// WithPrefix sets the key prefix (default DefaultPrefix, "rl:"), to
// namespace applications sharing one Redis. Printable ASCII without braces,
// at most 64 bytes.
func WithPrefix(prefix string) Option { return func(r *Store) { r.prefix = prefix } }

// WithClock makes the scripts read now() instead of Redis TIME: for
// conformance tests (store/storetest) and replays, which drive one clock
// for several stores. Never set it in production: a fleet's servers would
// each count on their own clock. Redis still expires keys in real time,
// which must not cut a replayed trace short on a slow machine, so keys are
// kept an hour longer (expired state reads as empty either way, so the
// longer life changes no decision).
func WithClock(now func() time.Time) Option {
	return func(r *Store) { r.now, r.ttlExtra = now, time.Hour }
}

// WithFleetShare shapes the fallback by the fleet: while Redis answers,
// each store keeps a heartbeat there (one key for the stores of one
// prefix, a few bytes each, a write every 2 s) and so knows how many
// instances share it; while Redis fails, its fallback (Fallback) admits
// each limit's share, the limit divided by the instances last seen,
// rounded up. A client whose requests spread over the fleet then gets
// about the limit fleet-wide during an outage (3 instances, 10/s: at most
// 12 a second) instead of the limit on every instance (30). A client
// pinned to one instance gets its share alone (4 a second): under-
// admission, which is why the option is off by default. A leased policy
// is not shared (its grants already spread the quota). Close stops the
// heartbeat.
func WithFleetShare() Option { return func(r *Store) { r.fleetShare = true } }

// NewRedis returns a Store on client: a *goredis.Client (single Redis or
// Sentinel via goredis.NewFailoverClient), a *goredis.ClusterClient or a
// *goredis.Ring (sharded like a Cluster: each identity's script goes to its
// own shard). Any other client is used as one server.
//
// Timeouts: Take never outlives its context's deadline. go-redis enforces
// context deadlines on the socket only when the client was built with
// ContextTimeoutEnabled: true; set it, and Take calls Redis directly. Without
// it, Take still returns at the deadline, but runs each call on a goroutine
// to do so (slower, and the abandoned call holds a connection until the
// client's ReadTimeout). On a Cluster, set it too: then, with a master
// down, a request whose other identities live elsewhere still gets their
// answer in time (a denial there stands) instead of a timeout. With
// go-redis's default dial and command retries, a refused connection costs
// each request the whole timeout; the package documentation says which
// client options make it fail at once.
//
// While Redis fails, a Limiter without WithFallback and WithFailureMode
// decides with the store's fallback, a memory store of this process (see
// Fallback).
//
// NewRedis adds a go-redis hook to client (on a Cluster or Ring, also to
// its nodes' clients) that watches failed dials and commands, so that an
// error that would say only "context deadline exceeded" also names the
// latest cause, such as a refused connection; see Ping for a startup check.
// As with any go-redis AddHook, build the store before other goroutines
// send commands on the client.
func New(client goredis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("ratelimit/store: NewRedis: nil client")
	}
	r := &Store{client: client, prefix: DefaultPrefix, scripts: scripts{maxBaked: maxBaked},
		nodeFailures: DefaultNodeFailures, nodeCooldown: DefaultNodeCooldown,
		batch: &batcher{max: DefaultBatching}}
	for _, o := range opts {
		o(r)
	}
	if err := validPrefix(r.prefix); err != nil {
		return nil, err
	}
	if r.nodeFailures > 0 && r.nodeCooldown <= 0 {
		return nil, fmt.Errorf("ratelimit/store: WithNodeCircuit(%d, %s): want a positive cooldown (or failures 0 to turn it off)", r.nodeFailures, r.nodeCooldown)
	}
	switch c := client.(type) {
	case *goredis.ClusterClient:
		r.cluster = true
		r.ctxHonored = c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		// A Ring shards by key like a Cluster: one script per key, each
		// sent to its own shard.
		r.cluster = true
		r.ctxHonored = c.Options().ContextTimeoutEnabled
	case *goredis.Client:
		r.ctxHonored = c.Options().ContextTimeoutEnabled
	}
	if r.cluster && r.batch != nil {
		// A Cluster pipeline returns when its slowest node answers, so a
		// batch of several nodes' calls would make live nodes' requests
		// wait for a dead one: each node batches on its own.
		r.nodeBatching, r.batch = r.batch.max, nil
		if !r.batchSet {
			r.nodeBatching = DefaultNodeBatching
		}
	}
	if r.batch != nil {
		r.batch.client = client
	}
	r.denied = newDeniedKeys(r.now)
	r.diag = diagnose(client) // adds a go-redis hook: errors then name their cause
	if r.fleetShare {
		r.fleet = startFleet(client, r.prefix)
	}
	r.fallback = newFallback(r)
	return r, nil
}
