package redis

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
)

// TestClusterBlockAcrossMasters: on a Redis Cluster, where each key of a
// request runs its own script on its own master, a blocked key denies the
// request whatever another key's request-ID record says, and a grant of
// nothing on one master starts that key's block.
func TestClusterBlockAcrossMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var clk clock
	st, err := New(honoringClient(t, cl), WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("2/m", ratelimit.BlockFor(time.Hour), ratelimit.Named("cblock"))
	a, b := keyOn(cl, p, "user:%d", 0), keyOn(cl, p, "ip:10.9.0.%d", 1)
	take := func(i int, at time.Duration, want bool, id string, keys ...string) {
		t.Helper()
		clk.Set(t0.Add(at))
		d, err := st.Take(ctx, ratelimit.Request{Policy: p, Keys: keys, Cost: 1, ID: id})
		if err != nil || d.Allowed != want {
			t.Fatalf("step %d (%q id %q): %+v, %v; want allowed %v", i, keys, id, d, err, want)
		}
	}
	take(0, 0, true, "x", a, b)
	take(1, 0, true, "", a)
	take(2, time.Second, false, "", a) // a's hour of block starts
	take(3, 2*time.Second, false, "x", a, b)
	st.WaitRefunds()
	take(4, 3*time.Second, true, "", b) // b was not charged by the denied repeat
	take(5, 61*time.Minute, true, "", a)

	g := keyOn(cl, p, "key:%d", 2)
	clk.Set(t0.Add(2 * time.Hour))
	mustTake(t, st, p, 2, g)
	if d, err := st.TakeUpTo(ctx, ratelimit.Request{Policy: p, Keys: []string{g, b}, Cost: 2}); err != nil || d.Allowed {
		t.Fatalf("grant with g full: %+v, %v", d, err)
	}
	st.WaitRefunds()
	clk.Set(t0.Add(2*time.Hour + 2*time.Minute))
	if d := mustTake(t, st, p, 1, g); d.Allowed || d.RetryAfter < 57*time.Minute {
		t.Fatalf("g after a grant of nothing: %+v, want its block", d)
	}
}
