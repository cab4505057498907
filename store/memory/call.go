package memory

import (
	"slices"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/shardmap"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// call is one request on the store (Store.do), its keys' shards locked:
// the keys read (their entries, or the ID records that answer for them),
// decided by run, and what it did written back.
type call struct {
	m   *Store
	req ratelimit.Request
	lay *layout.Policy
	use *layout.Policy // the layout the keys are read in (relay)
	lim []layout.Limit // use's limits
	now int64
	idh string // the request ID's hash, "" when none counts

	shards  [ratelimit.MaxKeys]uint64
	mks     [ratelimit.MaxKeys]shardmap.Key
	states  [ratelimit.MaxKeys]keyRoom
	ents    [ratelimit.MaxKeys]*memEntry
	decided [ratelimit.MaxKeys]*keyState
	evs     [ratelimit.MaxKeys][ratelimit.MaxLimits]eval // decided's evaluations (run's)
	records [ratelimit.MaxKeys]*idRecord
	nd      int // keys decided: decided[:nd]
}

// keyRoom is a key's state while run decides it, with the room run
// writes its statuses and marks in, so that it appends without
// allocating.
type keyRoom struct {
	keyState
	stats [ratelimit.MaxLimits]verdict.Status
	tats  [ratelimit.MaxLimits]int64
}

// calls keeps calls for the next requests: a call has room for every key
// and limit a request may have (some 14 KB), which a new one would zero
// and the collector scan on every request, most of which have one key.
var calls = sync.Pool{New: func() any { return new(call) }}

// newCall returns a call for req on m: a zero one, as free leaves every
// call it gives back.
func newCall(m *Store, req ratelimit.Request) *call {
	c := calls.Get().(*call)
	c.m, c.req, c.lay = m, req, plan.Layout(req.Policy)
	return c
}

// decide decides the call's request under o, its keys' shards locked:
// the keys read, run, and what it did written back.
func (c *call) decide(o verdict.Call) ratelimit.Decision {
	var locked [ratelimit.MaxKeys]uint64
	defer c.m.unlockShards(c.m.lockKeys(c.req.Keys, &c.shards, &locked))
	c.now = c.m.now().UnixMicro()
	c.read()
	c.relay()
	out := outcome{allowed: true}
	if c.nd > 0 {
		out = run(c.req.Policy, c.lim, c.decided[:c.nd], c.evs[:c.nd], c.now, o)
	}
	return c.answer(out)
}

// free gives c back for another request, reset.
func (c *call) free() {
	c.reset()
	calls.Put(c)
}

// reset makes c zero again where its request wrote it (the request's
// keys: nothing of a call past them is written), so that it holds no
// reference to the request or its entries.
func (c *call) reset() {
	nk := len(c.req.Keys)
	clear(c.shards[:nk])
	clear(c.mks[:nk])
	clear(c.states[:nk])
	clear(c.ents[:nk])
	clear(c.decided[:nk])
	clear(c.evs[:nk])
	clear(c.records[:nk])
	c.m, c.req, c.lay, c.use, c.lim, c.now, c.idh, c.nd = nil, ratelimit.Request{}, nil, nil, nil, 0, "", 0
}

// read finds each key's entry, or the ID record that answers for it: keys
// whose ID record answers for them are not decided again.
func (c *call) read() {
	m, req, lim := c.m, c.req, c.lay.Limits
	pid := req.Policy.ID()
	for ki, k := range req.Keys {
		c.mks[ki] = shardmap.KeyOf(pid, k)
	}
	own := c.mks[:len(req.Keys)]
	// Under a policy with a Concurrent limit every run of a request holds
	// a slot: a repeat of its ID is decided and charged anew, never
	// answered from its record (it would run without a slot).
	if req.ID != "" && !c.lay.Slots {
		c.idh = layout.IDHash(req.ID)
	}
	for ki := range req.Keys {
		sh := &m.shards[c.shards[ki]]
		if c.idh != "" {
			// A key under a running penalty is decided again, however
			// its ID was answered before: a block holds against repeats.
			if r := sh.ids[idKey{c.mks[ki], c.idh}]; r != nil && r.expires > c.now && r.repeats < ratelimit.MaxRepeats && !m.blocked(sh, c.mks[ki], c.now) {
				r.repeats++
				c.records[ki] = r
				continue
			}
		}
		e := m.entry(sh, c.mks[ki], c.now, c.lay, own)
		c.ents[ki] = e
		room := &c.states[ki]
		k := &room.keyState
		k.pend, k.held = e.pend, 0
		for _, r := range e.pend {
			k.held += r.cost
		}
		k.stats, k.tats = room.stats[:len(lim)], room.tats[:len(lim)]
		c.decided[c.nd] = k
		c.nd++
	}
}

// relay reads every key's counters in one layout. Counters a policy of the
// same ID with a larger rate wrote hold larger log rings: growing a ring
// forgets nothing. A key laid out anew keeps its new layout only if
// charged, as the Redis script writes a grown ring only with a charge: a
// log's units past the ring it was written in are then lost in both stores
// alike.
func (c *call) relay() {
	c.use = storedLayout(c.lay, c.ents[:len(c.req.Keys)])
	c.lim = c.use.Limits
	for ki, e := range c.ents[:len(c.req.Keys)] {
		if e == nil {
			continue
		}
		if e.lay != c.use && !sameRings(e.lay, c.use) {
			c.states[ki].st = relayout(e.f, e.lay, c.use)
			continue
		}
		e.lay = c.use
		c.states[ki].st = e.f
	}
}

// answer writes back what run did (out) and returns the decision: each
// key's statuses folded, its entry's state, expiry and ID record.
func (c *call) answer(out outcome) ratelimit.Decision {
	req, lim, now := c.req, c.lim, c.now
	d := ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, len(lim)), Granted: out.granted}
	if out.release > now {
		d.Delay = time.Duration(out.release-now) * time.Microsecond
	}
	// The receipt's keys and marks, sized once.
	var marks []int64
	var charged []string
	if n := c.chargedKeys(); n > 0 {
		charged, marks = make([]string, 0, n), make([]int64, 0, n*(2+len(lim)))
	}
	for ki := range req.Keys {
		if r := c.records[ki]; r != nil {
			for i, s := range r.stats {
				verdict.Fold(&d, i, ki, s, ki == 0)
			}
			if c.nd == 0 && ki == 0 { // every key repeats: the first key's answer
				d.Granted = r.granted
				if r.at > now {
					d.Delay = time.Duration(r.at-now) * time.Microsecond
				}
			}
			continue
		}
		k := &c.states[ki].keyState
		for i, s := range k.stats {
			verdict.Fold(&d, i, ki, s, ki == 0)
		}
		c.keep(ki, k)
		if k.charged {
			charged = append(charged, req.Keys[ki])
			marks = append(marks, k.at, k.st[layout.MemGen])
			for i := range lim {
				marks = append(marks, k.tats[i])
			}
			c.record(ki, k, out.granted)
		}
	}
	verdict.Finish(&d, out.allowed, req.Policy)
	d.Repeated = c.nd == 0
	if len(charged) > 0 {
		d.Receipt = ratelimit.Receipt{Policy: req.Policy, Keys: charged, Cost: out.granted, Marks: marks}
	}
	return d
}

// chargedKeys is how many keys run charged.
func (c *call) chargedKeys() int {
	n := 0
	for ki := range c.req.Keys {
		if c.records[ki] == nil && c.states[ki].charged {
			n++
		}
	}
	return n
}

// keep writes key ki's state back to its entry, with the expiry what it
// now counts needs.
func (c *call) keep(ki int, k *keyState) {
	e := c.ents[ki]
	e.pend = k.pend
	if e.lay != c.use {
		if k.charged {
			e.f, e.lay = k.st, c.use
		} else if k.blocked {
			e.f[layout.MemBlock], e.f[layout.MemBlockLimit] = k.st[layout.MemBlock], k.st[layout.MemBlockLimit]
		}
	}
	if !k.charged && !k.blocked {
		return
	}
	last := max(k.at, k.t0)
	if n := len(k.pend); n > 0 {
		last = max(last, k.pend[n-1].at)
	}
	e.expires = max(e.expires, last+c.lay.TTLMS*1000)
	for i := range c.lim {
		if c.lim[i].Kind == layout.Token {
			// A TAT written in another interval, or places in line
			// counted in one, may owe past the TTL: the entry outlives
			// what it owes (store/redis's debt).
			e.expires = max(e.expires, tokenTAT(&k.counters, &c.lim[i]))
		}
	}
}

// record keeps the answer of a charged key under the request's ID, unless
// a live record is there.
func (c *call) record(ki int, k *keyState, granted int64) {
	if c.idh == "" {
		return
	}
	sh := &c.m.shards[c.shards[ki]]
	ik := idKey{c.mks[ki], c.idh}
	if old := sh.ids[ik]; old == nil || old.expires <= c.now {
		c.m.bound(sh, c.now)
		sh.ids[ik] = &idRecord{expires: c.now + c.lay.IDTTL, granted: granted, at: k.t, stats: slices.Clone(k.stats)}
	}
}
