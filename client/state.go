package client

import (
	"sync"
	"time"
)

// The budgets: what the transport knows of a host's quotas, one budget per
// quota policy (RateLimit-Policy member name, or "" for the unnamed quota
// of the legacy fields and of a bare 429), shared by every request to that
// host.
//
// A budget counts the requests that may still be sent (rem) before an
// answer tells more. An answer's remaining r is what is left after that
// answer's own request, so the requests still in flight when it arrives
// are taken from it: if the server counted them already, the budget is
// short by as many (the safe side); if not, it is exact. When the budget is
// spent, requests wait until the time the server said quota comes back
// (resume), then one request (a probe) goes alone to learn the new
// budget.
//
// Answers can arrive out of order: an answer is fresh when its request was
// sent after the latest answer about the budget arrived, so that the
// server counted it after everything that answer said. A fresh answer
// replaces the budget; a stale one can only lower it and push resume
// later.
//
// Routes: a host often has different quotas for different routes (a
// search API and the rest). The transport remembers, for every method and
// path it has seen answered, the budgets the answer named, and gates
// requests to that route by those budgets only. A request to a route not
// seen yet is gated by every budget of the host.

// Bounds on what one transport remembers, so that no input makes it grow
// without end.
const (
	maxHosts   = 1024 // hosts; idle ones, then quiet ones, are forgotten beyond this (transport.host)
	maxRoutes  = 1024 // routes per host; the table restarts beyond this
	maxBudgets = 256  // budgets per host; idle ones are forgotten beyond this
	maxLog     = 512  // admitted answers remembered per budget (see logBound)
)

// budget is the state of one quota policy of one host. Its fields are
// guarded by the host's mutex.
type budget struct {
	key, name  string
	quota      int64         // q of RateLimit-Policy; -1 when not said
	window     time.Duration // w; 0 when not said
	concurrent bool          // a limit of requests in flight

	known   bool      // rem and resume hold the server's word
	rem     int64     // requests that may be sent before a new answer
	resume  time.Time // when rem ≤ 0: when a probe may go
	firm    bool      // resume is what an answer saying the budget is spent said
	floor   time.Time // when firm: the server said nothing comes back before
	spentAt time.Time // when firm: when the request whose answer said so was sent
	syncSeq uint64    // the host's sequence number of the latest answer about it
	probe   uint64    // the probe in flight, 0 when none
	// roundMin is the least remaining said since the latest fresh answer
	// (-1: none): once no request is in flight, it is what remains.
	roundMin int64
	// inflight holds the requests sent and not answered that may count
	// against the budget: those it gated, and those in flight when it was
	// first heard of.
	inflight map[uint64]struct{}
	log      []time.Time // when the answers of admitted requests it counted came, oldest first
}

// host is the state of one scheme://host[:port].
type host struct {
	key string

	mu       sync.Mutex
	seq      uint64 // orders sends and answers
	lastID   uint64
	budgets  map[string]*budget
	routes   map[string][]string // "METHOD path" → keys of the budgets it is gated by
	inflight map[uint64]struct{}
	waiters  int           // requests waiting in acquire
	changed  chan struct{} // closed (and replaced) whenever an answer arrives
}

func newHost(key string) *host {
	return &host{
		key:      key,
		budgets:  map[string]*budget{},
		routes:   map[string][]string{},
		inflight: map[uint64]struct{}{},
		changed:  make(chan struct{}),
	}
}

// ticket is one request let through the gate.
type ticket struct {
	id    uint64
	seq   uint64
	sent  time.Time
	route string
	gate  []*budget
	took  []bool // whether it took one from gate[i]'s rem
}

// verdict is why a request may not go yet.
type verdict struct {
	// until is the earliest time the request could go; zero when it waits
	// for an answer (a probe's) rather than a time.
	until  time.Time
	policy string // the name of a budget that holds it
}

// gateOf returns the budgets a request to route is gated by.
func (h *host) gateOf(route string) []*budget {
	keys, ok := h.routes[route]
	if !ok {
		out := make([]*budget, 0, len(h.budgets))
		for _, b := range h.budgets {
			out = append(out, b)
		}
		return out
	}
	out := make([]*budget, 0, len(keys))
	for _, k := range keys {
		if b := h.budgets[k]; b != nil {
			out = append(out, b)
		}
	}
	return out
}

// check reports whether a request to route may go at now, and if not, why.
func (h *host) check(gate []*budget, now time.Time) (bool, verdict) {
	var v verdict
	blocked := false
	for _, b := range gate {
		switch {
		case !b.known || b.rem > 0:
			continue
		case now.Before(b.resume):
			if !blocked || v.until.IsZero() || b.resume.After(v.until) {
				v.until, v.policy = b.resume, b.name
			}
			blocked = true
		case b.probe != 0:
			if !blocked {
				v.policy = b.name
			}
			blocked = true
		}
	}
	return !blocked, v
}

// tryAcquire lets a request to route go at now, returning its ticket, or
// says why it may not and returns the channel that is closed when the
// state next changes.
func (h *host) tryAcquire(route string, now time.Time) (*ticket, verdict, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	gate := h.gateOf(route)
	if ok, v := h.check(gate, now); !ok {
		return nil, v, h.changed
	}
	h.lastID++
	h.seq++
	t := &ticket{id: h.lastID, seq: h.seq, sent: now, route: route, gate: gate, took: make([]bool, len(gate))}
	h.inflight[t.id] = struct{}{}
	for i, b := range gate {
		b.inflight[t.id] = struct{}{}
		switch {
		case !b.known:
		case b.rem > 0:
			b.rem--
			t.took[i] = true
		default:
			b.probe = t.id
		}
	}
	return t, verdict{}, nil
}

// peek says whether a request to route could go at now, without taking
// anything.
func (h *host) peek(route string, now time.Time) (bool, verdict) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.check(h.gateOf(route), now)
}

// wait and done count the requests waiting in acquire, so that a host
// somebody waits on is never forgotten.
func (h *host) wait() {
	h.mu.Lock()
	h.waiters++
	h.mu.Unlock()
}

func (h *host) done() {
	h.mu.Lock()
	h.waiters--
	h.mu.Unlock()
}

// budgetFor returns the budget of key, creating it: a new budget counts
// every request of the host in flight, as any may count against it.
func (h *host) budgetFor(key, name string, now time.Time) *budget {
	if b := h.budgets[key]; b != nil {
		return b
	}
	if len(h.budgets) >= maxBudgets {
		for k, b := range h.budgets {
			if b.idle(now) {
				delete(h.budgets, k)
			}
		}
	}
	b := &budget{key: key, name: name, quota: -1, roundMin: -1, inflight: make(map[uint64]struct{}, len(h.inflight))}
	for id := range h.inflight {
		b.inflight[id] = struct{}{}
	}
	h.budgets[key] = b
	return b
}

// idle reports that forgetting b loses nothing that holds a request back.
func (b *budget) idle(now time.Time) bool {
	return len(b.inflight) == 0 && (!b.known || b.rem > 0 || !now.Before(b.resume))
}

// quiet reports that no request to h is sent or waiting: forgetting it
// loses only the waits its server said.
func (h *host) quiet() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiters == 0 && len(h.inflight) == 0
}

// idle reports that forgetting h loses nothing that holds a request back.
func (h *host) idle(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters > 0 || len(h.inflight) > 0 {
		return false
	}
	for _, b := range h.budgets {
		if !b.idle(now) {
			return false
		}
	}
	return true
}

// logBound returns, for a budget the server said is spent in answer to a
// request sent at sent, the time by which it has room again: when the
// client itself sent the last quota requests (so they are what the server
// counts), the oldest of them leaves the window w after its answer came,
// at the latest. Each request still in flight may take a place that
// frees (or hold one the log does not show yet), so with k in flight it is
// the (k+1)-th oldest. ok is false when the log cannot tell: no quota or
// window known, a concurrent limit, too few answers, or the one that
// would leave first out of the window before the server decided (others
// spend the quota too). The time may be past: the room is there already.
func (b *budget) logBound(sent time.Time) (time.Time, bool) {
	if b.concurrent || b.quota <= 0 || b.window <= 0 {
		return time.Time{}, false
	}
	i := len(b.log) - int(b.quota) + len(b.inflight)
	if i < 0 || i >= len(b.log) {
		return time.Time{}, false
	}
	at := b.log[i].Add(b.window)
	return at, at.After(sent)
}

// record adds an admitted request's answer to the log, which keeps the
// last quota of them (what logBound reads), up to maxLog.
func (b *budget) record(recv time.Time) {
	if b.quota <= 0 || b.quota > maxLog || b.concurrent {
		b.log = nil
		return
	}
	if n := int(b.quota); len(b.log) >= n {
		copy(b.log, b.log[len(b.log)-n+1:])
		b.log = b.log[:n-1]
	}
	b.log = append(b.log, recv)
}

// response is what finish needs of an answer.
type response struct {
	status int
	answer answer
}

// finish records the answer to t received at now; resp is nil when the
// request got no answer (an error). A wait longer than longest and than
// the longest window the host's policies state is held to that; held
// reports that the answer said one.
func (h *host) finish(t *ticket, resp *response, now time.Time, longest time.Duration) (held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	defer h.broadcast()
	h.seq++
	recvSeq := h.seq
	delete(h.inflight, t.id)
	var probed []*budget
	for _, b := range h.budgets {
		delete(b.inflight, t.id)
		if b.probe == t.id {
			b.probe = 0
			probed = append(probed, b)
		}
	}
	if resp == nil {
		return false
	}
	a := &resp.answer
	denied := refused(resp.status, *a)
	counted := !denied && resp.status < 500

	for _, p := range a.policies {
		b := h.budgetFor(p.key, p.name, now)
		if p.quota >= 0 {
			b.quota, b.window, b.concurrent = p.quota, p.window, p.concurrent
		}
		if counted {
			b.record(now)
		}
	}
	limits := a.limits
	if denied && len(limits) == 0 {
		// A 429 that names no quota: the host's unnamed one is spent.
		limits = []limitInfo{{wait: DefaultPause}}
	}
	named := make(map[string]bool, len(limits))
	bound := max(longest, h.longestWindow())
	for _, l := range limits {
		named[l.key] = true
		b := h.budgetFor(l.key, l.name, now)
		if counted && !hasPolicy(a.policies, l.key) {
			b.record(now)
		}
		h.apply(b, t, l, a, denied, recvSeq, now)
		if limit := now.Add(bound); b.resume.After(limit) {
			b.resume, held = limit, true
			if b.floor.After(limit) {
				b.floor = limit
			}
		}
	}

	if counted {
		// Policies listed but not named by a fresh admitted answer: the
		// server named the most restrictive; what it said before of the
		// others is out of date.
		if a.form == formIETF {
			for _, p := range a.policies {
				if b := h.budgets[p.key]; b != nil && !named[p.key] && t.seq > b.syncSeq {
					b.known, b.syncSeq = false, recvSeq
				}
			}
		}
		// A probe answered without a word about its budget: that budget
		// does not apply to this route, and its wait is over; forget it.
		for _, b := range probed {
			if !named[b.key] && !hasPolicy(a.policies, b.key) && b.rem <= 0 {
				b.known = false
			}
		}
		// A request that took from a budget its answer does not mention
		// (a route not seen before, gated by every budget) did not count
		// against it: give it back.
		for i, b := range t.gate {
			if t.took[i] && b.known && !named[b.key] && !hasPolicy(a.policies, b.key) {
				b.rem++
			}
		}
	}
	// The client's log has grown: the quota may come back sooner.
	for _, p := range a.policies {
		if b := h.budgets[p.key]; b != nil {
			b.tighten()
		}
	}
	for _, l := range limits {
		if b := h.budgets[l.key]; b != nil {
			b.tighten()
		}
	}
	// With nothing in flight, the answers since the latest fresh one are
	// all in: the least remaining they said is what remains (taking the
	// requests in flight from each answer was only the safe side).
	for _, b := range h.budgets {
		if len(b.inflight) == 0 && b.roundMin >= 0 && b.known && !b.concurrent {
			b.rem, b.roundMin = b.roundMin, -1
		}
	}
	if resp.status < 500 {
		keys := make([]string, 0, len(a.policies)+len(limits))
		for _, p := range a.policies {
			keys = append(keys, p.key)
		}
		for _, l := range limits {
			if !hasPolicy(a.policies, l.key) {
				keys = append(keys, l.key)
			}
		}
		if _, ok := h.routes[t.route]; !ok && len(h.routes) >= maxRoutes {
			h.routes = map[string][]string{}
		}
		h.routes[t.route] = keys
	}
	return held
}

// maxWindow bounds the windows of RateLimit-Policy the transport takes as
// the longest wait a server may mean: 366 days, the longest period this
// project's Limiter accepts.
const maxWindow = 366 * 24 * time.Hour

// longestWindow is the longest window the host's policies state, at most
// maxWindow; 0 when none says one.
func (h *host) longestWindow() time.Duration {
	w := time.Duration(0)
	for _, b := range h.budgets {
		w = max(w, min(b.window, maxWindow))
	}
	return w
}

// apply sets budget b from l, part of the answer a to t received at now.
func (h *host) apply(b *budget, t *ticket, l limitInfo, a *answer, denied bool, recvSeq uint64, now time.Time) {
	fresh := !b.known || t.seq > b.syncSeq
	rem := l.remaining - int64(len(b.inflight))
	if b.concurrent {
		rem++ // the slot of the answered request is free again
	}
	if denied {
		rem = min(rem, 0)
	}
	spent := l.remaining == 0 || denied
	resume, floor := now.Add(l.wait), now.Add(l.least)
	if denied && a.hasRetryAfter {
		floor = later(floor, now.Add(a.retryAfter))
		resume = later(resume, floor)
	}
	said := l.remaining
	if denied {
		said = 0
	}
	if fresh || b.roundMin < 0 || said < b.roundMin {
		b.roundMin = said
	}
	switch {
	case fresh:
		b.rem, b.resume, b.floor, b.spentAt, b.firm = rem, resume, floor, t.sent, spent
	case spent && !b.firm:
		// A stale answer saying the budget is spent is the server's word
		// on when quota comes back; what an answer with some left said
		// was only a bound for when the requests in flight are answered.
		b.rem, b.resume, b.floor, b.spentAt, b.firm = min(b.rem, rem), resume, floor, t.sent, true
	default:
		b.rem = min(b.rem, rem)
		if spent == b.firm {
			b.resume, b.floor, b.spentAt = later(b.resume, resume), later(b.floor, floor), later(b.spentAt, t.sent)
		}
	}
	b.known = true
	b.syncSeq = max(b.syncSeq, recvSeq)
}

// tighten brings the resume of a budget the server said is spent forward
// to what the client's own log says (logBound), within the server's
// rounding: never before its floor, and not at all when the log is a
// second or more below it, so that a wait longer than the window explains
// (a penalty, a Retry-After) stays as the server said.
func (b *budget) tighten() {
	if !b.known || !b.firm || b.rem > 0 {
		return
	}
	// The server's floor is whole seconds: a log a second or more below it
	// does not explain the server's wait.
	if at, ok := b.logBound(b.spentAt); ok && at.Before(b.resume) && at.After(b.floor.Add(-time.Second)) {
		b.resume = later(at, b.floor)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// broadcast wakes the requests waiting for a change.
func (h *host) broadcast() {
	close(h.changed)
	h.changed = make(chan struct{})
}
