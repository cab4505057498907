package redis

import (
	"context"
	"fmt"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// refundArgs lays out a refund's ARGV (lua/script.lua): the operation, now (0:
// Redis TIME), cost, the policy unless its script has it baked in, then
// the marks of each key.
func (p *prepared) refundArgs(now, cost int64, marks ...[]int64) []any {
	args := make([]any, 0, 3+len(p.tail)+len(marks)*len(marks[0]))
	args = append(args, opRefund, now, cost)
	args = append(args, p.tail...)
	for _, m := range marks {
		for _, v := range m {
			args = append(args, v)
		}
	}
	return args
}

// Reset implements storekit.Resetter: every key's counters are emptied,
// in one round trip (one script per key, sent together). Each key keeps
// the epoch that voids refunds of charges made before the Reset, for as
// long as those could still count (lua/reset.lua).
func (r *Store) Reset(ctx context.Context, p *ratelimit.Policy, keys ...string) error {
	if err := storekit.Validate(ratelimit.Request{Policy: p, Keys: keys}); err != nil {
		return err
	}
	rk := make([]string, len(keys))
	for i, k := range keys {
		rk[i] = redisKey(r.prefix, p.ID(), k)
	}
	ttl := plan.Layout(p).TTLMS + r.ttlExtra.Milliseconds() + 1
	cmds := pipeline(ctx, r.client, len(rk), func(i int) (*script, []string, []any) {
		return r.scripts.anyPolicy(), rk[i : i+1], []any{opReset, ttl}
	})
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if len(rk) == 1 {
				return fmt.Errorf("ratelimit/store: redis: reset: %w", err)
			}
			return fmt.Errorf("ratelimit/store: redis: reset key %d: %w", i, err)
		}
	}
	return nil
}

// Refund implements storekit.Refunder: one script call (one per key on a
// Cluster, sent together), in one round trip.
func (r *Store) Refund(ctx context.Context, rc ratelimit.Receipt) error {
	c, err := verdict.Charge(rc)
	if err != nil || c.Policy == nil {
		return err
	}
	rk, per := r.chargeKeys(c)
	prep := r.scripts.prepare(c.Policy, r.ttlExtra.Milliseconds())
	if !r.cluster || len(rk) == 1 {
		if err := runScript(ctx, r.client, prep.script, rk, prep.refundArgs(r.nowUS(), c.Cost, per...)).Err(); err != nil {
			return fmt.Errorf("ratelimit/store: redis: refund: %w", err)
		}
		return nil
	}
	for i, cmd := range runEach(ctx, r.client, prep.script, rk, func(i int) []any { return prep.refundArgs(r.nowUS(), c.Cost, per[i]) }) {
		if cmd.Err() != nil {
			return fmt.Errorf("ratelimit/store: redis: refund key %d: %w", i, cmd.Err())
		}
	}
	return nil
}

// chargeKeys returns the Redis keys of a charge's identities and, for
// each, its marks (verdict.MarksPerKey of them).
func (r *Store) chargeKeys(c ratelimit.Receipt) (keys []string, marks [][]int64) {
	stride := verdict.MarksPerKey(c.Policy)
	keys, marks = make([]string, len(c.Keys)), make([][]int64, len(c.Keys))
	for i, k := range c.Keys {
		keys[i] = redisKey(r.prefix, c.Policy.ID(), k)
		marks[i] = c.Marks[i*stride : (i+1)*stride]
	}
	return keys, marks
}

// WaitRefunds waits for the refunds a Cluster store runs in the background
// for masters that answered after a request's budget (at most
// refundTimeout each). Tests and graceful shutdowns call it.
func (r *Store) WaitRefunds() { r.refunds.Wait() }
