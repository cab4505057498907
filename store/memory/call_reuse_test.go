package memory

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// TestCallIsZeroAfterItsRequest pins what a reused call rests on: after a
// request of any shape (keys up to MaxKeys, limits up to MaxLimits, an ID
// its record answers, a token bucket's marks, a place in line, a lease, a
// debt, a denial) reset leaves the call as new(call) is, so the next
// request on it starts from nothing of this one's. One call serves the
// whole table in turn, as the pool hands one call to request after request.
func TestCallIsZeroAfterItsRequest(t *testing.T) {
	keys := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "ip:10.0.0." + strconv.Itoa(i)
		}
		return out
	}
	many := "1/s, 2/m, 3/h, 4/d, 5/2d, 6/5s, 7/10s, 8/20s"
	cases := []struct {
		policy string
		alg    ratelimit.Algorithm
		keys   int
		id     string
		o      verdict.Call
	}{
		{"10/s", ratelimit.SlidingWindow, 1, "", verdict.Call{Cost: 1}},
		{"10/s, 100/m, 1000/h", ratelimit.FixedWindow, 4, "", verdict.Call{Cost: 2}},
		{"10/s, 100/m", ratelimit.TokenBucket, 2, "", verdict.Call{Cost: 3}},
		{"10/s", ratelimit.TokenBucket, 1, "", verdict.Call{Cost: 5, MaxDelay: int64(time.Second / time.Microsecond)}},
		{"10/s", ratelimit.TokenBucket, 1, "", verdict.Call{Cost: 4, UpTo: true, Hold: int64(time.Second / time.Microsecond)}},
		{"10/s", ratelimit.SlidingLog, 3, "", verdict.Call{Cost: 20, Force: true}},
		{"10/s", ratelimit.SlidingWindowApprox, 1, "", verdict.Call{Cost: 11}}, // denied
		{many, ratelimit.SlidingWindow, ratelimit.MaxKeys, "req-1", verdict.Call{Cost: 1}},
		{many, ratelimit.SlidingWindow, ratelimit.MaxKeys, "req-1", verdict.Call{Cost: 1}}, // answered by its records
		{"5/s", ratelimit.SlidingWindow, 2, "", verdict.Call{Cost: 0}},                     // a peek
	}
	m := New()
	c := new(call)
	for step, tc := range cases {
		p := ratelimit.MustParsePolicy(tc.policy, ratelimit.WithAlgorithm(tc.alg), ratelimit.Named("reuse-"+strconv.Itoa(step)))
		if step == 8 {
			p = ratelimit.MustParsePolicy(cases[7].policy, ratelimit.WithAlgorithm(cases[7].alg), ratelimit.Named("reuse-7"))
		}
		req := ratelimit.Request{Policy: p, Keys: keys(tc.keys), Cost: tc.o.Cost, ID: tc.id}
		if err := verdict.Validate(req, tc.o); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		c.m, c.req, c.lay = m, req, plan.Layout(p) // as newCall sets them
		d := c.decide(tc.o)
		if step == 8 && !d.Repeated {
			t.Errorf("step %d: the request's ID did not answer it (Repeated false): the step pins nothing of ID records", step)
		}
		c.reset()
		if v := reflect.ValueOf(c).Elem(); !v.IsZero() {
			for i := range v.NumField() {
				if !v.Field(i).IsZero() {
					t.Errorf("step %d: after reset the call's %s is not zero", step, v.Type().Field(i).Name)
				}
			}
		}
	}
}
