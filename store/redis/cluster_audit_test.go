package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
)

// gateRefunds holds any pipeline carrying a refund (the script called
// with the operation opRefund) until open is closed: a late second round
// trip, as a slow master would make it.
type gateRefunds struct {
	open chan struct{}
}

// isRefund reports whether a command runs the script's refund.
func isRefund(a []any) bool {
	if len(a) < 3 || !strings.EqualFold(fmt.Sprint(a[0]), "evalsha") && !strings.EqualFold(fmt.Sprint(a[0]), "eval") {
		return false
	}
	nk, err := strconv.Atoi(fmt.Sprint(a[2]))
	return err == nil && len(a) > 3+nk && fmt.Sprint(a[3+nk]) == opRefund
}

func (h gateRefunds) DialHook(next goredis.DialHook) goredis.DialHook          { return next }
func (h gateRefunds) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }
func (h gateRefunds) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		for _, c := range cmds {
			if isRefund(c.Args()) {
				<-h.open
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestClusterLateTokenRefund: a Cluster refund that arrives late never
// takes back a later request's charge. Under "100/s" (token bucket, burst
// 1), key a is charged by a request that key b denies, so a's charge is
// refunded, late; meanwhile a is charged again at +31ms (its token was
// back). Once the late refund has run, a request at +32ms, 1ms after that
// charge, must be denied: the refund may undo only what its own charge
// still counted (nothing by then), not the later charge. The scripts run on
// the test's clock, so the timing is exact.
func TestClusterLateTokenRefund(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := honoringClient(t, cl)
	gate := gateRefunds{open: make(chan struct{})}
	client.AddHook(gate)
	var clk clock
	st, err := New(client, WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("100/s", ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(1), ratelimit.Named("late"))
	a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.2.0.%d", 1)
	clk.Set(t0)
	mustTake(t, st, p, 1, b) // b is out of tokens for 10ms
	if d := mustTake(t, st, p, 1, a, b); d.Allowed {
		t.Fatalf("a with b: %+v, want b's denial", d)
	}
	clk.Set(t0.Add(31 * time.Millisecond))
	if d := mustTake(t, st, p, 1, a); !d.Allowed {
		t.Fatalf("a at +31ms: %+v, want admitted (its token is back)", d)
	}
	close(gate.open)
	st.WaitRefunds() // the late refund has run
	clk.Set(t0.Add(32 * time.Millisecond))
	if d := mustTake(t, st, p, 1, a); d.Allowed {
		t.Fatal("a admitted at +32ms, 1ms after its charge at +31ms (burst 1, 10ms interval): the late refund undid that charge")
	}
}

// TestClusterRetryAfterLongest: a denial waits for every master's answer
// (within the budget) and reports the longest wait any of them gave, so a
// client that waits Retry-After succeeds. Key a denies with a 9s wait, key
// b (on a master frozen for 300ms, so its answer comes last) with nearly an
// hour's: the request must report b's.
func TestClusterRetryAfterLongest(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var clk clock
	st, err := New(honoringClient(t, cl), WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	p := ratelimit.MustParsePolicy("2/10s, 3/h", ratelimit.Named("longest"))
	a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.3.0.%d", 1)
	at := func(d time.Duration) { clk.Set(t0.Add(d)) }
	at(0)
	mustTake(t, st, p, 2, b)
	at(15 * time.Second)
	mustTake(t, st, p, 1, b) // b: 3 of 3 this hour, 1 of 2 these 10s
	at(19 * time.Second)
	mustTake(t, st, p, 2, a) // a: 2 of 2 these 10s, 2 of 3 this hour
	at(20 * time.Second)
	done := make(chan struct{})
	cl.Pause(t, 1)
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		cl.Resume(t, 1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: []string{a, b}, Cost: 1})
	<-done
	if err != nil {
		t.Fatal(err)
	}
	want := time.Hour - 20*time.Second
	if d.Allowed || d.RetryAfter != want || d.Key != 1 || d.Limit != 1 {
		t.Fatalf("%+v: want a denial by b's hourly limit, RetryAfter %s (a's own wait is 9s)", d, want)
	}
}

// TestClusterUpToAndReset: on a Cluster, a grant across keys on different
// masters is the smallest of their grants (the excess is refunded), and a
// Reset forgets keys on several masters in one round trip.
func TestClusterUpToAndReset(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	st, err := New(honoringClient(t, cl))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, alg := range algorithms {
		p := ratelimit.MustParsePolicy("10/h", ratelimit.WithAlgorithm(alg), ratelimit.Named("upto"+alg.String()))
		a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.4.0.%d", 2)
		mustTake(t, st, p, 7, b) // b has 3 left, a 10
		d, err := st.TakeUpTo(ctx, ratelimit.Request{Policy: p, Keys: []string{a, b}, Cost: 5})
		if err != nil || !d.Allowed || d.Granted != 3 {
			t.Fatalf("%s: TakeUpTo 5: %+v %v, want 3 granted", alg, d, err)
		}
		st.WaitRefunds()
		if left := mustTake(t, st, p, 0, a); left.Remaining != 7 {
			t.Fatalf("%s: a has %d left after a grant of 3, want 7 (the excess refunded)", alg, left.Remaining)
		}
		if err := st.Reset(ctx, p, a, b); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{a, b} {
			if left := mustTake(t, st, p, 0, k); left.Remaining != 10 {
				t.Fatalf("%s: %s has %d left after Reset, want 10", alg, k, left.Remaining)
			}
		}
	}
}
