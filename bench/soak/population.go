package main

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// class is the behaviour of an identity.
type class uint8

const (
	normal  class = iota // resident: present all run, well under the policy
	greedy               // resident: above the policy, ignores Retry-After
	polite               // resident: above the policy, waits Retry-After after a 429
	visitor              // arrives during the first fifth of the run, sends a few requests, leaves
	numClasses
)

var classNames = [numClasses]string{"normal", "greedy", "polite", "visitor"}

// Identities are numbered by class: id/classStride is the class.
const classStride = 100_000_000

// Load shares: the fraction of the offered requests each class is asked to
// send; normal residents get the rest. Visitors send only during the
// arrival phase; afterwards their share goes to the greedy residents, whose
// admissions the policy caps, so that what each identity is admitted, and
// so what the client keeps per identity, does not change when the arrivals
// stop. A request whose class has no identity ready (all in flight, or
// waiting out a Retry-After) goes to a normal resident.
const (
	shareVisitor = 0.15
	shareGreedy  = 0.15
	sharePolite  = 0.15
	// visitorRequests is how many requests each visitor sends, about one a
	// second, before it leaves for good.
	visitorRequests = 5
	// pickTries is how many identities of a class are tried for one request.
	pickTries = 5
)

// span is one admission decided by the store: when the client sent the
// request and when it received the answer, since the start of the run.
// The store charged it at some instant between the two.
type span struct{ send, recv time.Duration }

// idState is what the client side knows of one identity. One request per
// identity is in flight at a time, so its admissions complete in the order
// they were sent.
type idState struct {
	inflight bool
	readyAt  time.Duration // polite: not before this (Retry-After)
	adm      []span        // admissions sent within the longest period, oldest first
}

// limitSpec is one limit of the policy, for the over-admission check.
type limitSpec struct {
	rate   int
	period time.Duration
}

// population picks the identity of each request and checks every decided
// admission against the policy. Safe for concurrent use.
type population struct {
	mu  sync.Mutex
	rng *rand.Rand
	ids map[int32]*idState

	n            [numClasses]int // residents per class; visitors: how many have arrived so far
	arrivalEnd   time.Duration   // visitors arrive before this
	visitorBatch int             // visitors sending at the same time (about one request a second each)
	visitorReqs  int64           // visitor requests assigned so far

	limits    []limitSpec
	maxPeriod time.Duration

	violations int
	first      []string
}

func newPopulation(cfg config, limits []limitSpec, arrivalEnd time.Duration) *population {
	p := &population{
		rng:          rand.New(rand.NewPCG(1, 2)),
		ids:          make(map[int32]*idState),
		arrivalEnd:   arrivalEnd,
		visitorBatch: max(1, int(shareVisitor*cfg.rps+0.5)),
		limits:       limits,
	}
	p.n[normal], p.n[greedy], p.n[polite] = cfg.residents, cfg.greedy, cfg.polite
	for _, l := range limits {
		p.maxPeriod = max(p.maxPeriod, l.period)
	}
	for _, c := range []class{normal, greedy, polite} {
		for i := range p.n[c] {
			p.ids[int32(c)*classStride+int32(i)] = &idState{}
		}
	}
	return p
}

// pick chooses the identity of a request sent at now and marks it in flight.
func (p *population) pick(now time.Duration) (int32, class) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rng.Float64()
	want := normal
	switch {
	case r < shareVisitor && now < p.arrivalEnd:
		want = visitor
	case r < shareVisitor:
		want = greedy
	case r < shareVisitor+shareGreedy:
		want = greedy
	case r < shareVisitor+shareGreedy+sharePolite:
		want = polite
	}
	if want == visitor {
		// Visitor requests go round a batch of visitorBatch identities,
		// each getting one per round (about a second), visitorRequests
		// rounds; then the next batch arrives.
		j := p.visitorReqs
		p.visitorReqs++
		b := int64(p.visitorBatch)
		idx := j/(b*visitorRequests)*b + j%b
		p.n[visitor] = max(p.n[visitor], int(idx)+1)
		id := int32(visitor)*classStride + int32(idx)
		if p.take(id, now) {
			return id, visitor
		}
		want = normal
	}
	if want != normal && p.n[want] > 0 {
		for range pickTries {
			id := int32(want)*classStride + int32(p.rng.IntN(p.n[want]))
			if p.take(id, now) {
				return id, want
			}
		}
	}
	for {
		id := int32(p.rng.IntN(p.n[normal]))
		if p.take(id, now) {
			return id, normal
		}
	}
}

// take marks id in flight if it is ready at now.
func (p *population) take(id int32, now time.Duration) bool {
	st := p.ids[id]
	if st == nil {
		st = &idState{}
		p.ids[id] = st
	}
	if st.inflight || st.readyAt > now {
		return false
	}
	st.inflight = true
	return true
}

// done records the answer to id's request. decided reports an admission the
// store decided (200 with rate-limit headers); retryAfter > 0 is the wait a
// 429 asked for.
func (p *population) done(id int32, cls class, s span, decided bool, retryAfter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.ids[id]
	st.inflight = false
	if cls == polite && retryAfter > 0 {
		st.readyAt = s.recv + retryAfter
	}
	if !decided {
		return
	}
	st.prune(s.recv - p.maxPeriod)
	st.adm = append(st.adm, s)
	// Rate+1 admissions of one identity, all charged between the send of
	// the first and the receipt of the last: if that span is shorter than
	// Period, some window [t, t+Period) held them all, more than Rate.
	n := len(st.adm)
	for li, l := range p.limits {
		if n <= l.rate {
			continue
		}
		first := st.adm[n-l.rate-1]
		if span := s.recv - first.send; span < l.period {
			p.violations++
			if len(p.first) < 10 {
				p.first = append(p.first, fmt.Sprintf("%s identity %d, limit %d (%d per %v): %d admissions between %v (first sent) and %v (last answered), %v apart",
					classNames[cls], id%classStride, li, l.rate, l.period, l.rate+1, first.send, s.recv, span))
			}
		}
	}
}

// prune drops admissions sent at or before cutoff: with any later answer
// they span at least the longest period, so they can no longer show a
// violation.
func (st *idState) prune(cutoff time.Duration) {
	i := 0
	for i < len(st.adm) && st.adm[i].send <= cutoff {
		i++
	}
	if i > 0 {
		st.adm = st.adm[i:]
		if len(st.adm) == 0 {
			st.adm = nil
		}
	}
}

// sweep prunes every identity's admissions at now and forgets visitors that
// have nothing left to check; it returns how many identities are tracked.
func (p *population) sweep(now time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, st := range p.ids {
		st.prune(now - p.maxPeriod)
		if class(id/classStride) == visitor && !st.inflight && len(st.adm) == 0 {
			delete(p.ids, id)
		}
	}
	return len(p.ids)
}

// result returns the number of violations and the first few.
func (p *population) result() (int, []string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.violations, append([]string(nil), p.first...), p.n[visitor]
}
