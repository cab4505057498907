package memory

import (
	"context"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// Settle implements storekit.Settler: a refund of part of the charge, or
// a debt charged now whatever room the limits have (verdict.Settlement).
func (m *Store) Settle(ctx context.Context, r ratelimit.Receipt, actual int64) error {
	back, debt, err := verdict.Settlement(r, actual)
	switch {
	case err != nil:
		return err
	case back.Policy != nil:
		return m.Refund(ctx, back)
	case debt.Policy != nil:
		_, err = m.do(ctx, debt, verdict.Call{Cost: debt.Cost, Force: true})
	}
	return err
}
