package store

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

var _ ratelimit.Store = (*DenyCache)(nil)

// DenyCache wraps a Store and remembers its denials, so a client that keeps
// knocking after a 429 costs nothing but a map lookup: once the store says
// a key must wait RetryAfter for cost c, requests under the same policy
// whose keys include that key and whose cost is c are denied in process
// until then, with the same (exact) RetryAfter, without asking the store
// (0 Redis commands). A larger cost would be denied too, but may have to
// wait longer than the cached answer says, so it goes to the store; so do
// smaller costs.
//
// It never admits what the store would deny: it only ever answers "denied",
// and only while the store's own answer says no room can have appeared
// (counters only free up with time, and the wait is measured from when the
// answer arrived, which is after the store computed it). A request the
// store admits drops its keys' cached denials, since a charge makes their
// waits longer. What it cannot see: if other servers admit requests of a
// smaller cost for the same key meanwhile, the true wait for the cached
// cost grows, and a client that retries at the cached Retry-After gets
// another 429 with the new wait; with one cost per route (the usual case)
// that cannot happen. It may also deny a little longer than the store
// would, by the store's response latency, or after a Redis Cluster refund
// frees room early. Requests of cost 0 (peeks)
// and requests the cache knows nothing about go to the store.
//
// The cache holds at most a fixed number of keys (WithDenyCacheSize);
// entries leave when their wait is over or, when it is full, the one
// closest to expiry among a few sampled goes first. Safe for concurrent use.
type DenyCache struct {
	inner  ratelimit.Store
	now    func() time.Time
	seed   maphash.Seed
	shards [64]shard[*denial]
	max    int // per shard
}

// denial is a cached store answer: the key may not spend cost until until
// (Unix ns, local clock).
type denial struct {
	until, at int64 // at: when the answer arrived
	cost      int64
	d         ratelimit.Decision // with Key and Limits[].Key set to 0 (this key)
}

// DenyCacheOption configures NewDenyCache.
type DenyCacheOption func(*DenyCache)

// WithDenyCacheSize bounds the number of denied keys remembered (default
// 65,536; about 200 bytes each for a 3-limit policy).
func WithDenyCacheSize(n int) DenyCacheOption {
	return func(c *DenyCache) { c.max = max(n/len(c.shards), 1) }
}

// WithDenyCacheClock sets the clock (default time.Now); tests drive it.
func WithDenyCacheClock(now func() time.Time) DenyCacheOption {
	return func(c *DenyCache) {
		if now != nil {
			c.now = now
		}
	}
}

// NewDenyCache returns inner with a cache of its denials in front.
func NewDenyCache(inner ratelimit.Store, opts ...DenyCacheOption) *DenyCache {
	c := &DenyCache{inner: inner, now: time.Now, seed: maphash.MakeSeed()}
	c.max = 65536 / len(c.shards)
	for _, o := range opts {
		o(c)
	}
	for i := range c.shards {
		c.shards[i].m = make(map[memKey]*denial)
	}
	return c
}

func (c *DenyCache) shard(k string) *shard[*denial] {
	return &c.shards[maphash.String(c.seed, k)%uint64(len(c.shards))]
}

// Take implements ratelimit.Store.
func (c *DenyCache) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	if req.Cost > 0 && req.Policy != nil {
		now := c.now().UnixNano()
		pid := req.Policy.ID()
		for ki, k := range req.Keys {
			sh := c.shard(k)
			sh.mu.Lock()
			e, ok := sh.m[memKey{policy: pid, key: k}]
			if ok && now >= e.until {
				delete(sh.m, memKey{policy: pid, key: k})
				ok = false
			}
			var d ratelimit.Decision
			if ok && req.Cost == e.cost {
				d = e.replay(now, ki)
			}
			sh.mu.Unlock()
			if ok && req.Cost == e.cost {
				return d, nil
			}
		}
	}
	d, err := c.inner.Take(ctx, req)
	if err == nil && d.Allowed && req.Cost > 0 && req.Policy != nil {
		// A charge makes the keys' cached waits too short: forget them.
		c.forget(req)
	}
	if err != nil || d.Allowed || req.Cost == 0 || d.RetryAfter <= 0 || d.Key < 0 || d.Key >= len(req.Keys) {
		return d, err
	}
	c.remember(req, d)
	return d, nil
}

// forget drops the cached denials of req's keys under its policy.
func (c *DenyCache) forget(req ratelimit.Request) {
	pid := req.Policy.ID()
	for _, k := range req.Keys {
		sh := c.shard(k)
		sh.mu.Lock()
		if len(sh.m) > 0 {
			delete(sh.m, memKey{policy: pid, key: k})
		}
		sh.mu.Unlock()
	}
}

// remember caches a denial for the key that caused it.
func (c *DenyCache) remember(req ratelimit.Request, d ratelimit.Decision) {
	now := c.now().UnixNano()
	e := &denial{until: now + int64(d.RetryAfter), at: now, cost: req.Cost, d: d}
	e.d.Key = 0
	e.d.Limits = make([]ratelimit.LimitStatus, len(d.Limits))
	for i, l := range d.Limits {
		if l.Key != d.Key { // another key's state: not this key's to replay
			lim := req.Policy.Limit(i)
			full := lim.Rate
			if req.Policy.Algorithm() == ratelimit.TokenBucket {
				full = lim.Burst
			}
			l = ratelimit.LimitStatus{Allowed: true, Remaining: full}
		}
		l.Key = 0
		e.d.Limits[i] = l
	}
	k := req.Keys[d.Key]
	sh := c.shard(k)
	sh.mu.Lock()
	if len(sh.m) >= c.max {
		sh.evictSample(now, denialExpires)
	}
	sh.m[memKey{policy: req.Policy.ID(), key: k}] = e
	sh.mu.Unlock()
}

func denialExpires(e *denial) int64 { return e.until }

// replay returns the cached decision as seen now, for the key at index ki
// of the new request.
func (e *denial) replay(now int64, ki int) ratelimit.Decision {
	elapsed := time.Duration(now - e.at)
	d := e.d
	d.Key = ki
	d.RetryAfter = time.Duration(e.until - now)
	d.ResetAfter = max(d.ResetAfter-elapsed, d.RetryAfter)
	d.Limits = make([]ratelimit.LimitStatus, len(e.d.Limits))
	for i, l := range e.d.Limits {
		l.Key = ki
		if l.ResetAfter > 0 {
			l.ResetAfter = max(l.ResetAfter-elapsed, 0)
		}
		if l.RetryAfter > 0 {
			l.RetryAfter = max(l.RetryAfter-elapsed, 0)
			l.Allowed = l.RetryAfter == 0
		}
		d.Limits[i] = l
	}
	return d
}

// Len returns the number of denied keys remembered, expired ones not yet
// dropped included.
func (c *DenyCache) Len() int {
	n := 0
	for i := range c.shards {
		n += c.shards[i].size()
	}
	return n
}
