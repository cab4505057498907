package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/redistest"
)

// TestBlockHoldsAgainstEveryWayIn: once a key is blocked (BlockFor), no
// way in admits it until the block ends: not a repeat of a request ID
// admitted before the block (on its own, or beside a key that has room),
// not a grant of part of a cost. And a grant of nothing for lack of room
// is a denial like any other: it starts the block.
func TestBlockHoldsAgainstEveryWayIn(t *testing.T) {
	ctx := context.Background()
	for _, cs := range clockedStores(t) {
		for _, alg := range algorithms {
			t.Run(cs.name+"/"+alg.String(), func(t *testing.T) {
				p := ratelimit.MustParsePolicy("2/m", ratelimit.WithAlgorithm(alg), ratelimit.BlockFor(time.Hour), ratelimit.Named(fmt.Sprintf("blk%d", alg)))
				k, free := "k:"+t.Name(), "free:"+t.Name()
				steps := []struct {
					at      time.Duration
					keys    []string
					cost    int64
					id      string
					upTo    bool
					allowed bool
				}{
					{0, []string{k}, 1, "a", false, true},
					{0, []string{k}, 1, "b", false, true},
					{time.Second, []string{k}, 1, "", false, false}, // denied: the hour's block starts
					{2 * time.Second, []string{k}, 1, "a", false, false},
					{2 * time.Second, []string{k}, 1, "b", false, false},
					{2 * time.Second, []string{k, free}, 1, "a", false, false},
					{3 * time.Second, []string{k}, 2, "", true, false},
					{61 * time.Minute, []string{k}, 1, "", false, true}, // the block is over
				}
				for i, s := range steps {
					cs.set(t0.Add(s.at))
					req := ratelimit.Request{Policy: p, Keys: s.keys, Cost: s.cost, ID: s.id}
					var d ratelimit.Decision
					var err error
					if s.upTo {
						d, err = cs.s.(ratelimit.Granter).TakeUpTo(ctx, req)
					} else {
						d, err = cs.s.Take(ctx, req)
					}
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if d.Allowed != s.allowed || !s.allowed && (d.Repeated || d.Granted != 0) {
						t.Fatalf("step %d (+%s %q id %q): %+v, want allowed %v", i, s.at, s.keys, s.id, d, s.allowed)
					}
					if !s.allowed && i >= 3 && i < 7 && d.RetryAfter < 59*time.Minute {
						t.Fatalf("step %d: RetryAfter %s, want the block's hour", i, d.RetryAfter)
					}
				}

				// A grant of nothing for lack of room starts the block.
				g := "g:" + t.Name()
				cs.set(t0.Add(2 * time.Hour))
				mustTake(t, cs.s, p, 2, g)
				d, err := cs.s.(ratelimit.Granter).TakeUpTo(ctx, ratelimit.Request{Policy: p, Keys: []string{g}, Cost: 3})
				if err != nil || d.Allowed || d.Granted != 0 {
					t.Fatalf("grant on a full key: %+v, %v", d, err)
				}
				cs.set(t0.Add(2*time.Hour + 2*time.Minute)) // the window has room again, the block runs on
				if d := mustTake(t, cs.s, p, 1, g); d.Allowed || d.RetryAfter < 57*time.Minute {
					t.Fatalf("after a grant of nothing: %+v, want the block's hour", d)
				}
			})
		}
	}
}

// TestClusterBlockAcrossMasters: on a Redis Cluster, where each key of a
// request runs its own script on its own master, a blocked key denies the
// request whatever another key's request-ID record says, and a grant of
// nothing on one master starts that key's block.
func TestClusterBlockAcrossMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	var clk clock
	st, err := NewRedis(honoringClient(t, cl), withClock(clk.Now))
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
