package storetest

import (
	"testing"

	"github.com/ratelimitkit/ratelimit"
)

// refillClaims checks what decisions said of RefillAfter: within it, from
// the decision on, a limit admits no more than its Remaining on the key the
// status names, whatever is asked (draft-11's t). Each admission after a
// claim counts, at its time (a reservation's release), until a refund gives
// room back (a new epoch).
type refillClaims struct {
	claims     []refillClaim
	admissions []admission
	epoch      int
}

type refillClaim struct {
	key             string
	limit           int
	at, rem, refill int64 // µs
	admitted, epoch int   // admissions before it; the epoch it was made in
}

type admission struct {
	key      string
	at, cost int64
	epoch    int
}

func (r *refillClaims) admit(key string, at, cost int64) {
	r.admissions = append(r.admissions, admission{key, at, cost, r.epoch})
}

func (r *refillClaims) claim(d ratelimit.Decision, keys []string, at int64) {
	at += d.Delay.Microseconds() // a place in line speaks from its release
	for i, ls := range d.Limits {
		if ls.RefillAfter > 0 {
			r.claims = append(r.claims, refillClaim{key: keys[ls.Key], limit: i, at: at, rem: ls.Remaining,
				refill: ls.RefillAfter.Microseconds(), admitted: len(r.admissions), epoch: r.epoch})
		}
	}
}

// check checks every claim of trace n and returns how many it checked.
func (r *refillClaims) check(t *testing.T, p *ratelimit.Policy, n int) int {
	t.Helper()
	for _, c := range r.claims {
		sum := int64(0)
		for _, a := range r.admissions[c.admitted:] {
			if a.key == c.key && a.epoch == c.epoch && a.at >= c.at && a.at < c.at+c.refill {
				sum += a.cost
			}
		}
		if sum > c.rem {
			t.Fatalf("trace %d (%s): limit %d of %q said %d remaining for %dµs at +%dµs, yet %d were admitted within it: %+v", n, p, c.limit, c.key, c.rem, c.refill, c.at, sum, r.admissions[c.admitted:])
		}
	}
	return len(r.claims)
}
