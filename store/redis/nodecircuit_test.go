package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// TestNodeCircuitStates: closed until failures consecutive failures; open
// for the cooldown; then exactly one probe, whose answer closes it and
// whose failure opens it again; cancelled calls change nothing; late
// outcomes of calls made before the circuit opened neither release a
// second probe nor stretch the cooldown.
func TestNodeCircuitStates(t *testing.T) {
	const failures, cooldown = 3, time.Second
	c := newNodeCircuit(failures, cooldown)
	at := t0
	step := func(outcome int) {
		t.Helper()
		ok, probe := c.allow(at)
		if !ok || probe {
			t.Fatalf("at +%s: allow = %v, %v on a closed circuit", at.Sub(t0), ok, probe)
		}
		c.done(outcome, probe, at)
	}
	step(nodeFailed)
	step(nodeFailed)
	step(nodeAnswered) // a reply ends the streak
	step(nodeFailed)
	step(nodeFailed)
	step(nodeUnknown) // neither ends nor extends it
	if ok, _ := c.allow(at); !ok {
		t.Fatal("opened before 3 consecutive failures")
	}
	c.done(nodeFailed, false, at)
	for _, d := range []time.Duration{0, cooldown / 2, cooldown - time.Nanosecond} {
		if ok, _ := c.allow(at.Add(d)); ok {
			t.Fatalf("open circuit let a call through %s after opening", d)
		}
	}
	// A straggler from before the opening fails late: no longer cooldown.
	c.done(nodeFailed, false, at.Add(cooldown/2))
	at = at.Add(cooldown)
	ok, probe := c.allow(at)
	if !ok || !probe {
		t.Fatalf("after the cooldown: allow = %v, %v; want the probe", ok, probe)
	}
	if ok, _ := c.allow(at); ok {
		t.Fatal("a second call went out while the probe is out")
	}
	// A straggler that was cancelled: the probe is still out.
	c.done(nodeUnknown, false, at)
	if ok, _ := c.allow(at); ok {
		t.Fatal("a straggler's outcome released a second probe")
	}
	c.done(nodeFailed, true, at) // the probe failed: open again
	if ok, _ := c.allow(at.Add(cooldown - time.Nanosecond)); ok {
		t.Fatal("a failed probe did not reopen the circuit for a cooldown")
	}
	at = at.Add(cooldown)
	if ok, probe := c.allow(at); !ok || !probe {
		t.Fatal("no probe after the second cooldown")
	}
	c.done(nodeUnknown, true, at) // a cancelled probe: probe again
	ok, probe = c.allow(at)
	if !ok || !probe {
		t.Fatal("a cancelled probe blocked the next one")
	}
	c.done(nodeAnswered, probe, at)
	for i := 0; i < 5; i++ {
		if ok, probe := c.allow(at); !ok || probe {
			t.Fatal("closed circuit refused a call after the probe answered")
		}
	}
}

func TestNodeCircuitOption(t *testing.T) {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { c.Close() })
	if _, err := New(c, WithNodeCircuit(3, 0)); err == nil {
		t.Fatal("WithNodeCircuit(3, 0): no error")
	}
	for _, f := range []int{0, -1} {
		s, err := New(c, WithNodeCircuit(f, 0))
		if err != nil {
			t.Fatalf("WithNodeCircuit(%d, 0) (off): %v", f, err)
		}
		if s.nodeFor(context.Background(), "rl:{ip:1}:x") != nil {
			t.Fatalf("WithNodeCircuit(%d, 0): node circuits still on", f)
		}
	}
}

func TestNodeOutcome(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	now := time.Now()
	expired, cancel2 := context.WithDeadline(live, now.Add(-time.Millisecond))
	defer cancel2()
	cancelledLate, cancel3 := context.WithDeadline(live, now.Add(-time.Millisecond))
	cancel3() // cancelled by the store, but the call ran to its deadline
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want int
	}{
		{live, nil, nodeAnswered},
		{live, goredis.Nil, nodeAnswered},
		{live, context.DeadlineExceeded, nodeFailed},
		{expired, context.DeadlineExceeded, nodeFailed},
		{live, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), nodeFailed},
		{cancelled, errors.New("i/o on a cancelled call"), nodeUnknown},
		{live, context.Canceled, nodeUnknown},
		{cancelledLate, context.Canceled, nodeFailed},
		{live, fmt.Errorf("wrapped: %w", goredis.ErrClosed), nodeUnknown},
		{live, goredis.ErrPoolTimeout, nodeUnknown},
	} {
		if got := nodeOutcome(tc.ctx, tc.err, now); got != tc.want {
			t.Errorf("nodeOutcome(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	// An error reply is an answer.
	mrClient := goredis.NewClient(&goredis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { mrClient.Close() })
	err := mrClient.Do(live, "NOSUCHCOMMAND").Err()
	if err == nil || nodeOutcome(live, err, now) != nodeAnswered {
		t.Fatalf("error reply %v: outcome %d, want answered", err, nodeOutcome(live, err, now))
	}
}

// TestClusterNodeCircuit: a master that hangs (SIGSTOP: connections open,
// no replies) costs the timeout only until its circuit opens; then its keys
// fail at once with ErrNodeUnavailable while keys on the other masters are
// limited as usual; once it answers again, the probe after the cooldown
// closes the circuit. Time for the circuit is a controlled clock.
func TestClusterNodeCircuit(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	var clk clock
	clk.Set(t0)
	st, err := New(honoringClient(t, cl), WithNodeCircuit(3, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	st.nodeClock = clk.Now
	p := ratelimit.MustParsePolicy("1000/h", ratelimit.Named("nodecircuit"))
	hung, live := keyOn(cl, p, "ip:10.9.0.%d", 0), keyOn(cl, p, "user:%d", 1)
	take := func(keys ...string) (ratelimit.Decision, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		return st.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1})
	}
	for _, k := range []string{hung, live} {
		if _, err := take(k); err != nil {
			t.Fatalf("%s before the pause: %v", k, err)
		}
	}
	cl.Pause(t, 0)
	resumed := false
	defer func() {
		if !resumed {
			cl.Resume(t, 0)
		}
	}()
	for i := 0; i < 3; i++ {
		if _, err := take(hung); err == nil || errors.Is(err, ErrNodeUnavailable) {
			t.Fatalf("call %d to the hung master: %v; want a timeout (the circuit opens after 3)", i, err)
		}
	}
	for i := 0; i < 5; i++ {
		if _, err := take(hung); !errors.Is(err, ErrNodeUnavailable) {
			t.Fatalf("call %d after 3 failures: %v; want ErrNodeUnavailable", i, err)
		}
		if d, err := take(live); err != nil || !d.Allowed {
			t.Fatalf("key on a live master while master 0 hangs: %+v, %v", d, err)
		}
		// Both keys: the live one is charged and refunded, the request fails.
		if _, err := take(hung, live); !errors.Is(err, ErrNodeUnavailable) {
			t.Fatalf("request with both keys: %v; want ErrNodeUnavailable", err)
		}
	}
	cl.Resume(t, 0)
	resumed = true
	if _, err := take(hung); !errors.Is(err, ErrNodeUnavailable) {
		t.Fatalf("before the cooldown ends: %v; want ErrNodeUnavailable still", err)
	}
	clk.Set(t0.Add(time.Minute))
	// The probe may meet a connection that timed out during the pause, or
	// the master may still be rejoining: probe again, one cooldown later on
	// the circuit's clock, until it answers (bounded).
	for attempt := 0; ; attempt++ {
		_, err := take(hung)
		if err == nil {
			break
		}
		if attempt == 50 {
			t.Fatalf("the master answers again but probes keep failing: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		clk.Set(clk.Now().Add(time.Minute))
	}
	for i := 0; i < 3; i++ {
		if _, err := take(hung); err != nil {
			t.Fatalf("call %d after the probe answered: %v", i, err)
		}
	}
}
