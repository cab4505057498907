package redis

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
)

// TestClusterSlotsAndDebtAcrossMasters: on a real 3-master Redis Cluster,
// a request of identities on different masters takes a slot on each; one
// denied by a full key's slots gives back the slots it took on the other
// masters; a Release frees every key's; a renewal records them again; a
// settle above the charge leaves every key in debt.
func TestClusterSlotsAndDebtAcrossMasters(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	s, err := New(cl.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := ratelimit.MustParsePolicy("100/h, 1 concurrent", ratelimit.Named("slots"))
	// Three identities on three masters.
	var ids []string
	seen := map[int]bool{}
	for i := 0; len(ids) < 3; i++ {
		k := fmt.Sprintf("user:%d", i)
		if node := cl.NodeForKey(redisKey(DefaultPrefix, p.ID(), k)); !seen[node] {
			seen[node] = true
			ids = append(ids, k)
		}
	}
	x, y, z := ids[0], ids[1], ids[2]
	a := mustTake(t, s, p, 1, x, y)
	if !a.Allowed {
		t.Fatalf("step 1: %+v", a)
	}
	if d := mustTake(t, s, p, 1, y); d.Allowed || !d.InFlight {
		t.Fatalf("step 2: %+v, want a denial in flight", d)
	}
	if d := mustTake(t, s, p, 1, z, y); d.Allowed || !d.InFlight {
		t.Fatalf("step 3: %+v, want a denial in flight by y", d)
	}
	// All or nothing in the same store call: the slot the denied request
	// took on z's master is given back before the call returns.
	if d := mustTake(t, s, p, 0, z); d.Limits[1].Remaining != 1 {
		t.Fatalf("step 4: z holds %d of 1 slot free right after the denial; want its slot given back", d.Limits[1].Remaining)
	}
	for i := range 12 {
		free := fmt.Sprintf("free:%d", i)
		if d := mustTake(t, s, p, 1, free, y); d.Allowed {
			t.Fatalf("step 4.%d: %+v, want a denial by y", i, d)
		}
		d := mustTake(t, s, p, 1, free)
		if !d.Allowed {
			t.Fatalf("step 4.%d: %s alone, right after a denial by y: %+v; want its slot given back", i, free, d)
		}
		if err := s.Release(ctx, d.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	renewed, err := s.Renew(ctx, a.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, renewed); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{x, y} {
		if d := mustTake(t, s, p, 0, k); d.Limits[1].Remaining != 1 {
			t.Fatalf("step 5: %s has %d slots free after the release, want 1", k, d.Limits[1].Remaining)
		}
	}
	q := ratelimit.MustParsePolicy("10/h", ratelimit.Named("debt"))
	b := mustTake(t, s, q, 1, x, z)
	if err := s.Settle(ctx, b.Receipt, 25); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{x, z} {
		if d := mustTake(t, s, q, 1, k); d.Allowed || d.Remaining != 0 {
			t.Fatalf("step 6: %s after a debt of 15: %+v, want denied", k, d)
		}
	}
}
