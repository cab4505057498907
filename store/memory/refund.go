package memory

import (
	"context"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/shardmap"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// Reset implements storekit.Resetter.
func (m *Store) Reset(ctx context.Context, p *ratelimit.Policy, keys ...string) error {
	if err := storekit.Validate(ratelimit.Request{Policy: p, Keys: keys}); err != nil {
		return err
	}
	var shards, locked [ratelimit.MaxKeys]uint64
	defer m.unlockShards(m.lockKeys(keys, &shards, &locked))
	now := m.now().UnixMicro()
	for ki, k := range keys {
		sh := &m.shards[shards[ki]]
		mk := shardmap.KeyOf(p.ID(), k)
		e, ok := sh.M[mk]
		if !ok {
			continue
		}
		if e.expires <= now || len(e.f) <= layout.MemGen {
			delete(sh.M, mk)
			if m.maxKeys > 0 {
				m.count.Add(-1)
			}
			continue
		}
		// Empty counters, but a new epoch, kept while a charge made
		// before the Reset could still count: its refund then finds
		// another epoch and gives nothing back (lua/reset.lua).
		epoch := e.f[layout.MemGen]/layout.GenEpoch + 1
		clear(e.f)
		e.f[layout.MemGen] = epoch * layout.GenEpoch
		e.pend = nil
		e.expires = max(e.expires, now+plan.Layout(p).TTLMS*1000)
	}
	return nil
}

// Refund implements storekit.Refunder.
func (m *Store) Refund(ctx context.Context, r ratelimit.Receipt) error {
	c, err := verdict.Charge(r)
	if err != nil || c.Policy == nil {
		return err
	}
	p, keys, marks := c.Policy, c.Keys, c.Marks
	lay := plan.Layout(p)
	var shards, locked [ratelimit.MaxKeys]uint64
	defer m.unlockShards(m.lockKeys(keys, &shards, &locked))
	now := m.now().UnixMicro()
	stride := verdict.MarksPerKey(p)
	for ki, k := range keys {
		sh := &m.shards[shards[ki]]
		e, ok := sh.M[shardmap.KeyOf(p.ID(), k)]
		if !ok || e.expires <= now {
			continue // nothing of the charge counts any more
		}
		at, gen := marks[ki*stride], marks[ki*stride+1]
		if gen/layout.GenEpoch != e.f[layout.MemGen]/layout.GenEpoch {
			continue // charged before a Reset: nothing of it counts
		}
		k := counters{pend: e.pend}
		if k.unreserve(at, c.Cost) {
			// A place in line still pending: its units leave the line,
			// exactly; the fields never held them.
			e.pend = k.pend
			continue
		}
		if at > e.f[layout.MemTime] {
			// A place in line no longer where it was (a lease moved later
			// when the line was full: place): its units count, later than
			// they were recorded, and are not told apart from the place's
			// others. Nothing is given back.
			continue
		}
		use := storedLayout(lay, []*memEntry{e}) // see do
		if e.lay != use && !sameRings(e.lay, use) {
			e.f = relayout(e.f, e.lay, use)
		}
		e.lay = use
		// A drained token bucket gives nothing back: it owes nothing, and
		// reads as never written (see drained).
		sameGen := e.f[layout.MemGen] == gen && !(&counters{st: e.f, pend: e.pend}).drained(use.Limits, now)
		for i := range use.Limits {
			refund(e.f, now, at, &use.Limits[i], c.Cost, marks[ki*stride+2+i], sameGen)
		}
		e.f[layout.MemGen]++
	}
	return nil
}
