package redistest

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterTimeout bounds how long StartCluster waits for the nodes to agree.
	clusterTimeout = 20 * time.Second
	// clusterNodeTimeout is cluster-node-timeout, in milliseconds: how long a
	// node may be unreachable before the others consider it failing.
	clusterNodeTimeout = "3000"
)

// Cluster is a Redis Cluster of masters without replicas, started by
// StartCluster. Hash slots are split evenly, in order: master 0 owns the
// lowest slots, the last master the highest.
type Cluster struct {
	// Addrs are the masters' "127.0.0.1:port" addresses, by index.
	Addrs []string

	nodes  []*Server
	ranges []slotRange // ranges[i] is owned by nodes[i]
}

type slotRange struct{ lo, hi int }

// StartCluster starts masters redis-server processes with cluster mode on,
// assigns each an equal share of the 16384 slots, joins them with CLUSTER
// MEET and waits until every node reports cluster_state:ok and the same slot
// map. All nodes are killed when the test finishes.
//
// The nodes run with cluster-require-full-coverage no, so after Kill the
// surviving masters keep serving their own slots while commands for the dead
// master's slots fail. (With 2 masters, killing one loses the majority and the
// survivor stops serving too once it marks the other as failed.)
//
// Without redis-server in PATH the test is skipped, or fails if Require().
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 || masters > numSlots {
		t.Fatalf("redistest: StartCluster: need between 1 and %d masters, got %d", numSlots, masters)
	}
	bin := serverBinary(t)
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		s := startNode(t, bin, true, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to --dir
			"--cluster-node-timeout", clusterNodeTimeout,
			"--cluster-require-full-coverage", "no",
			"--cluster-announce-ip", "127.0.0.1",
		})
		c.nodes = append(c.nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
		c.ranges = append(c.ranges, slotRange{lo: i * numSlots / masters, hi: (i+1)*numSlots/masters - 1})
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	admin := make([]*redis.Client, masters)
	for i, addr := range c.Addrs {
		admin[i] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
		defer admin[i].Close()
	}

	for i, a := range admin {
		// Distinct config epochs up front, as a cluster creator should, so the
		// nodes need not resolve epoch collisions among themselves.
		if err := a.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("redistest: %s: CLUSTER SET-CONFIG-EPOCH: %v", c.Addrs[i], err)
		}
		if err := addSlots(ctx, a, c.ranges[i]); err != nil {
			t.Fatalf("redistest: %s: assign slots %d-%d: %v", c.Addrs[i], c.ranges[i].lo, c.ranges[i].hi, err)
		}
	}
	for i := 1; i < masters; i++ {
		host, port, _ := net.SplitHostPort(c.Addrs[i])
		if err := admin[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("redistest: %s: CLUSTER MEET %s: %v", c.Addrs[0], c.Addrs[i], err)
		}
	}

	want := c.expectedSlots()
	var problem string
	for {
		problem = c.notReady(ctx, admin, want)
		if problem == "" {
			t.Logf("redistest: cluster of %d masters ready: %s", masters, strings.Join(c.Addrs, " "))
			return c
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	var nodes strings.Builder
	for i, a := range admin {
		out, err := a.ClusterNodes(context.Background()).Result()
		fmt.Fprintf(&nodes, "--- CLUSTER NODES from %s (err %v) ---\n%s", c.Addrs[i], err, out)
	}
	t.Fatalf("redistest: cluster not ready within %v: %s\n%s", clusterTimeout, problem, nodes.String())
	return nil
}

// addSlots assigns r with CLUSTER ADDSLOTSRANGE (Redis 7+), or with
// CLUSTER ADDSLOTS on servers that do not know it.
func addSlots(ctx context.Context, a *redis.Client, r slotRange) error {
	err := a.ClusterAddSlotsRange(ctx, r.lo, r.hi).Err()
	if err == nil || !isUnknownCommand(err) {
		return err
	}
	slots := make([]int, 0, r.hi-r.lo+1)
	for s := r.lo; s <= r.hi; s++ {
		slots = append(slots, s)
	}
	return a.ClusterAddSlots(ctx, slots...).Err()
}

func isUnknownCommand(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown subcommand") || strings.Contains(msg, "unknown command")
}

// expectedSlots renders the slot map the cluster must converge to.
func (c *Cluster) expectedSlots() string {
	parts := make([]string, len(c.ranges))
	for i, r := range c.ranges {
		parts[i] = fmt.Sprintf("%d-%d@%s", r.lo, r.hi, c.Addrs[i])
	}
	return strings.Join(parts, " ")
}

// notReady returns why the cluster is not ready yet, or "" when every node
// says cluster_state:ok, knows all nodes, and reports the expected slot map.
func (c *Cluster) notReady(ctx context.Context, admin []*redis.Client, want string) string {
	for i, a := range admin {
		info, err := a.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER INFO: %v", c.Addrs[i], err)
		}
		for _, need := range []string{
			"cluster_state:ok",
			"cluster_slots_assigned:16384",
			fmt.Sprintf("cluster_known_nodes:%d", len(admin)),
		} {
			if !hasInfoLine(info, need) {
				return fmt.Sprintf("%s: CLUSTER INFO lacks %q", c.Addrs[i], need)
			}
		}
		//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; the tests run on older servers too
		slots, err := a.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Sprintf("%s: CLUSTER SLOTS: %v", c.Addrs[i], err)
		}
		sort.Slice(slots, func(x, y int) bool { return slots[x].Start < slots[y].Start })
		parts := make([]string, len(slots))
		for j, s := range slots {
			addr := "?"
			if len(s.Nodes) > 0 {
				addr = s.Nodes[0].Addr
			}
			parts[j] = fmt.Sprintf("%d-%d@%s", s.Start, s.End, addr)
		}
		if got := strings.Join(parts, " "); got != want {
			return fmt.Sprintf("%s: slot map %q, want %q", c.Addrs[i], got, want)
		}
	}
	return ""
}

func hasInfoLine(info, line string) bool {
	for _, l := range strings.Split(info, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// Client returns a go-redis cluster client seeded with all masters, closed
// when the test finishes.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Kill stops master i (an index into Addrs) with SIGKILL and waits for it to
// exit. There are no replicas, so its slots stay unserved.
func (c *Cluster) Kill(t testing.TB, i int) {
	t.Helper()
	if i < 0 || i >= len(c.nodes) {
		t.Fatalf("redistest: Cluster.Kill(%d): only %d masters", i, len(c.nodes))
	}
	c.nodes[i].Kill(t)
}

// Pause freezes master i with SIGSTOP (connections stay open, nothing
// answers); Resume thaws it. Keep a pause shorter than the cluster node
// timeout (3s), or the other masters mark it failed.
func (c *Cluster) Pause(t testing.TB, i int) { c.node(t, i).Pause(t) }

// Resume thaws master i after Pause.
func (c *Cluster) Resume(t testing.TB, i int) { c.node(t, i).Resume(t) }

func (c *Cluster) node(t testing.TB, i int) *Server {
	t.Helper()
	if i < 0 || i >= len(c.nodes) {
		t.Fatalf("redistest: Cluster: no master %d (only %d)", i, len(c.nodes))
	}
	return c.nodes[i]
}

// NodeForKey returns the index in Addrs of the master that owns key's hash
// slot, honouring hash tags ("{user:42}.a" and "{user:42}.b" share a slot).
// It is computed locally and does not need the master to be alive.
func (c *Cluster) NodeForKey(key string) int {
	slot := keySlot(key)
	for i, r := range c.ranges {
		if slot >= r.lo && slot <= r.hi {
			return i
		}
	}
	panic(fmt.Sprintf("redistest: slot %d of %q is not in the cluster's slot map", slot, key))
}
