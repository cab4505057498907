package redis

import (
	"context"
	"fmt"
	"slices"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// Release implements storekit.Releaser: one script call (one per key on
// a Cluster, sent together).
func (r *Store) Release(ctx context.Context, rc ratelimit.Receipt) error {
	_, err := r.slots(ctx, rc, false)
	return err
}

// Renew implements storekit.Releaser: one script call (one per key on a
// Cluster, sent together).
func (r *Store) Renew(ctx context.Context, rc ratelimit.Receipt) (ratelimit.Receipt, error) {
	return r.slots(ctx, rc, true)
}

// slots runs the script's 'c' on the keys of the charge rc and, renewing,
// returns the receipt with the marks it answered.
func (r *Store) slots(ctx context.Context, rc ratelimit.Receipt, renew bool) (ratelimit.Receipt, error) {
	c, err := verdict.Charge(rc)
	if err != nil || c.Policy == nil || !plan.Layout(c.Policy).Slots {
		return rc, err
	}
	stride, nl := verdict.MarksPerKey(c.Policy), len(plan.Layout(c.Policy).Limits)
	rk, per := r.chargeKeys(c)
	prep := r.scripts.prepare(c.Policy, r.ttlExtra.Milliseconds())
	args := func(now int64, marks ...[]int64) []any { return prep.slotArgs(now, renew, marks...) }
	op := "release"
	if renew {
		op = "renew"
	}
	var got []int64 // per key, per limit, as the script answers
	if !r.cluster || len(rk) == 1 {
		got, err = runScript(ctx, r.client, prep.script, rk, args(r.nowUS(), per...)).Int64Slice()
		if err != nil {
			return rc, fmt.Errorf("ratelimit/store: redis: %s: %w", op, err)
		}
	} else {
		for i, cmd := range runEach(ctx, r.client, prep.script, rk, func(i int) []any { return args(r.nowUS(), per[i]) }) {
			rep, err := cmd.Int64Slice()
			if err != nil {
				return rc, fmt.Errorf("ratelimit/store: redis: %s key %d: %w", op, i, err)
			}
			got = append(got, rep...)
		}
	}
	if !renew {
		return rc, nil
	}
	if len(got) != len(rk)*nl {
		return rc, fmt.Errorf("ratelimit/store: redis: renew: unexpected script reply of %d values, want %d", len(got), len(rk)*nl)
	}
	marks := slices.Clone(c.Marks)
	lay := plan.Layout(c.Policy)
	for ki := range rk {
		for i := range nl {
			if lay.Limits[i].Kind == layout.Concurrent {
				marks[ki*stride+2+i] = got[ki*nl+i]
			}
		}
	}
	return ratelimit.Receipt{Policy: c.Policy, Keys: c.Keys, Cost: c.Cost, Marks: marks}, nil
}

// slotArgs lays out the ARGV of a release or renewal (lua/script.lua's 'c'):
// the operation, now (0: Redis TIME), '1' to renew, the policy unless its
// script has it baked in, then the marks of each key.
func (p *prepared) slotArgs(now int64, renew bool, marks ...[]int64) []any {
	flag := "0"
	if renew {
		flag = "1"
	}
	a := append([]any{opSlots, now, flag}, p.tail...)
	for _, m := range marks {
		for _, v := range m {
			a = append(a, v)
		}
	}
	return a
}
