package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
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
// a *goredis.ClusterClient only (a single server has the Limiter's own
// circuit breaker, which also covers a whole Cluster going down).
func WithNodeCircuit(failures int, cooldown time.Duration) Option {
	return func(r *Store) {
		r.nodeFailures, r.nodeCooldown = failures, cooldown
	}
}

// nodeCircuit is the circuit of one Cluster master: the shared breaker,
// opening on the count of failures alone (no Quiet), on the store's clock.
type nodeCircuit struct{ b breaker.Breaker }

func newNodeCircuit(failures int, cooldown time.Duration) *nodeCircuit {
	return &nodeCircuit{b: breaker.Breaker{Threshold: int64(failures), Cooldown: int64(cooldown)}}
}

// allow reports whether a call may go to the node now, and whether that
// call is the circuit's probe.
func (c *nodeCircuit) allow(now time.Time) (ok, probe bool) {
	return c.b.Allow(func() int64 { return now.UnixNano() })
}

// Outcomes of a call, for done.
const (
	nodeUnknown  = iota // says nothing of the node (cancelled by this store, pool or client trouble)
	nodeAnswered        // a reply, error replies included
	nodeFailed          // no reply: a timeout or a connection error
)

// done records the outcome of a call that allow let through; probe is what
// allow said of it. Any answer closes the circuit: the node is alive.
func (c *nodeCircuit) done(outcome int, probe bool, now time.Time) {
	if outcome == nodeUnknown {
		c.b.Forget(probe)
		return
	}
	c.b.Record(func() int64 { return now.UnixNano() }, outcome == nodeAnswered, probe)
}

// nodeFor returns the circuit of key's master, or nil when node circuits
// are off, the client is not a Cluster, or the master is not known yet.
func (r *Store) nodeFor(ctx context.Context, key string) *nodeCircuit {
	return r.circuitOf(r.nodeOf(ctx, key))
}

// circuitOf returns the circuit of a Cluster's master, or nil when node
// circuits are off or node is nil (not a Cluster's, or not known).
func (r *Store) circuitOf(node *goredis.Client) *nodeCircuit {
	if _, ok := r.client.(*goredis.ClusterClient); !ok || node == nil || r.nodeFailures <= 0 {
		return nil
	}
	addr := node.Options().Addr
	if c, ok := r.nodes.Load(addr); ok {
		return c.(*nodeCircuit)
	}
	c, _ := r.nodes.LoadOrStore(addr, newNodeCircuit(r.nodeFailures, r.nodeCooldown))
	return c.(*nodeCircuit)
}

// runOnNode runs one key's script on a Cluster (or a Ring), through its
// master's circuit: at once ErrNodeUnavailable while the circuit is open;
// batched with the node's other calls (runBatched). keys live in one
// slot: the key, and its request-ID record.
func (r *Store) runOnNode(ctx context.Context, script *script, keys []string, args []any) ([]int64, error) {
	node := r.nodeOf(ctx, keys[0])
	c := r.circuitOf(node)
	var probe bool
	if c != nil {
		var ok bool
		if ok, probe = c.allow(r.nodeNow()); !ok {
			return nil, ErrNodeUnavailable
		}
	}
	reply, err := r.runBatched(ctx, node, script, keys, args)
	if c != nil {
		c.done(nodeOutcome(ctx, err, time.Now()), probe, r.nodeNow())
	}
	return reply, err
}

// nodeOutcome classifies err, from a call bounded by ctx that returned at
// now: no error or an error reply is an answer. A call still running at
// its deadline is a failure even if this store cancelled it meanwhile
// (go-redis does not interrupt a blocked read on cancel). A call cancelled
// earlier (the request was answered by another key), a full connection
// pool and a closed client say nothing of the node. Anything else (a
// timeout, a connection error) is a failure.
func nodeOutcome(ctx context.Context, err error, now time.Time) int {
	if err == nil || errors.Is(err, goredis.Nil) {
		return nodeAnswered
	}
	var reply goredis.Error
	if errors.As(err, &reply) {
		return nodeAnswered
	}
	if dl, ok := ctx.Deadline(); ok && !now.Before(dl) {
		return nodeFailed
	}
	if errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled) ||
		errors.Is(err, goredis.ErrPoolTimeout) || errors.Is(err, goredis.ErrClosed) {
		return nodeUnknown
	}
	return nodeFailed
}

func (r *Store) nodeNow() time.Time {
	if r.nodeClock != nil {
		return r.nodeClock()
	}
	return time.Now()
}
