package memory

import (
	"context"
	"slices"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/shardmap"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// Release implements storekit.Releaser.
func (m *Store) Release(ctx context.Context, r ratelimit.Receipt) error {
	_, err := m.slots(r, false)
	return err
}

// Renew implements storekit.Releaser.
func (m *Store) Renew(ctx context.Context, r ratelimit.Receipt) (ratelimit.Receipt, error) {
	return m.slots(r, true)
}

// slots frees, in every Concurrent limit of every key of the charge r,
// the slot r's marks say it holds (layout.SlotsFreed) and, renewing,
// records it again at now: the receipt returned carries the new marks.
func (m *Store) slots(r ratelimit.Receipt, renew bool) (ratelimit.Receipt, error) {
	c, err := verdict.Charge(r)
	if err != nil || c.Policy == nil || !plan.Layout(c.Policy).Slots {
		return r, err
	}
	lim := plan.Layout(c.Policy).Limits
	var shards, locked [ratelimit.MaxKeys]uint64
	defer m.unlockShards(m.lockKeys(c.Keys, &shards, &locked))
	now := m.now().UnixMicro()
	stride := verdict.MarksPerKey(c.Policy)
	marks := slices.Clone(c.Marks)
	for ki, k := range c.Keys {
		sh := &m.shards[shards[ki]]
		mk := shardmap.KeyOf(c.Policy.ID(), k)
		e, ok := sh.M[mk]
		if !ok || e.expires <= now {
			if !renew {
				continue
			}
			e = m.entry(sh, mk, now, plan.Layout(c.Policy), nil)
		}
		for i := range lim {
			l := &e.lay.Limits[i]
			if l.Kind != layout.Concurrent {
				continue
			}
			st := e.f
			ep, cur, prev := layout.SlotsRolled(st[l.Mem], st[l.Mem+1], st[l.Mem+2], now, l.Width)
			cur, prev = layout.SlotsFreed(cur, prev, ep, marks[ki*stride+2+i])
			if renew {
				cur++
				marks[ki*stride+2+i] = ep + 1
				e.expires = max(e.expires, now+plan.Layout(c.Policy).TTLMS*1000)
			}
			st[l.Mem], st[l.Mem+1], st[l.Mem+2] = ep, cur, prev
		}
	}
	if !renew {
		return r, nil
	}
	return ratelimit.Receipt{Policy: c.Policy, Keys: c.Keys, Cost: c.Cost, Marks: marks}, nil
}
