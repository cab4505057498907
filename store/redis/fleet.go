package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The fleet's heartbeat (WithFleetShare): every fleetBeat each store
// writes its member in one sorted set, scored by when it lapses
// (fleetTTL after Redis's now), drops the lapsed ones and counts the
// rest: the instances that share this Redis, as last seen.
const (
	fleetBeat = 2 * time.Second
	fleetTTL  = 3 * fleetBeat
	// fleetKey follows the prefix; its hash tag puts it in one slot of a
	// Cluster.
	fleetKey = "{fleet}"
)

// fleetScript renews this instance's member and returns how many are
// live, on Redis's clock.
var fleetScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return redis.call('ZCARD', KEYS[1])
`)

// A fleet is this store's view of the instances sharing its Redis.
type fleet struct {
	client goredis.UniversalClient
	key    string
	id     string       // this instance's member
	n      atomic.Int64 // live instances at the last beat that answered; 0: never heard
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// startFleet begins the heartbeat of a store on client under prefix: the
// first beat now, then every fleetBeat until stop.
func startFleet(client goredis.UniversalClient, prefix string) *fleet {
	var id [8]byte
	_, _ = rand.Read(id[:])
	f := &fleet{client: client, key: prefix + fleetKey, id: hex.EncodeToString(id[:]), stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	return f
}

func (f *fleet) run() {
	defer close(f.done)
	t := time.NewTicker(fleetBeat)
	defer t.Stop()
	for {
		f.beat()
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
	}
}

// beat renews the member; a beat Redis does not answer keeps the count of
// the last one that did (an outage is when it matters).
func (f *fleet) beat() {
	ctx, cancel := context.WithTimeout(context.Background(), fleetBeat/2)
	defer cancel()
	n, err := fleetScript.Run(ctx, f.client, []string{f.key}, f.id, fleetTTL.Milliseconds()).Int64()
	if err == nil && n > 0 {
		f.n.Store(n)
	}
}

// instances is how many instances share the Redis, as last seen: at
// least 1.
func (f *fleet) instances() int64 { return max(f.n.Load(), 1) }

// close stops the heartbeat and takes this instance's member out, so that
// the others count one fewer at their next beat.
func (f *fleet) close() {
	f.once.Do(func() {
		close(f.stop)
		<-f.done
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		f.client.ZRem(ctx, f.key, f.id)
	})
}
