package store

import (
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/denycache"
	"github.com/ratelimitkit/ratelimit/store/memory"
	"github.com/ratelimitkit/ratelimit/store/redis"
)

// The stores, and the options of their constructors, are those of their
// own packages; see there for what each does.
type (
	// Redis is the Redis store (store/redis.Store).
	Redis = redis.Store
	// RedisOption configures NewRedis.
	RedisOption = redis.Option
	// Memory is the memory store (store/memory.Store).
	Memory = memory.Store
	// MemoryOption configures NewMemory.
	MemoryOption = memory.Option
	// DenyCache is the cache of denials (store/denycache.Cache).
	DenyCache = denycache.Cache
	// DenyCacheOption configures NewDenyCache.
	DenyCacheOption = denycache.Option
	// ServerInfo is what Redis.Ping reports of the servers.
	ServerInfo = redis.ServerInfo
)

// Defaults of the stores' options.
const (
	DefaultPrefix, DefaultBatching           = redis.DefaultPrefix, redis.DefaultBatching
	DefaultNodeBatching                      = redis.DefaultNodeBatching
	DefaultNodeFailures, DefaultNodeCooldown = redis.DefaultNodeFailures, redis.DefaultNodeCooldown
	DefaultMaxHold                           = denycache.DefaultMaxHold
)

// ErrNodeUnavailable is wrapped by the error of a call to a Cluster master
// whose node circuit is open (see WithNodeCircuit).
var ErrNodeUnavailable = redis.ErrNodeUnavailable

// NewRedis returns a store whose counters live in Redis; see redis.New.
func NewRedis(client goredis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	return redis.New(client, opts...)
}

// NewRedisURL returns a store on a client of its own for the Redis that
// url names ("redis://host:6379/0", "rediss://" for TLS), with the
// fail-fast options the README recommends; see redis.NewFromURL. The
// store's Close closes that client.
func NewRedisURL(url string, opts ...RedisOption) (*Redis, error) {
	return redis.NewFromURL(url, opts...)
}

// WithFleetShare makes a Redis store's fallback admit each limit's share
// of the fleet during an outage; see redis.WithFleetShare.
func WithFleetShare() RedisOption { return redis.WithFleetShare() }

// WithPrefix sets the Redis key prefix; see redis.WithPrefix.
func WithPrefix(prefix string) RedisOption { return redis.WithPrefix(prefix) }

// WithBatching sets how concurrent calls share round trips; see
// redis.WithBatching.
func WithBatching(inFlight int) RedisOption { return redis.WithBatching(inFlight) }

// WithNodeCircuit sets the circuit of each Cluster master; see
// redis.WithNodeCircuit.
func WithNodeCircuit(failures int, cooldown time.Duration) RedisOption {
	return redis.WithNodeCircuit(failures, cooldown)
}

// NewMemory returns an in-process store; see memory.New.
func NewMemory(opts ...MemoryOption) *Memory { return memory.New(opts...) }

// WithClock sets the memory store's clock; see memory.WithClock.
func WithClock(now func() time.Time) MemoryOption { return memory.WithClock(now) }

// WithShards sets the memory store's shards; see memory.WithShards.
func WithShards(n int) MemoryOption { return memory.WithShards(n) }

// WithMaxKeys bounds the identities the memory store holds; see
// memory.WithMaxKeys.
func WithMaxKeys(n int) MemoryOption { return memory.WithMaxKeys(n) }

// NewDenyCache returns inner with a cache of its denials in front; see
// denycache.New.
func NewDenyCache(inner ratelimit.Store, opts ...DenyCacheOption) *DenyCache {
	return denycache.New(inner, opts...)
}

// WithSize bounds the denials a DenyCache remembers; see
// denycache.WithSize.
func WithSize(n int) DenyCacheOption { return denycache.WithSize(n) }

// WithMaxHold bounds how long a DenyCache holds one denial; see
// denycache.WithMaxHold. (Its clock, for tests: denycache.WithClock.)
func WithMaxHold(d time.Duration) DenyCacheOption { return denycache.WithMaxHold(d) }
