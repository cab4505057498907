package ratelimit

import (
	"net/http"
	"sync/atomic"
	"time"
)

// Holding: Retry-After counts whole seconds, so a client told to wait 50ms
// waits a second. Where a second is most of what a limit admits (a token
// bucket whose burst refills within a second, a period under a second, the
// approximation's weighted window), such a client gets a fraction of the
// rate it was promised. So Handler holds a request whose wait is below one
// second, by default, rather than answer 429: it is served when its turn
// comes. Holding is bounded: at most MaxHeld requests of one Limiter are
// held at once; beyond that, requests get 429 as before.

// DefaultMaxHeld is how many requests one Limiter's Handler holds at once
// unless WithMaxHeld says otherwise.
const DefaultMaxHeld = 1024

// holdBelow is the default hold: waits below one second, what Retry-After
// cannot say.
const holdBelow = time.Second - time.Microsecond

// WithMaxHeld bounds how many requests the Limiter's Handler holds at once
// (see WithMaxDelay), so that holding cannot be turned into a resource
// attack: beyond n, a request that would be held gets 429 at once. n = 0
// turns holding off; the default is DefaultMaxHeld.
func WithMaxHeld(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.fail("WithMaxHeld(%d): want 0 or more", n)
			return
		}
		c.maxHeld = n
	}
}

// holder counts the requests a Limiter holds.
type holder struct{ n atomic.Int64 }

// enter takes a place among the held requests, if one is free; leave gives
// it back.
func (h *holder) enter(max int) bool {
	if h.n.Add(1) > int64(max) {
		h.n.Add(-1)
		return false
	}
	return true
}

func (h *holder) leave() { h.n.Add(-1) }

// admit decides a request for Handler: asking the store once and, when the
// answer is a denial that a short wait would turn into an admission, holding
// the request until its turn within the Limiter's maximum delay. held is
// the context's error when the client left while held (its place given
// back).
func (l *Limiter) admit(r *http.Request, a ask) (d Decision, fallback, failed bool, err, held error) {
	// A policy with a penalty is never held: its denials start or report
	// the penalty, whose end is no turn to wait for, however near.
	if l.maxDelay == 0 || l.maxHeld == 0 || l.dryRun || a.policy.BlockFor() > 0 {
		d, fallback, failed, err = l.decide(r.Context(), r, a)
		return d, fallback, failed, err, nil
	}
	if l.reserveFirst {
		// WithMaxDelay: every request asks for a place in line.
		if !l.holding.enter(l.maxHeld) {
			d, fallback, failed, err = l.decide(r.Context(), r, a)
			return d, fallback, failed, err, nil
		}
		defer l.holding.leave()
		return l.acquire(r.Context(), r, a, l.maxDelay)
	}
	// The default: ask as usual (the common call stays the common call);
	// hold only a denial whose wait is below the maximum delay. A denial
	// in flight has no wait to hold for: a slot frees when a request ends.
	d, fallback, failed, err = l.decide(r.Context(), r, a)
	if failed || d.Allowed || a.cost == 0 || d.InFlight || d.RetryAfter <= 0 || d.RetryAfter > l.maxDelay {
		return d, fallback, failed, err, nil
	}
	if !l.holding.enter(l.maxHeld) {
		return d, fallback, failed, err, nil
	}
	defer l.holding.leave()
	return l.acquire(r.Context(), r, a, l.maxDelay)
}
