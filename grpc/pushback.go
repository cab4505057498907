package ratelimitgrpc

import (
	"strings"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// pushbackKey is the trailer key grpc-go's retry policy reads: the
// milliseconds to wait before the next attempt, or a negative number for
// none (gRFC A6).
const pushbackKey = "grpc-retry-pushback-ms"

// lineCap bounds the keys a line remembers; past it, a refusal is pushed
// back by its own wait alone.
const lineCap = 1 << 16

// A line spaces the retries that refusals push back. A stock client
// retries exactly when told: told the same wait, every client refused
// while a limit is full would come back at once, and all but one be
// refused again. So each refusal of one limit and keys is given the next
// place after the last one promised (at least its own wait), one emission
// interval of the limit apart: the retries arrive as the limit admits.
type line struct {
	mu   sync.Mutex
	next map[string]time.Time // the first free place of a limit and keys
}

// pushback returns the wait to tell the client refused by res, and false
// when no wait helps (a cost above the limit: grpc-go's retry then gives
// up) or none can be promised (requests in flight: a slot frees when one
// ends). now is the time of the refusal.
func (l *line) pushback(res ratelimit.Result, now time.Time) (time.Duration, bool) {
	d := res.Decision
	if d.RetryAfter == ratelimit.Never {
		return 0, false
	}
	if d.InFlight || res.Policy == nil {
		return 0, true
	}
	limits := res.Policy.Limits()
	if d.Limit < 0 || d.Limit >= len(limits) || limits[d.Limit].Rate <= 0 {
		return max(d.RetryAfter, 0), true
	}
	key, spacing := placeOf(res, limits[d.Limit])
	at := now.Add(max(d.RetryAfter, 0))

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next == nil {
		l.next = map[string]time.Time{}
	}
	if next, ok := l.next[key]; ok && next.After(at) {
		at = next
	}
	if len(l.next) >= lineCap {
		for k, t := range l.next {
			if !t.After(now) {
				delete(l.next, k)
			}
		}
	}
	if len(l.next) < lineCap {
		l.next[key] = at.Add(spacing)
	}
	return at.Sub(now), true
}

// placeOf is the key of the line of res's keys under lim, and the
// spacing of its places: lim's emission interval times res's cost.
func placeOf(res ratelimit.Result, lim ratelimit.Limit) (string, time.Duration) {
	return res.Policy.ID() + "\x00" + lim.Name + "\x00" + strings.Join(res.Keys, "\x00"),
		lim.Period / time.Duration(lim.Rate) * time.Duration(max(res.Cost, 1))
}

// admitted takes a place for a call admitted at now under res (not a
// retry, whose place was taken when it was refused), so that the
// retries promised after it come after the calls being served: the line
// advances by one place for each call the limit admits.
func (l *line) admitted(res ratelimit.Result, now time.Time) {
	d := res.Decision
	if res.Policy == nil || d.InFlight {
		return
	}
	limits := res.Policy.Limits()
	if d.Limit < 0 || d.Limit >= len(limits) || limits[d.Limit].Rate <= 0 || limits[d.Limit].Concurrent {
		return
	}
	key, spacing := placeOf(res, limits[d.Limit])
	l.mu.Lock()
	defer l.mu.Unlock()
	next, ok := l.next[key]
	if !ok {
		return // no retry promised: nothing to space
	}
	l.next[key] = later(next, now).Add(spacing)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
