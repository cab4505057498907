package redis

import (
	"context"
	"fmt"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// Settle implements storekit.Settler, in one script call (one per key on a
// Cluster, sent together): a refund of part of the charge, or a debt
// charged now whatever room the limits have (verdict.Settlement). A debt
// carries a resend ID as a take does, so that a resent call charges once.
func (r *Store) Settle(ctx context.Context, rc ratelimit.Receipt, actual int64) error {
	back, debt, err := verdict.Settlement(rc, actual)
	switch {
	case err != nil:
		return err
	case back.Policy != nil:
		return r.Refund(ctx, back)
	case debt.Policy == nil:
		return nil
	}
	o := verdict.Call{Cost: debt.Cost, Force: true}
	if !r.cluster || len(debt.Keys) == 1 {
		_, err := r.take(ctx, debt, o)
		return err
	}
	// On a Cluster each key owes on its own: a master that fails leaves
	// the others' debt charged (nothing is refunded), and the error says
	// which.
	prep := r.scripts.prepare(debt.Policy, r.ttlExtra.Milliseconds())
	keys := make([]string, len(debt.Keys))
	for i, k := range debt.Keys {
		keys[i] = redisKey(r.prefix, debt.Policy.ID(), k)
	}
	now := r.nowUS()
	for i, cmd := range runEach(ctx, r.client, prep.script, keys, func(int) []any { return prep.takeArgs(now, o, r.resendID(ctx), false) }) {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("ratelimit/store: redis: settle key %d: %w", i, resendErr(err))
		}
	}
	return nil
}
