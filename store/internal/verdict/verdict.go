// Package verdict builds a ratelimit.Decision from the state of every
// limit of every key, as the memory and Redis stores both answer: the
// most restrictive limit heads the decision.
package verdict

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// Status is one limit's state for one key, in microseconds: the cost it
// can still admit (Rem), until its whole quota is back (Reset), until it
// admits more than Rem (Refill), and until the request's cost fits (Retry:
// 0 when it had room, -1 when the cost exceeds its capacity).
type Status struct {
	Rem, Reset, Refill, Retry int64
}

// Skewed moves a status computed at time t = now + skew (the last charge's
// time, when the clock stepped back) to now: waits get longer by the step,
// so a Retry-After is never early.
func Skewed(s Status, skew int64) Status {
	if skew > 0 {
		if s.Retry > 0 {
			s.Retry += skew
		}
		if s.Reset > 0 {
			s.Reset += skew
		}
		if s.Refill > 0 {
			s.Refill += skew
		}
	}
	return s
}

// worse reports whether a is more restrictive than b: a denial beats an
// admission; between denials the later retry (Never latest); between
// admissions the smaller remaining, then the longer reset. Ties keep b, so
// folding in order keeps the first of equals.
func worse(a, b Status) bool {
	aDenied, bDenied := a.Retry != 0, b.Retry != 0
	if aDenied != bDenied {
		return aDenied
	}
	if aDenied {
		if b.Retry < 0 {
			return false
		}
		return a.Retry < 0 || a.Retry > b.Retry
	}
	if a.Rem != b.Rem {
		return a.Rem < b.Rem
	}
	return a.Reset > b.Reset
}

// Fold merges the status of limit i for key ki into d.Limits[i]; first
// says no status of that limit was folded before.
func Fold(d *ratelimit.Decision, i, ki int, s Status, first bool) {
	cur := &d.Limits[i]
	if !first && !worse(s, toStatus(*cur)) {
		return
	}
	*cur = ratelimit.LimitStatus{
		Key:         ki,
		Allowed:     s.Retry == 0,
		Remaining:   s.Rem,
		ResetAfter:  time.Duration(s.Reset) * time.Microsecond,
		RefillAfter: time.Duration(s.Refill) * time.Microsecond,
		RetryAfter:  retryDuration(s.Retry),
	}
}

func retryDuration(us int64) time.Duration {
	if us < 0 {
		return ratelimit.Never
	}
	return time.Duration(us) * time.Microsecond
}

func toStatus(l ratelimit.LimitStatus) Status {
	retry := l.RetryAfter.Microseconds()
	if l.RetryAfter == ratelimit.Never {
		retry = -1
	}
	return Status{Rem: l.Remaining, Reset: l.ResetAfter.Microseconds(), Refill: l.RefillAfter.Microseconds(), Retry: retry}
}

// Finish picks the most restrictive limit of d.Limits as the decision's
// headline and sets Allowed, and InFlight for a denial whose headline is
// a Concurrent limit of p.
func Finish(d *ratelimit.Decision, allowed bool, p *ratelimit.Policy) {
	d.Allowed = allowed
	best := 0
	for i := 1; i < len(d.Limits); i++ {
		if worse(toStatus(d.Limits[i]), toStatus(d.Limits[best])) {
			best = i
		}
	}
	l := d.Limits[best]
	d.Limit, d.Key = best, l.Key
	d.Remaining, d.ResetAfter, d.RefillAfter = l.Remaining, l.ResetAfter, l.RefillAfter
	d.RetryAfter = 0
	if !allowed {
		d.RetryAfter = l.RetryAfter
		d.InFlight = !l.Allowed && plan.Layout(p).Limits[best].Kind == layout.Concurrent
	}
}

// Call is what a request asks of a store besides its keys.
type Call struct {
	Cost     int64 // 0 peeks
	UpTo     bool  // grant the largest cost ≤ Cost that fits (storekit.Granter)
	MaxDelay int64 // µs; > 0 reserves a place in line up to that far (storekit.Reserver)
	// Force charges Cost now whatever room the limits have, and reports
	// nothing: a settle's debt (storekit.Settler). A penalty neither
	// stops it nor starts.
	Force bool
	// Hold, µs, > 0 with UpTo: a lease (storekit.Leaser). What is granted
	// is checked now, against everything recorded (leases still ahead
	// included), and recorded as spent at now + Hold, a place in line
	// that is never waited for.
	Hold int64
}

// Validate reports a request a store must refuse (storekit.Validate), or a
// grant of part of a cost (Call.UpTo) asked for less than 1.
func Validate(req ratelimit.Request, o Call) error {
	if err := storekit.Validate(req); err != nil {
		return err
	}
	if o.UpTo && req.Cost < 1 {
		return fmt.Errorf("ratelimit/store: %w: TakeUpTo with cost %d, want at least 1", ratelimit.ErrInvalidRequest, req.Cost)
	}
	if o.Hold < 0 || o.Hold > layout.MaxSpanUS {
		return fmt.Errorf("ratelimit/store: %w: a lease's hold of %dµs, want 0 to %s", ratelimit.ErrInvalidRequest, o.Hold, ratelimit.MaxSpan)
	}
	if o.Hold > 0 {
		lay := plan.Layout(req.Policy)
		if !lay.Pending {
			return fmt.Errorf("ratelimit/store: %w: policy %q cannot be leased: its counters keep no places in line (a Limiter leases a policy built WithLease under counters of their own: storekit.LeaseCounters)", ratelimit.ErrInvalidRequest, req.Policy.Name())
		}
		for i, l := range lay.Limits {
			if !Leasable(l.Kind) {
				return fmt.Errorf("ratelimit/store: %w: policy %q cannot be leased: limit %d is neither a sliding window, a sliding log nor a token bucket", ratelimit.ErrInvalidRequest, req.Policy.Name(), i+1)
			}
		}
	}
	return nil
}

// Leasable reports whether a limit counted as k can record a lease ahead
// of now (Call.Hold): a log, sub-buckets or a token bucket, which count a
// unit from the time it is recorded at. An aligned window would count it
// in the window of that time, not in that of its spending.
func Leasable(k layout.Kind) bool {
	return k == layout.Log || k == layout.Buckets || k == layout.Token
}

// ReserveUS converts a reservation's maximum delay to µs, bounded by
// ratelimit.MaxSpan.
func ReserveUS(d time.Duration) int64 {
	return min(max(d, 0), ratelimit.MaxSpan).Microseconds()
}

// HoldUS converts a lease's hold to µs (storekit.Leaser): a negative one
// stays negative, for Validate to refuse; one past ratelimit.MaxSpan, one
// µs past it.
func HoldUS(d time.Duration) int64 {
	if d > ratelimit.MaxSpan {
		return layout.MaxSpanUS + 1
	}
	if d < 0 {
		return -1
	}
	return (d + time.Microsecond - 1).Microseconds()
}

// Charge checks r, a receipt of this module's stores, for a refund:
// an error wrapping ratelimit.ErrInvalidRequest when r was not made by
// their rules (per key, the time of the charge, the key's refund count
// then and one mark per limit). The zero Receipt has no error.
func Charge(r ratelimit.Receipt) (ratelimit.Receipt, error) {
	if r.Policy == nil {
		return r, nil
	}
	if err := storekit.Validate(ratelimit.Request{Policy: r.Policy, Keys: r.Keys}); err != nil {
		return ratelimit.Receipt{}, err
	}
	if len(r.Marks) != len(r.Keys)*MarksPerKey(r.Policy) || r.Cost < 0 {
		return ratelimit.Receipt{}, fmt.Errorf("ratelimit/store: %w: receipt with %d marks for %d keys and %d limits", ratelimit.ErrInvalidRequest, len(r.Marks), len(r.Keys), len(plan.Layout(r.Policy).Limits))
	}
	return r, nil
}

// MarksPerKey is how many marks a receipt keeps per key under p: the time
// of the charge, the key's refund count then, and one per limit (a token
// bucket's TAT right after the charge, else 0).
func MarksPerKey(p *ratelimit.Policy) int { return 2 + len(plan.Layout(p).Limits) }

// Settlement splits the settle of the charge r to actual units
// (storekit.Settler) into what a store runs: a refund of part of the
// charge (a receipt of cost − actual), or a debt (a forced take of actual
// − cost on the keys charged, Call.Force); neither when actual is the cost
// or r charged nothing. actual must be 0 to ratelimit.MaxSettle, else the
// error wraps ratelimit.ErrInvalidRequest.
func Settlement(r ratelimit.Receipt, actual int64) (refund ratelimit.Receipt, debt ratelimit.Request, err error) {
	if actual < 0 || actual > ratelimit.MaxSettle {
		return refund, debt, fmt.Errorf("ratelimit/store: %w: settle to %d units, want 0 to %d", ratelimit.ErrInvalidRequest, actual, int64(ratelimit.MaxSettle))
	}
	c, err := Charge(r)
	if err != nil || c.Policy == nil {
		return refund, debt, err
	}
	switch {
	case actual < c.Cost:
		refund = ratelimit.Receipt{Policy: c.Policy, Keys: c.Keys, Cost: c.Cost - actual, Marks: c.Marks}
	case actual > c.Cost:
		debt = ratelimit.Request{Policy: c.Policy, Keys: c.Keys, Cost: actual - c.Cost}
	}
	return refund, debt, nil
}
