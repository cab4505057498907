package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The Limiter's grants of leased policies (WithLease): taken from the
// store with one partial grant (Granter), spent locally until their hold
// ends, then settled to what they spent.

// leaseTries is how many times a request looks for room in its keys'
// grants, refilling those short of it, before it asks the store for
// itself alone: other callers may spend a refill first.
const leaseTries = 3

// leaseTable holds a Limiter's grants, one slot per leased policy and key,
// and asks the stores for them (d).
type leaseTable struct {
	d  *decider
	mu sync.Mutex
	m  map[leaseKey]*leaseSlot
}

type leaseKey struct{ def, key string }

// leaseSlot is one key's grants under one leased policy.
type leaseSlot struct {
	mu  sync.Mutex
	cur *leaseGrant // nil: none running
	// fetching is closed when the refill under way ends; nil when none.
	fetching chan struct{}
	// denial is the store's last denial of the key, repeated locally
	// until deniedUntil (the Limiter's clock, ns).
	denial      Decision
	deniedUntil int64
	size        int64 // the next grant to ask for (0: the request's cost)
}

// leaseGrant is one charge of the store, spent locally. Its fields are
// guarded by its slot's mutex.
type leaseGrant struct {
	d       Decision // the store's answer; its Receipt is the charge
	granted int64
	used    int64 // spent, debts included, refunds taken out
	// charged is what the store counts of it: granted, then more as debts
	// beyond it are charged, or what it spent once settled at its close.
	charged int64
	start   int64 // when it was asked for (the Limiter's clock, ns)
	until   int64 // start + hold: nothing is spent from it at or after
	closed  bool
}

// leaseUse is a request's share of one grant, for its refund or settle.
type leaseUse struct {
	s *leaseSlot
	g *leaseGrant
}

// slots returns the slots of keys under the leased policy def.
func (t *leaseTable) slots(def string, keys []string) []*leaseSlot {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[leaseKey]*leaseSlot)
	}
	out := make([]*leaseSlot, len(keys))
	for i, k := range keys {
		s := t.m[leaseKey{def, k}]
		if s == nil {
			s = &leaseSlot{}
			t.m[leaseKey{def, k}] = s
		}
		out[i] = s
	}
	return out
}

// existing returns the slots of keys under def that exist.
func (t *leaseTable) existing(def string, keys []string) []*leaseSlot {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*leaseSlot
	for _, k := range keys {
		if s := t.m[leaseKey{def, k}]; s != nil {
			out = append(out, s)
		}
	}
	return out
}

// drop forgets the slot of key if it still is s.
func (t *leaseTable) drop(def, key string, s *leaseSlot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[leaseKey{def, key}] == s {
		delete(t.m, leaseKey{def, key})
	}
}

// sweep forgets s, key's slot under p, when it holds nothing at now: no
// grant, no refill under way, no denial to repeat. A caller that still
// holds s may put a grant in it: that grant is settled by its own timer.
// Forgetting a slot forgets nothing a request admitted from it needs: its
// receipt holds its grant, whose debts go to the store at once.
func (t *leaseTable) sweep(p *Policy, s *leaseSlot, key string) {
	s.mu.Lock()
	idle := s.cur == nil && s.fetching == nil && s.deniedUntil <= t.d.sinceEpoch()
	s.mu.Unlock()
	if idle {
		t.drop(p.def, key, s)
	}
}

// decide decides a request of a leased policy from its keys' grants,
// refilling those short of its cost.
func (t *leaseTable) decide(ctx context.Context, r *http.Request, a ask) decided {
	p := a.policy
	slots := t.slots(p.def, a.keys)
	// A slot made for this request that ends up holding nothing (another
	// key denied it, or the store refused its grant) is forgotten now:
	// keys that come and go while a shared key is denied do not grow the
	// process.
	defer func() {
		for i, s := range slots {
			t.sweep(p, s, a.keys[i])
		}
	}()
	order := make([]int, len(slots))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return compareStrings(a.keys[i], a.keys[j]) })
	by := byStore // the fallback, once it granted a refill
tries:
	for range leaseTries {
		now := t.d.sinceEpoch()
		for _, i := range order {
			slots[i].mu.Lock()
		}
		d, short, denied := t.spend(a, slots, now)
		for _, i := range order {
			slots[i].mu.Unlock()
		}
		if denied || short == nil {
			return decided{d: d, by: by}
		}
		need := a.cost
		if a.op == opUpTo {
			need = 1
		}
		for _, i := range short {
			got, ok := t.refill(ctx, r, p, slots[i], a.keys[i], need)
			if got.by == byFallback {
				by = byFallback
			}
			if !ok {
				return got
			}
			if got.d.Granted > 0 && got.d.Granted < need {
				break tries // the limit had less room than the cost: the store decides it
			}
		}
	}
	// Grants keep running out under other callers, or had less room than
	// the cost: the store decides this request alone (a charge spent as it is made, which the lengthened
	// windows count as they count a grant).
	op := opTake
	if a.op == opUpTo {
		op = opUpTo
	}
	return t.d.decide(ctx, r, ask{policy: p, keys: a.keys, cost: a.cost, op: op})
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// spend admits a from the running grants of slots (all locked) at now:
// denied when a key's denial still holds; else, when every grant has
// room, the admission; else the indices of the keys short of it.
func (t *leaseTable) spend(a ask, slots []*leaseSlot, now int64) (d Decision, short []int, denied bool) {
	n := a.cost
	for i, s := range slots {
		if s.deniedUntil > now {
			return localDenial(s, i, now), nil, true
		}
		g := s.cur
		if g == nil || now >= g.until || g.granted-g.used < 1 || (a.op != opUpTo && g.granted-g.used < a.cost) {
			short = append(short, i)
			continue
		}
		n = min(n, g.granted-g.used)
	}
	if short != nil {
		return Decision{}, short, false
	}
	uses := make([]leaseUse, len(slots))
	for i, s := range slots {
		s.cur.used += n
		uses[i] = leaseUse{s, s.cur}
	}
	head := 0
	for i, s := range slots {
		if left(s.cur) < left(slots[head].cur) {
			head = i
		}
	}
	g := slots[head].cur
	d = g.d
	d.Limits = slices.Clone(g.d.Limits)
	extra := g.granted - g.used
	elapsed := time.Duration(now - g.start)
	d.Key, d.Remaining = head, d.Remaining+extra
	d.ResetAfter, d.RefillAfter = max(d.ResetAfter-elapsed, 0), max(d.RefillAfter-elapsed, 0)
	for i := range d.Limits {
		d.Limits[i].Key = head
		d.Limits[i].Remaining += extra
		d.Limits[i].ResetAfter = max(d.Limits[i].ResetAfter-elapsed, 0)
		d.Limits[i].RefillAfter = max(d.Limits[i].RefillAfter-elapsed, 0)
	}
	d.Granted, d.Delay, d.Repeated = n, 0, false
	d.Receipt = Receipt{Policy: a.policy, Keys: a.keys, Cost: n, c: &claim{
		adjust: func(ctx context.Context, r *http.Request, delta int64) error {
			return t.adjustGrant(ctx, r, a.policy, uses, delta)
		},
	}}
	return d, nil, false
}

// left is what a grant can still admit, counting what the store had left.
func left(g *leaseGrant) int64 { return g.d.Remaining + g.granted - g.used }

// localDenial repeats the store's denial of key i, its waits counted
// down to now.
func localDenial(s *leaseSlot, i int, now int64) Decision {
	d := s.denial
	d.Limits = slices.Clone(d.Limits)
	elapsed := time.Duration(now - s.deniedUntil + int64(s.denial.RetryAfter))
	d.Key = i
	d.RetryAfter = time.Duration(s.deniedUntil - now)
	d.ResetAfter, d.RefillAfter = max(d.ResetAfter-elapsed, 0), max(d.RefillAfter-elapsed, 0)
	for j := range d.Limits {
		lim := &d.Limits[j]
		lim.Key = i
		if lim.RetryAfter > 0 {
			lim.RetryAfter = max(lim.RetryAfter-elapsed, time.Microsecond)
		}
		lim.ResetAfter, lim.RefillAfter = max(lim.ResetAfter-elapsed, 0), max(lim.RefillAfter-elapsed, 0)
	}
	return d
}

// refill gets key, under the leased policy p, a running grant with room
// for need, or waits for the refill another caller has under way. ok is
// false when the request is decided: by the failure mode, or denied by
// the store.
func (t *leaseTable) refill(ctx context.Context, r *http.Request, p *Policy, s *leaseSlot, key string, need int64) (got decided, ok bool) {
	s.mu.Lock()
	if ch := s.fetching; ch != nil {
		s.mu.Unlock()
		<-ch // bounded by the store calls' timeouts
		return decided{}, true
	}
	now := t.d.sinceEpoch()
	if s.deniedUntil > now {
		s.mu.Unlock()
		return decided{}, true // spend repeats the denial
	}
	old := s.cur
	if old != nil && now < old.until && old.granted-old.used >= need {
		s.mu.Unlock()
		return decided{}, true // refilled meanwhile
	}
	s.cur = nil
	var from, to int64
	if old != nil {
		from, to = closeGrant(s, old, now)
	}
	terms := p.lease.terms
	size := max(min(s.size, terms.chunk), need) // a cost above chunk is granted alone
	ch := make(chan struct{})
	s.fetching = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.fetching = nil
		s.mu.Unlock()
		close(ch)
	}()
	if old != nil {
		_ = t.recharge(ctx, r, p, old, from, to)
	}
	start := t.d.sinceEpoch()
	got = t.d.decide(ctx, r, ask{policy: p, keys: []string{key}, cost: size, op: opLease, hold: terms.hold})
	d := got.d
	s.mu.Lock()
	defer s.mu.Unlock()
	if got.by == byFailureMode || d.Granted == 0 {
		if got.by != byFailureMode && d.RetryAfter > 0 && d.RetryAfter != Never {
			s.denial, s.deniedUntil = d, start+int64(d.RetryAfter)
			time.AfterFunc(d.RetryAfter, func() { t.sweep(p, s, key) })
		}
		return got, false
	}
	g := &leaseGrant{d: d, granted: d.Granted, charged: d.Granted, start: start, until: start + int64(terms.hold)}
	s.cur = g
	time.AfterFunc(terms.hold, func() { t.expire(p, s, key, g) })
	return got, true
}

// closeGrant marks g, s's grant until now (s locked), closed, sizes the
// next grant (twice what g spent, doubled again when g ran out before
// its hold ended), and returns what the store counts for g and what it
// is to count, g having given back what it did not spend: its caller
// settles it (recharge).
func closeGrant(s *leaseSlot, g *leaseGrant, now int64) (from, to int64) {
	g.closed = true
	next := 2 * g.used
	if now < g.until && g.used >= g.granted {
		next = 2 * g.granted
	}
	s.size = max(next, 1)
	from = g.charged
	// Once a debt was charged beyond the grant, the store gives nothing
	// of an earlier charge back (a debt voids refunds; Limiter.Settle).
	if g.used < g.charged && g.charged == g.granted {
		g.charged = max(g.used, 0)
	}
	return from, g.charged
}

// expire closes g when its hold has ended and it still runs, giving back
// what it did not spend, and forgets the slot when it holds nothing more.
func (t *leaseTable) expire(p *Policy, s *leaseSlot, key string, g *leaseGrant) {
	s.mu.Lock()
	now := t.d.sinceEpoch()
	if s.cur != g || now < g.until || s.fetching != nil {
		s.mu.Unlock()
		return // replaced, or a test clock not there yet: the next request closes it
	}
	s.cur = nil
	from, to := closeGrant(s, g, now)
	s.mu.Unlock()
	_ = t.recharge(context.Background(), nil, p, g, from, to)
	t.sweep(p, s, key)
}

// recharge changes what the store counts for g, a grant under p, from
// units to to units, as a settle of g's charge as it stood (g's charged
// already says to): what it did not spend goes back (to < from), a debt
// beyond what the store counted is charged now (to > from). The error
// goes to the hooks and the log, and to the caller.
func (t *leaseTable) recharge(ctx context.Context, r *http.Request, p *Policy, g *leaseGrant, from, to int64) error {
	rc := g.d.Receipt
	if from == to || rc.Policy == nil {
		return nil
	}
	by := chargedBy(rc)
	st, ok := t.d.storeOf(by).(settler)
	if !ok {
		return fmt.Errorf("ratelimit: the store (%T) cannot settle a leased grant: %w", t.d.storeOf(by), errors.ErrUnsupported)
	}
	was := rc.withCost(from)
	return t.d.op(ctx, r, p, by, "settle", func(ctx context.Context) error { return st.Settle(ctx, was, to) })
}

// adjustGrant changes what a request admitted from grants under p (uses) spent by
// delta units: back into the grants still running when negative (a grant
// closed keeps them: the limit under-admits by them), and a debt when
// positive, charged to the store now (a settle of each key's grant above
// what the store counts for it), as any settle charges its debt: no
// process admits a request while the debt fills a limit. The grant's
// unspent units stay to spend; once it carries a debt, it gives nothing
// back when it closes (a debt voids the refunds of earlier charges).
func (t *leaseTable) adjustGrant(ctx context.Context, r *http.Request, p *Policy, uses []leaseUse, delta int64) error {
	var errs []error
	for _, u := range uses {
		u.s.mu.Lock()
		g := u.g
		from := g.charged
		switch {
		case delta < 0 && !g.closed:
			g.used -= min(-delta, g.used)
		case delta > 0:
			g.charged += delta
		}
		to := g.charged
		u.s.mu.Unlock()
		if err := t.recharge(ctx, r, p, g, from, to); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// forget drops the process's grants of keys under the leased
// policy p (a Reset): unsettled, as the store forgets their charges.
func (t *leaseTable) forget(p *Policy, keys []string) {
	for _, s := range t.existing(p.def, keys) {
		s.mu.Lock()
		if g := s.cur; g != nil {
			// The store forgets its charge: a debt settled later charges
			// its own units only.
			g.closed, g.charged = true, g.used
			s.cur = nil
		}
		s.deniedUntil, s.size = 0, 0
		s.mu.Unlock()
	}
}
