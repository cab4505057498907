// Package store holds the ratelimit.Store implementations: Redis, shared by
// a fleet of servers, and Memory, for one process and as the executable
// reference of the algorithms (both give the same decisions for the same
// sequence of times, keys and costs).
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// MaxKeys is the largest number of keys one Request may carry
// (ratelimit.MaxKeys). Keys of any length are accepted: the stores hold
// keys longer than 128 bytes as a 128-bit hash.
const MaxKeys = ratelimit.MaxKeys

// ErrInvalidRequest is ratelimit.ErrInvalidRequest, wrapped by the errors
// Take returns for a malformed Request.
var ErrInvalidRequest = ratelimit.ErrInvalidRequest

// validateKeys checks the policy and keys of an operation other than Take.
func validateKeys(p *ratelimit.Policy, keys []string) error {
	return validate(&ratelimit.Request{Policy: p, Keys: keys})
}

// checkReceipt returns what a refund needs from r, or an error when r was
// not made by these stores' rules (nil policy for the zero Receipt).
func checkReceipt(r ratelimit.Receipt) (*ratelimit.Policy, []string, []int64, error) {
	if r.IsZero() {
		return nil, nil, nil, nil
	}
	p, keys, marks := r.Policy(), r.Keys(), r.Marks()
	if err := validateKeys(p, keys); err != nil {
		return nil, nil, nil, err
	}
	if len(marks) != len(keys)*(2+p.NumLimits()) || r.Cost() < 0 {
		return nil, nil, nil, fmt.Errorf("ratelimit/store: %w: receipt with %d marks for %d keys and %d limits", ErrInvalidRequest, len(marks), len(keys), p.NumLimits())
	}
	return p, keys, marks, nil
}

// idHash stands for a request ID in the stores: 96 bits of its SHA-256, in
// hex, so that no ID of any length or content reaches a key as it is.
func idHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:12])
}

func validate(req *ratelimit.Request) error {
	switch {
	case req.Policy == nil || req.Policy.NumLimits() == 0:
		return fmt.Errorf("ratelimit/store: %w: no policy (build one with ratelimit.NewPolicy or ParsePolicy)", ErrInvalidRequest)
	case len(req.Keys) == 0:
		return fmt.Errorf("ratelimit/store: %w: no keys", ErrInvalidRequest)
	case len(req.Keys) > MaxKeys:
		return fmt.Errorf("ratelimit/store: %w: %d keys, at most %d", ErrInvalidRequest, len(req.Keys), MaxKeys)
	case req.Cost < 0:
		return fmt.Errorf("ratelimit/store: %w: negative cost %d", ErrInvalidRequest, req.Cost)
	}
	for i, k := range req.Keys {
		if k == "" {
			return fmt.Errorf("ratelimit/store: %w: key %d is empty", ErrInvalidRequest, i)
		}
		for _, prev := range req.Keys[:i] {
			if prev == k {
				return fmt.Errorf("ratelimit/store: %w: key %d repeats an earlier key", ErrInvalidRequest, i)
			}
		}
	}
	return nil
}

// status is one limit's state for one key, in microseconds. retry is 0
// when the limit had room, -1 when the cost exceeds its capacity.
type status struct {
	rem, reset, retry int64
}

// skewed moves a status computed at time t = now + skew (the last charge's
// time, when the clock stepped back) to now: waits get longer by the step,
// so a Retry-After is never early.
func skewed(s status, skew int64) status {
	if skew > 0 {
		if s.retry > 0 {
			s.retry += skew
		}
		if s.reset > 0 {
			s.reset += skew
		}
	}
	return s
}

// worse reports whether a is more restrictive than b: a denial beats an
// admission; between denials the later retry (Never latest); between
// admissions the smaller remaining, then the longer reset. Ties keep b, so
// folding in order keeps the first of equals.
func worse(a, b status) bool {
	aDenied, bDenied := a.retry != 0, b.retry != 0
	if aDenied != bDenied {
		return aDenied
	}
	if aDenied {
		if b.retry < 0 {
			return false
		}
		return a.retry < 0 || a.retry > b.retry
	}
	if a.rem != b.rem {
		return a.rem < b.rem
	}
	return a.reset > b.reset
}

// fold merges the status of limit i for key ki into d.Limits[i]; first
// says no status of that limit was folded before.
func fold(d *ratelimit.Decision, i, ki int, s status, first bool) {
	cur := &d.Limits[i]
	if !first && !worse(s, toStatus(*cur)) {
		return
	}
	*cur = ratelimit.LimitStatus{
		Key:        ki,
		Allowed:    s.retry == 0,
		Remaining:  s.rem,
		ResetAfter: time.Duration(s.reset) * time.Microsecond,
		RetryAfter: retryDuration(s.retry),
	}
}

func retryDuration(us int64) time.Duration {
	if us < 0 {
		return ratelimit.Never
	}
	return time.Duration(us) * time.Microsecond
}

func toStatus(l ratelimit.LimitStatus) status {
	retry := l.RetryAfter.Microseconds()
	if l.RetryAfter == ratelimit.Never {
		retry = -1
	}
	return status{rem: l.Remaining, reset: l.ResetAfter.Microseconds(), retry: retry}
}

// finish picks the most restrictive limit of d.Limits as the decision's
// headline and sets Allowed.
func finish(d *ratelimit.Decision, allowed bool) {
	d.Allowed = allowed
	best := 0
	for i := 1; i < len(d.Limits); i++ {
		if worse(toStatus(d.Limits[i]), toStatus(d.Limits[best])) {
			best = i
		}
	}
	l := d.Limits[best]
	d.Limit, d.Key = best, l.Key
	d.Remaining, d.ResetAfter = l.Remaining, l.ResetAfter
	d.RetryAfter = 0
	if !allowed {
		d.RetryAfter = l.RetryAfter
	}
}
