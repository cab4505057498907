package redistest

import (
	"context"
	"testing"
	"time"
)

func TestSentinelReal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := StartSentinel(t)
	if len(s.Addrs) != 3 {
		t.Fatalf("%d sentinels, want 3", len(s.Addrs))
	}
	for i, a := range s.MasterAddr(ctx) {
		if a != s.Master.Addr {
			t.Fatalf("sentinel %d names master %q, want %s", i, a, s.Master.Addr)
		}
	}
	c := s.Client(t)
	if err := c.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 5000 = %d, %v; want 1 (the replica acknowledged)", n, err)
	}
	if got, err := s.Replica.Client(t).Get(ctx, "greeting").Result(); err != nil || got != "hello" {
		t.Fatalf("GET on the replica = %q, %v; want hello", got, err)
	}

	killed := time.Now()
	s.Master.Kill(t)
	promoted := s.WaitFailover(t, s.Master.Addr, 30*time.Second)
	t.Logf("failover to %s took %v after the kill", promoted, time.Since(killed))
	if promoted != s.Replica.Addr {
		t.Fatalf("promoted %s, want the replica %s", promoted, s.Replica.Addr)
	}
	if s.Node(promoted) != s.Replica {
		t.Fatalf("Node(%s) is not the replica", promoted)
	}

	// The failover client finds the new master by itself.
	var got string
	var err error
	for i := 0; i < 50; i++ {
		if got, err = c.Get(ctx, "greeting").Result(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || got != "hello" {
		t.Fatalf("GET through the failover client after the failover = %q, %v; want hello", got, err)
	}
	if err := c.Set(ctx, "after", "yes", 0).Err(); err != nil {
		t.Fatalf("SET on the new master: %v", err)
	}
}
