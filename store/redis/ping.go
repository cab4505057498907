package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ServerInfo is what Ping found out about the Redis servers a store uses.
type ServerInfo struct {
	// Nodes has one entry per server that answered Ping, sorted by
	// address: the server of a *goredis.Client (a single Redis, or the
	// current master of a Sentinel client), each master of a Cluster,
	// each shard of a Ring.
	Nodes []NodeInfo
}

// NodeInfo describes one Redis server that answered Ping.
type NodeInfo struct {
	// Addr is the server's address as the client dials it ("host:port").
	Addr string
	// Version is the server's redis_version (from INFO), such as
	// "7.2.4"; empty when the server does not report one (miniredis).
	Version string
	// RTT is how long the server took to answer INFO: one round trip,
	// plus the dial when Ping opened the connection.
	RTT time.Duration
}

// String describes the servers for a log line, e.g.
// "redis 7.2.4 at 127.0.0.1:6379" or "3 servers: redis 7.2.4 at
// 10.0.0.1:6379, redis 7.2.4 at 10.0.0.2:6379, redis 7.2.4 at 10.0.0.3:6379".
func (s ServerInfo) String() string {
	parts := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		v := n.Version
		if v == "" {
			v = "(version unknown)"
		}
		parts[i] = "redis " + v + " at " + n.Addr
	}
	switch len(parts) {
	case 0:
		return "no redis server"
	case 1:
		return parts[0]
	}
	return strconv.Itoa(len(parts)) + " servers: " + strings.Join(parts, ", ")
}

// pingScript checks that the server runs Lua scripts, as Take needs.
var pingScript = goredis.NewScript("return 1")

// Ping checks, once, that every server the store uses answers and can run
// what Take sends: it asks each for INFO (its version), requires
// Redis 5 or later, and runs a one-line Lua script that touches no key. It
// is meant for startup, to log where the limiter's counters live or to
// say at once why they cannot: call it with a deadline (a few seconds);
// without ContextTimeoutEnabled on the client, a hung server can hold it
// until the client's ReadTimeout.
//
// On a Cluster it asks every master (the client loads the cluster's slot
// map first), on a Ring every shard the Ring considers up; a shard it
// considers down is reported as an error.
//
// The error, starting "ratelimit/store: ping", names each server that
// failed and why: the server's own error (NOAUTH, WRONGPASS, NOPERM when
// an ACL forbids EVAL) or, when the only news is a timeout, the latest
// connection error seen below it, such as "context deadline exceeded (last
// connection error 3ms ago: dial tcp 127.0.0.1:6379: connect: connection
// refused)". When some servers answered and others did not, ServerInfo
// lists those that answered and the error the others.
func (r *Store) Ping(ctx context.Context) (ServerInfo, error) {
	var (
		mu    sync.Mutex
		info  ServerInfo
		errs  []error
		visit = func(ctx context.Context, c *goredis.Client, addr string) {
			n, err := r.pingNode(ctx, c, addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			info.Nodes = append(info.Nodes, n)
		}
	)
	switch c := r.client.(type) {
	case *goredis.ClusterClient:
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
			visit(ctx, n, n.Options().Addr)
			return nil
		})
		if err != nil { // the slot map could not be loaded
			errs = append(errs, fmt.Errorf("ratelimit/store: ping cluster %s: %w",
				strings.Join(c.Options().Addrs, ","), r.diag.explain(err)))
		}
	case *goredis.Ring:
		seen := map[string]bool{}
		_ = c.ForEachShard(ctx, func(ctx context.Context, n *goredis.Client) error {
			mu.Lock()
			seen[n.Options().Addr] = true
			mu.Unlock()
			visit(ctx, n, n.Options().Addr)
			return nil
		})
		for name, addr := range c.Options().Addrs {
			if !seen[addr] {
				errs = append(errs, fmt.Errorf("ratelimit/store: ping %s: ring shard %q is down (failed the ring's heartbeat)", addr, name))
			}
		}
	case *goredis.Client:
		addr := c.Options().Addr
		if addr == "FailoverClient" { // Sentinel: the master's address is known after a dial
			addr = "sentinel master"
			defer func() {
				if a := r.diag.remoteAddr(); a != "" && len(info.Nodes) == 1 {
					info.Nodes[0].Addr = a
				}
			}()
		}
		visit(ctx, c, addr)
	default:
		visit(ctx, nil, "redis (address unknown)")
	}
	slices.SortFunc(info.Nodes, func(a, b NodeInfo) int { return strings.Compare(a.Addr, b.Addr) })
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return info, errors.Join(errs...)
}

// pingNode asks one server for its version and runs the check script. c
// is nil when the store's client is not one go-redis type Ping knows: then
// the store's client itself is asked.
func (r *Store) pingNode(ctx context.Context, c *goredis.Client, addr string) (NodeInfo, error) {
	var cmd goredis.UniversalClient = r.client
	if c != nil {
		cmd = c
	}
	fail := func(what string, err error) (NodeInfo, error) {
		return NodeInfo{}, fmt.Errorf("ratelimit/store: ping %s: %s: %w", addr, what, r.diag.explain(err))
	}
	start := time.Now()
	text, err := cmd.Info(ctx).Result()
	rtt := time.Since(start)
	if err != nil {
		return fail("INFO", err)
	}
	n := NodeInfo{Addr: addr, Version: infoField(text, "redis_version"), RTT: rtt}
	if major, ok := majorVersion(n.Version); ok && major < 5 {
		return NodeInfo{}, fmt.Errorf("ratelimit/store: ping %s: redis %s: Redis 5 or later is required (scripts replicated by their effects)", addr, n.Version)
	}
	if err := pingScript.Run(ctx, cmd, nil).Err(); err != nil {
		return fail("cannot run Lua scripts (EVAL)", err)
	}
	return n, nil
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// majorVersion returns the major number of a version such as "7.2.4".
func majorVersion(v string) (int, bool) {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return n, err == nil
}
