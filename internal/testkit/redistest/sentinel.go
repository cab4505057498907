package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMasterName is the name under which the sentinels of
// StartSentinel monitor their master (FailoverOptions.MasterName).
const SentinelMasterName = "mymaster"

const (
	// sentinelCount is the number of sentinels; sentinelQuorum of them must
	// agree that the master is down before one of them fails it over.
	sentinelCount  = 3
	sentinelQuorum = 2
	// SentinelDownAfter is the sentinels' down-after-milliseconds: how long
	// the master may go unanswered before a sentinel considers it down.
	SentinelDownAfter = 1000 * time.Millisecond
	// SentinelFailoverTimeout is the sentinels' failover-timeout. Among
	// other things, a sentinel whose failover attempt failed (say, a split
	// vote) tries again after twice this.
	SentinelFailoverTimeout = 2000 * time.Millisecond
	// sentinelReadyTimeout bounds how long StartSentinel waits for the
	// replica to sync and the sentinels to find it and each other.
	sentinelReadyTimeout = 30 * time.Second
)

// Sentinel is a Redis master, one replica of it and three Sentinel
// processes monitoring them, all on loopback, started by StartSentinel.
//
// Timings are short so that a failover completes in a few seconds: a
// sentinel considers the master down after SentinelDownAfter without an
// answer, and two sentinels must agree before one of them promotes the
// replica.
type Sentinel struct {
	// MasterName is the monitored master's name, SentinelMasterName.
	MasterName string
	// Addrs are the sentinels' "127.0.0.1:port" addresses.
	Addrs []string
	// Master and Replica are the data servers as started. After a failover
	// their roles are swapped: MasterAddr tells which one is master now.
	Master, Replica *Server

	sentinels []*Server
}

// StartSentinel starts a master, a replica of it (replicaof, asynchronous
// replication as Redis always does), and three sentinels monitoring the
// master with a quorum of 2; each sentinel gets a writable configuration
// file in its own temporary directory (Sentinel rewrites it). It returns
// once the replica is in sync and every sentinel knows the master, the
// replica and the two other sentinels, so a failover can start as soon as
// the master dies. Everything is killed when the test finishes.
//
// Without redis-server in PATH the test is skipped, or fails if Require().
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin := serverBinary(t)
	// The master sends its first sync to the replica at once, rather than
	// after the default 5s that waits for more replicas to join it.
	master := startNode(t, bin, false, []string{"--repl-diskless-sync-delay", "0"})
	mhost, mport, _ := net.SplitHostPort(master.Addr)
	replica := startNode(t, bin, false, []string{"--replicaof", mhost, mport})

	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	if err := waitFor(ctx, func(ctx context.Context) string { return replicaNotSynced(ctx, replica.Addr) }); err != nil {
		t.Fatalf("redistest: replica %s of %s not in sync within %v: %v", replica.Addr, master.Addr, sentinelReadyTimeout, err)
	}

	conf := fmt.Sprintf("sentinel monitor %s %s %s %d\n"+
		"sentinel down-after-milliseconds %[1]s %[5]d\n"+
		"sentinel failover-timeout %[1]s %[6]d\n",
		SentinelMasterName, mhost, mport, sentinelQuorum,
		SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds())
	s := &Sentinel{MasterName: SentinelMasterName, Master: master, Replica: replica}
	for range sentinelCount {
		n := startConfigured(t, &Server{bin: bin, conf: conf, args: []string{"--sentinel"}})
		s.sentinels = append(s.sentinels, n)
		s.Addrs = append(s.Addrs, n.Addr)
	}
	if err := waitFor(ctx, func(ctx context.Context) string { return s.notReady(ctx, master.Addr, replica.Addr) }); err != nil {
		t.Fatalf("redistest: sentinels not ready within %v: %v", sentinelReadyTimeout, err)
	}
	t.Logf("redistest: sentinel topology ready: master %s, replica %s, sentinels %s",
		master.Addr, replica.Addr, strings.Join(s.Addrs, " "))
	return s
}

// waitFor calls check every 50ms until it returns "" or ctx ends, and then
// returns the last problem it reported.
func waitFor(ctx context.Context, check func(context.Context) string) error {
	for {
		problem := check(ctx)
		if problem == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s", problem)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// adminClient is a client for setup and inspection: no retries, short
// timeouts, closed by the caller.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}

// replicaNotSynced returns "" when the server at addr is a replica whose link
// to its master is up, and what is missing otherwise.
func replicaNotSynced(ctx context.Context, addr string) string {
	c := adminClient(addr)
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Sprintf("%s: INFO replication: %v", addr, err)
	}
	if !hasInfoLine(info, "role:slave") || !hasInfoLine(info, "master_link_status:up") {
		return fmt.Sprintf("%s: INFO replication says:\n%s", addr, info)
	}
	return ""
}

// notReady returns "" when every sentinel monitors master, knows replica as
// a connected replica and knows the other sentinels.
func (s *Sentinel) notReady(ctx context.Context, master, replica string) string {
	for _, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
		problem := func() string {
			m, err := sc.Master(ctx, s.MasterName).Result()
			if err != nil {
				return fmt.Sprintf("sentinel %s: SENTINEL MASTER: %v", addr, err)
			}
			if got := net.JoinHostPort(m["ip"], m["port"]); got != master || m["flags"] != "master" {
				return fmt.Sprintf("sentinel %s: master %s with flags %q, want %s with flags \"master\"", addr, got, m["flags"], master)
			}
			if m["num-other-sentinels"] != strconv.Itoa(sentinelCount-1) {
				return fmt.Sprintf("sentinel %s: knows %s other sentinels, want %d", addr, m["num-other-sentinels"], sentinelCount-1)
			}
			replicas, err := sc.Replicas(ctx, s.MasterName).Result()
			if err != nil {
				return fmt.Sprintf("sentinel %s: SENTINEL REPLICAS: %v", addr, err)
			}
			if len(replicas) != 1 {
				return fmt.Sprintf("sentinel %s: knows %d replicas, want 1", addr, len(replicas))
			}
			r := replicas[0]
			if got := net.JoinHostPort(r["ip"], r["port"]); got != replica || r["flags"] != "slave" || r["master-link-status"] != "ok" {
				return fmt.Sprintf("sentinel %s: replica %s flags %q link %q, want %s flags \"slave\" link \"ok\"",
					addr, got, r["flags"], r["master-link-status"], replica)
			}
			return ""
		}()
		_ = sc.Close()
		if problem != "" {
			return problem
		}
	}
	return ""
}

// FailoverOptions returns options for redis.NewFailoverClient that name the
// master and list the sentinels; set any other field before use.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: append([]string(nil), s.Addrs...)}
}

// Client returns a failover client (redis.NewFailoverClient) for the
// topology with go-redis defaults, closed when the test finishes.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr returns the master's address according to each sentinel, in
// the order of Addrs; "" for a sentinel that did not answer.
func (s *Sentinel) MasterAddr(ctx context.Context) []string {
	out := make([]string, len(s.Addrs))
	for i, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
			ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
		if hp, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result(); err == nil && len(hp) == 2 {
			out[i] = net.JoinHostPort(hp[0], hp[1])
		}
		_ = sc.Close()
	}
	return out
}

// Node returns the data server (Master or Replica, as started) at addr, or
// nil if neither listens there.
func (s *Sentinel) Node(addr string) *Server {
	for _, n := range []*Server{s.Master, s.Replica} {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// WaitFailover waits, at most timeout, until every sentinel names a master
// other than old and that server reports role:master, and returns its
// address. It fails the test when that does not happen in time.
func (s *Sentinel) WaitFailover(t testing.TB, old string, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var promoted string
	err := waitFor(ctx, func(ctx context.Context) string {
		addrs := s.MasterAddr(ctx)
		for i, a := range addrs {
			if a == "" || a == old || a != addrs[0] {
				return fmt.Sprintf("sentinels name masters %v (sentinel %d still says %q; old master %s)", addrs, i, a, old)
			}
		}
		c := adminClient(addrs[0])
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Sprintf("new master %s: INFO replication: %v", addrs[0], err)
		}
		if !hasInfoLine(info, "role:master") {
			return fmt.Sprintf("new master %s is not master yet:\n%s", addrs[0], info)
		}
		promoted = addrs[0]
		return ""
	})
	if err != nil {
		t.Fatalf("redistest: no failover from %s within %v: %v", old, timeout, err)
	}
	return promoted
}
