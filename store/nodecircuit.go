package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNodeUnavailable is the error of a Take whose key lives on a Redis
// Cluster master that stopped answering: its node circuit is open, so the
// store answers at once instead of waiting out the timeout again. The
// Limiter handles it like any store error, by its failure mode.
// (The store wraps it: "ratelimit/store: redis: cluster master not
// answering (node circuit open)".)
var ErrNodeUnavailable = errors.New("cluster master not answering (node circuit open)")

// Defaults of WithNodeCircuit.
const (
	DefaultNodeFailures = 3
	DefaultNodeCooldown = time.Second
)

// WithNodeCircuit sets when a Cluster store stops calling a master that does
// not answer: after failures consecutive calls to it fail (no reply: a
// timeout or a connection error; an error reply is an answer), keys on that
// master fail at once with ErrNodeUnavailable for cooldown; then one call
// probes it, and its success closes the circuit. Keys on the other masters
// are not affected. The default is 3 failures and 1s; failures ≤ 0 turns it
// off; failures > 0 with a cooldown ≤ 0 makes NewRedis fail. It applies to
// a *redis.ClusterClient only (a single server has the Limiter's own
// circuit breaker, which also covers a whole Cluster going down).
func WithNodeCircuit(failures int, cooldown time.Duration) RedisOption {
	return func(r *Redis) {
		r.nodeFailures, r.nodeCooldown = failures, cooldown
	}
}

// nodeCircuit is the circuit of one Cluster master. The closed state with no
// recent failure is read without the lock.
type nodeCircuit struct {
	open    atomic.Bool  // openUntil is set
	streak  atomic.Int64 // consecutive failures
	mu      sync.Mutex
	until   time.Time // while before it, calls fail fast
	probing bool      // a probe is out
}

// allow reports whether a call may go to the node now.
func (c *nodeCircuit) allow(now time.Time) bool {
	if !c.open.Load() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open.Load() {
		return true
	}
	if now.Before(c.until) || c.probing {
		return false
	}
	c.probing = true // one probe per cooldown
	return true
}

// Outcomes of a call, for done.
const (
	nodeUnknown  = iota // cancelled by this store: says nothing of the node
	nodeAnswered        // a reply, error replies included
	nodeFailed          // no reply: a timeout or a connection error
)

// done records the outcome of a call that allow let through.
func (c *nodeCircuit) done(outcome int, now time.Time, failures int, cooldown time.Duration) {
	if outcome == nodeAnswered && !c.open.Load() && c.streak.Load() == 0 {
		return // the common case
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probing = false
	switch outcome {
	case nodeAnswered:
		c.streak.Store(0)
		c.open.Store(false)
	case nodeFailed:
		if c.streak.Add(1) >= int64(failures) {
			c.until = now.Add(cooldown)
			c.open.Store(true)
		}
	}
}

// nodeFor returns the circuit of key's master, or nil when node circuits
// are off, the client is not a Cluster, or the master is not known yet.
func (r *Redis) nodeFor(ctx context.Context, key string) *nodeCircuit {
	cc, ok := r.client.(*redis.ClusterClient)
	if !ok || r.nodeFailures <= 0 {
		return nil
	}
	m, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	addr := m.Options().Addr
	if c, ok := r.nodes.Load(addr); ok {
		return c.(*nodeCircuit)
	}
	c, _ := r.nodes.LoadOrStore(addr, &nodeCircuit{})
	return c.(*nodeCircuit)
}

// runOnNode runs one key's script on a Cluster, through its master's
// circuit: at once ErrNodeUnavailable while the circuit is open.
func (r *Redis) runOnNode(ctx context.Context, script *redis.Script, key string, args []any) ([]int64, error) {
	c := r.nodeFor(ctx, key)
	if c != nil && !c.allow(r.nodeNow()) {
		return nil, ErrNodeUnavailable
	}
	rep, err := script.Run(ctx, r.client, []string{key}, args...).Int64Slice()
	if c != nil {
		c.done(nodeOutcome(ctx, err), r.nodeNow(), r.nodeFailures, r.nodeCooldown)
	}
	return rep, err
}

// nodeOutcome classifies err, from a call bounded by ctx: no error or an
// error reply is an answer; a call this store cancelled itself (the request
// was answered by another key) says nothing; anything else is a failure.
func nodeOutcome(ctx context.Context, err error) int {
	if err == nil || errors.Is(err, redis.Nil) {
		return nodeAnswered
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return nodeAnswered
	}
	if errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled) {
		return nodeUnknown
	}
	return nodeFailed
}

func (r *Redis) nodeNow() time.Time {
	if r.nodeClock != nil {
		return r.nodeClock()
	}
	return time.Now()
}
