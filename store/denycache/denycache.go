package denycache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/shardmap"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

var (
	_ storekit.Complete      = (*Cache)(nil)
	_ storekit.FallbackStore = (*Cache)(nil)
)

// DefaultMaxHold is how long the deny cache holds a denial at
// most, unless WithMaxHold says otherwise.
const DefaultMaxHold = time.Second

// Cache wraps a Store and remembers its denials, so a client that keeps
// knocking after a 429 costs nothing but a map lookup: once the store says
// a key must wait RetryAfter for cost c, requests under the same policy
// whose keys include that key and whose cost is c are denied in process
// until then (but for at most the maximum hold, WithMaxHold, 1s by
// default), with the same (exact) RetryAfter, without asking the store (0
// Redis commands). A larger cost would be denied too, but may have to wait
// longer than the cached answer says, so it goes to the store; so do
// smaller costs, peeks (cost 0), requests with an ID (Request.ID), every
// request under a policy with a penalty (BlockFor: a denial starts one in
// the store, which a cached answer would not), and requests the cache
// knows nothing about.
//
// It never admits what the store would deny: it only ever answers "denied".
// Waits are measured on the process's monotonic clock from when the
// store's answer arrived (after the store computed it), so a change of the
// wall clock cannot stretch them; a clock that reads earlier than an
// entry's arrival drops the entry. A request the store admits, a Reset and
// a Refund through the cache drop their keys' cached denials, since they
// change the keys' waits.
//
// What it cannot see: a Reset, a refund or a Cluster refund made by another
// process (or behind the cache's back) frees room early, and other
// processes' charges of a smaller cost for the same key make the true wait
// longer. So a cached denial may deny up to the maximum hold (and the
// store's response latency) longer than the store would; and a client that
// retries at the cached Retry-After may get another 429 with the new wait.
// The maximum hold bounds the first: after a Reset anywhere, every
// process's cache agrees with the store within it.
//
// The cache holds at most a fixed number of keys (WithSize);
// entries leave when their hold is over or, when it is full, the one
// closest to expiry among a few sampled goes first. Keys longer than 128
// bytes are held as a 128-bit hash, as the stores hold them. Safe for
// concurrent use. It forwards the optional operations (Reset, Refund,
// Settle, Release, Renew, Reserve, TakeUpTo, Lease) to the wrapped store, and returns an error wrapping
// errors.ErrUnsupported when that store lacks one; it names the wrapped
// store's fallback (Fallback) as its own.
var _ storekit.Leaser = (*Cache)(nil)

type Cache struct {
	inner   ratelimit.Store
	now     func() time.Time
	seed    maphash.Seed
	shards  [64]shardmap.Shard[*denial]
	max     int           // per shard
	maxHold time.Duration // how long one answer is held at most
}

// denial is a cached store answer, arrived at at: the key may not spend
// cost for wait after that; the entry is held for hold (≤ wait). Elapsed
// time is a difference of two clock readings (monotonic for time.Now).
type denial struct {
	at         time.Time
	wait, hold time.Duration
	cost       int64
	// def is the policy's definition (storekit.Definition): policies of
	// one ID share the key's counters, but a denial under one's rates is
	// no answer under another's. A key keeps one denial, the latest:
	// while two rates take turns on a key (a rolling deploy), each asks
	// the store.
	def string
	d   ratelimit.Decision // with Key and Limits[].Key set to 0 (this key)
}

// base orders the deny cache's entries for eviction (the one that expires
// first goes first): its readings and entries' arrival times are compared
// by Sub, monotonic for time.Now.
var base = time.Now()

func denialExpires(e *denial) int64 { return int64(e.at.Sub(base) + e.hold) }

// Option configures New.
type Option func(*Cache)

// WithSize bounds the number of denied keys remembered (default
// 65,536; about 200 bytes each for a 3-limit policy).
func WithSize(n int) Option {
	return func(c *Cache) { c.max = max(n/len(c.shards), 1) }
}

// WithMaxHold bounds how long one answer of the store is held
// (default DefaultMaxHold, 1s): after that the next request asks
// the store again. It is how much longer than the store a cached denial can
// deny after a Reset or refund made elsewhere. d ≤ 0 means the default.
func WithMaxHold(d time.Duration) Option {
	return func(c *Cache) {
		if d > 0 {
			c.maxHold = d
		}
	}
}

// WithClock sets the clock (default time.Now); tests drive it.
// Waits are differences of its readings (monotonic for time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *Cache) {
		if now != nil {
			c.now = now
		}
	}
}

// New returns inner with a cache of its denials in front.
func New(inner ratelimit.Store, opts ...Option) *Cache {
	c := &Cache{inner: inner, now: time.Now, seed: maphash.MakeSeed(), maxHold: DefaultMaxHold}
	c.max = 65536 / len(c.shards)
	for _, o := range opts {
		o(c)
	}
	for i := range c.shards {
		c.shards[i].M = make(map[shardmap.Key]*denial)
	}
	return c
}

func (c *Cache) shard(k string) *shardmap.Shard[*denial] {
	return &c.shards[maphash.String(c.seed, k)%uint64(len(c.shards))]
}

// Take implements ratelimit.Store.
func (c *Cache) Take(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	// Under a penalty (BlockFor), a denial starts one in the store once the
	// last has run out, which a denial answered from the cache would not:
	// the key would then admit, through a call the cache does not answer
	// (TakeUpTo, Reserve), what its penalty denies. So no denial of such a
	// policy is answered from the cache.
	if req.Cost > 0 && req.Policy != nil && req.ID == "" && req.Policy.BlockFor() == 0 {
		if d, ok := c.lookup(req); ok {
			return d, nil
		}
	}
	d, err := c.inner.Take(ctx, req)
	return c.after(req, d, err, true)
}

// lookup answers req from a cached denial of one of its keys.
func (c *Cache) lookup(req ratelimit.Request) (ratelimit.Decision, bool) {
	now := c.now()
	pid, def := req.Policy.ID(), storekit.Definition(req.Policy)
	for ki, k := range req.Keys {
		sh := c.shard(k)
		mk := shardmap.KeyOf(pid, k)
		sh.Mu.Lock()
		e, ok := sh.M[mk]
		var elapsed time.Duration
		if ok {
			elapsed = now.Sub(e.at)
			if elapsed >= e.hold || elapsed < 0 { // over, or the clock went back
				delete(sh.M, mk)
				ok = false
			}
		}
		var d ratelimit.Decision
		hit := ok && req.Cost == e.cost && e.def == def
		if hit {
			d = e.replay(elapsed, ki)
		}
		sh.Mu.Unlock()
		if hit {
			return d, true
		}
	}
	return ratelimit.Decision{}, false
}

// after checks the inner store's answer and keeps the cache in step with it.
func (c *Cache) after(req ratelimit.Request, d ratelimit.Decision, err error, cacheable bool) (ratelimit.Decision, error) {
	if err != nil {
		return d, err
	}
	if req.Policy != nil {
		if err := d.Check(req); err != nil {
			return ratelimit.Decision{}, fmt.Errorf("ratelimit/store: deny cache: the wrapped store answered an %w", err)
		}
	}
	if (d.Granted > 0 || d.Allowed && req.Cost > 0) && req.Policy != nil {
		// A charge makes the keys' cached waits too short: forget them.
		c.forget(req.Policy.ID(), req.Keys)
	}
	if cacheable && !d.Allowed && req.Cost > 0 && req.ID == "" && d.RetryAfter > 0 {
		c.remember(req, d)
	}
	return d, nil
}

// forget drops the cached denials of keys under policy pid.
func (c *Cache) forget(pid string, keys []string) {
	for _, k := range keys {
		sh := c.shard(k)
		sh.Mu.Lock()
		if len(sh.M) > 0 {
			delete(sh.M, shardmap.KeyOf(pid, k))
		}
		sh.Mu.Unlock()
	}
}

// remember caches a denial for the key that caused it.
func (c *Cache) remember(req ratelimit.Request, d ratelimit.Decision) {
	now := c.now()
	e := &denial{at: now, wait: d.RetryAfter, hold: min(d.RetryAfter, c.maxHold), cost: req.Cost, def: storekit.Definition(req.Policy), d: d}
	e.d.Key = 0
	e.d.Receipt = ratelimit.Receipt{}
	e.d.Limits = make([]ratelimit.LimitStatus, len(d.Limits))
	for i, l := range d.Limits {
		if l.Key != d.Key { // another key's state: not this key's to replay
			l = ratelimit.LimitStatus{Allowed: true, Remaining: plan.Layout(req.Policy).Limits[i].Capacity}
		}
		l.Key = 0
		e.d.Limits[i] = l
	}
	k := req.Keys[d.Key]
	sh := c.shard(k)
	sh.Mu.Lock()
	if len(sh.M) >= c.max {
		sh.EvictSample(int64(now.Sub(base)), denialExpires, nil)
	}
	sh.M[shardmap.KeyOf(req.Policy.ID(), k)] = e
	sh.Mu.Unlock()
}

// replay returns the cached decision as seen elapsed after it arrived, for
// the key at index ki of the new request.
func (e *denial) replay(elapsed time.Duration, ki int) ratelimit.Decision {
	d := e.d
	d.Key = ki
	d.RetryAfter = e.wait - elapsed
	d.ResetAfter = max(d.ResetAfter-elapsed, d.RetryAfter)
	d.RefillAfter = max(d.RefillAfter-elapsed, 0)
	d.Limits = make([]ratelimit.LimitStatus, len(e.d.Limits))
	for i, l := range e.d.Limits {
		l.Key = ki
		if l.ResetAfter > 0 {
			l.ResetAfter = max(l.ResetAfter-elapsed, 0)
		}
		l.RefillAfter = max(l.RefillAfter-elapsed, 0)
		if l.RetryAfter > 0 {
			l.RetryAfter = max(l.RetryAfter-elapsed, 0)
			l.Allowed = l.RetryAfter == 0
		}
		d.Limits[i] = l
	}
	return d
}

// Reset implements storekit.Resetter: it forgets the keys' cached denials
// and resets them in the wrapped store.
func (c *Cache) Reset(ctx context.Context, p *ratelimit.Policy, keys ...string) error {
	rs, ok := c.inner.(storekit.Resetter)
	if !ok {
		return unsupported("Reset", c.inner)
	}
	if p != nil {
		c.forget(p.ID(), keys)
	}
	err := rs.Reset(ctx, p, keys...)
	if p != nil {
		c.forget(p.ID(), keys) // denials cached while the reset was on its way
	}
	return err
}

// Refund implements storekit.Refunder: it refunds in the wrapped store and
// forgets the keys' cached denials.
func (c *Cache) Refund(ctx context.Context, r ratelimit.Receipt) error {
	rf, ok := c.inner.(storekit.Refunder)
	if !ok {
		return unsupported("Refund", c.inner)
	}
	err := rf.Refund(ctx, r)
	if ch := r; ch.Policy != nil {
		c.forget(ch.Policy.ID(), ch.Keys)
	}
	return err
}

// Settle implements storekit.Settler: it settles in the wrapped store and
// forgets the keys' cached denials (a settle below the charge gives room
// back; above it, the store has the new wait).
func (c *Cache) Settle(ctx context.Context, r ratelimit.Receipt, actual int64) error {
	st, ok := c.inner.(storekit.Settler)
	if !ok {
		return unsupported("Settle", c.inner)
	}
	err := st.Settle(ctx, r, actual)
	if ch := r; ch.Policy != nil {
		c.forget(ch.Policy.ID(), ch.Keys)
	}
	return err
}

// Release implements storekit.Releaser: it frees the slots in the
// wrapped store and forgets the keys' cached denials (a slot freed is room).
func (c *Cache) Release(ctx context.Context, r ratelimit.Receipt) error {
	rl, ok := c.inner.(storekit.Releaser)
	if !ok {
		return unsupported("Release", c.inner)
	}
	err := rl.Release(ctx, r)
	if ch := r; ch.Policy != nil {
		c.forget(ch.Policy.ID(), ch.Keys)
	}
	return err
}

// Renew implements storekit.Releaser: it renews in the wrapped store.
func (c *Cache) Renew(ctx context.Context, r ratelimit.Receipt) (ratelimit.Receipt, error) {
	rl, ok := c.inner.(storekit.Releaser)
	if !ok {
		return r, unsupported("Renew", c.inner)
	}
	return rl.Renew(ctx, r)
}

// Reserve implements storekit.Reserver (the cache is not consulted).
func (c *Cache) Reserve(ctx context.Context, req ratelimit.Request, maxDelay time.Duration) (ratelimit.Decision, error) {
	rs, ok := c.inner.(storekit.Reserver)
	if !ok {
		return ratelimit.Decision{}, unsupported("Reserve", c.inner)
	}
	d, err := rs.Reserve(ctx, req, maxDelay)
	return c.after(req, d, err, false)
}

// TakeUpTo implements storekit.Granter (the cache is not consulted).
func (c *Cache) TakeUpTo(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	g, ok := c.inner.(storekit.Granter)
	if !ok {
		return ratelimit.Decision{}, unsupported("TakeUpTo", c.inner)
	}
	d, err := g.TakeUpTo(ctx, req)
	return c.after(req, d, err, false)
}

// Lease implements storekit.Leaser (the cache is not consulted).
func (c *Cache) Lease(ctx context.Context, req ratelimit.Request, hold time.Duration) (ratelimit.Decision, error) {
	l, ok := c.inner.(storekit.Leaser)
	if !ok {
		return ratelimit.Decision{}, unsupported("Lease", c.inner)
	}
	d, err := l.Lease(ctx, req, hold)
	return c.after(req, d, err, false)
}

// Fallback implements storekit.FallbackStore: it returns the wrapped
// store's fallback (the Redis store's memory store), or nil when the
// wrapped store names none. The fallback is used as it is, without a deny
// cache in front: it answers in process anyway.
func (c *Cache) Fallback() ratelimit.Store {
	if f, ok := c.inner.(storekit.FallbackStore); ok {
		return f.Fallback()
	}
	return nil
}

func unsupported(what string, s ratelimit.Store) error {
	return fmt.Errorf("ratelimit/store: deny cache: the wrapped store (%T) has no %s: %w", s, what, errors.ErrUnsupported)
}

// Len returns the number of denied keys remembered, expired ones not yet
// dropped included.
func (c *Cache) Len() int {
	n := 0
	for i := range c.shards {
		n += c.shards[i].Size()
	}
	return n
}
