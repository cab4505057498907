// Package clientsim drives simulated HTTP clients through a rate-limited
// handler on a controlled clock, and gives what a check of what they got
// needs: when they were admitted, the most admitted in any window, what an
// exact window would have admitted, and the RateLimit fields' promises
// (the root package's TestCompliantClient holds the Limiter to them: a
// client that honours Retry-After gets close to the stated rate, and no
// window of a limit's Period ever admits more than its Rate).
//
// Time is the caller's: each client moves it with an advance function (the
// memory store's clock, miniredis SetTime, or the Redis store's test clock),
// so a minute of traffic takes milliseconds and never depends on the speed
// of the machine.
package clientsim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Response is one request a client sent and what it got.
type Response struct {
	At         time.Duration // when it was sent, from the start of the run
	Served     time.Duration // when it was answered: later than At when the Limiter held it
	Status     int
	RetryAfter string // the Retry-After header, "" when absent
	RateLimit  string // the RateLimit header, "" when absent
}

// Client is the behaviour of a simulated client.
type Client struct {
	// Latency is the clock time one request takes; the next request is
	// sent after it (plus any wait).
	Latency time.Duration
	// HonourRetryAfter: after a 429, wait exactly the whole seconds of its
	// Retry-After header (as hashicorp/go-retryablehttp does) before the
	// next request. A 429 without Retry-After ends the run with an error.
	HonourRetryAfter bool
	// Every, when positive, paces the client: request k is sent at k·Every
	// whatever the answers (Latency and Retry-After are then ignored).
	Every time.Duration
}

// Clock is a run's simulated time, from its start: the client moves it,
// and so does the Limiter while it holds a request (Sleep).
type Clock struct {
	now     time.Duration
	advance func(time.Duration)
}

// NewClock returns a clock at the start of a run; advance moves the clock
// the store reads.
func NewClock(advance func(time.Duration)) *Clock { return &Clock{advance: advance} }

// Now returns the clock's time from the start of the run.
func (c *Clock) Now() time.Duration { return c.now }

// MoveTo moves the clock to to, unless it is there already.
func (c *Clock) MoveTo(to time.Duration) {
	if to > c.now {
		c.advance(to - c.now)
		c.now = to
	}
}

// Sleep is the Limiter's wait on this clock: it moves the clock by d.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.MoveTo(c.now + d)
	return nil
}

// Run sends requests from c to h until clk has moved d past the start, and
// returns every response. Any status other than 200 and 429 is an error.
func (c Client) Run(h http.Handler, clk *Clock, d time.Duration) ([]Response, error) {
	var out []Response
	for k := 0; ; k++ {
		if c.Every > 0 {
			clk.MoveTo(time.Duration(k) * c.Every)
		}
		sent := clk.now
		if sent >= d {
			return out, nil
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/hello", nil))
		r := Response{At: sent, Served: clk.now, Status: w.Code, RetryAfter: w.Header().Get("Retry-After"), RateLimit: w.Header().Get("RateLimit")}
		out = append(out, r)
		if r.Status != http.StatusOK && r.Status != http.StatusTooManyRequests {
			return out, fmt.Errorf("request %d at %v: status %d", k, sent, r.Status)
		}
		if c.Every > 0 {
			continue
		}
		next := r.Served + c.Latency
		if r.Status == http.StatusTooManyRequests && c.HonourRetryAfter {
			secs, err := ParseRetryAfter(r.RetryAfter)
			if err != nil {
				return out, fmt.Errorf("request %d at %v: 429: %w", k, sent, err)
			}
			next += time.Duration(secs) * time.Second
		}
		if next == r.Served && r.Status == http.StatusTooManyRequests {
			return out, fmt.Errorf("request %d at %v: 429 and a client that would retry at once", k, sent)
		}
		clk.MoveTo(next)
	}
}

// Admitted returns the times the admitted requests were served (after any
// hold), in order.
func Admitted(rs []Response) []time.Duration {
	var at []time.Duration
	for _, r := range rs {
		if r.Status == http.StatusOK {
			at = append(at, r.Served)
		}
	}
	return at
}

// CountBefore returns how many of the sorted times at are before d.
func CountBefore(at []time.Duration, d time.Duration) int {
	return sort.Search(len(at), func(i int) bool { return at[i] >= d })
}

// MaxInWindow returns the most times of at (sorted) inside one half-open
// window [s, s+period), over every s: by brute force, each window starting
// at one of the times (the busiest window always does).
func MaxInWindow(at []time.Duration, period time.Duration) int {
	best := 0
	for i, s := range at {
		n := 0
		for _, x := range at[i:] {
			if x >= s+period {
				break
			}
			n++
		}
		best = max(best, n)
	}
	return best
}

// PerfectLog returns how many of the requests sent at the sorted times
// sends an exact sliding window of rate per period admits: each as soon as
// the last rate admissions all lie at least period before it.
func PerfectLog(sends []time.Duration, rate int, period time.Duration) int {
	var adm []time.Duration
	for _, t := range sends {
		if len(adm) < rate || adm[len(adm)-rate] <= t-period {
			adm = append(adm, t)
		}
	}
	return len(adm)
}

// ParseRetryAfter parses Retry-After as RFC 9110 delay-seconds (1*DIGIT).
func ParseRetryAfter(v string) (int64, error) {
	if v == "" {
		return 0, errors.New("no Retry-After")
	}
	if strings.TrimLeft(v, "0123456789") != "" {
		return 0, fmt.Errorf("Retry-After %q is not delay-seconds", v)
	}
	return strconv.ParseInt(v, 10, 64)
}

// ParseRateLimit parses a RateLimit field of exactly one member, the shape
// the Limiter writes: an sf-string name with the parameters r and t, both
// non-negative sf-integers, in that order, and then, optionally, pk, an
// sf-binary (the identity's partition key).
func ParseRateLimit(v string) (name string, r, t int64, err error) {
	bad := func(why string) (string, int64, int64, error) {
		return "", 0, 0, fmt.Errorf("RateLimit %q: %s", v, why)
	}
	if len(v) < 2 || v[0] != '"' {
		return bad("want a quoted name first")
	}
	end := strings.IndexByte(v[1:], '"')
	if end < 0 {
		return bad("unterminated name")
	}
	name, rest := v[1:1+end], v[2+end:]
	if strings.ContainsAny(name, `\`) {
		return bad("escapes in the name")
	}
	var vals [2]int64
	for i, key := range []string{";r=", ";t="} {
		if !strings.HasPrefix(rest, key) {
			return bad("want parameters r then t")
		}
		rest = rest[len(key):]
		n := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		if n == 0 || n > 15 {
			return bad("parameter " + key[1:2] + " is not an sf-integer ≥ 0")
		}
		vals[i], _ = strconv.ParseInt(rest[:n], 10, 64)
		rest = rest[n:]
	}
	if pk, ok := strings.CutPrefix(rest, ";pk=:"); ok {
		end := strings.IndexByte(pk, ':')
		if end < 0 || strings.Trim(pk[:end], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" {
			return bad("parameter pk is not an sf-binary")
		}
		rest = pk[end+1:]
	}
	if rest != "" {
		return bad("unexpected " + strconv.Quote(rest))
	}
	return name, vals[0], vals[1], nil
}

// CheckRateLimit checks what every response's RateLimit field said
// (draft-11): within its t seconds, counted from the response, no more than
// its r requests after it were admitted; and a 429's Retry-After does not
// point before t's end.
func CheckRateLimit(rs []Response) []error {
	var errs []error
	for i, r := range rs {
		if r.RateLimit == "" {
			continue
		}
		_, rem, secs, err := ParseRateLimit(r.RateLimit)
		if err != nil {
			errs = append(errs, fmt.Errorf("request %d at %v: %w", i, r.At, err))
			continue
		}
		end := r.Served + time.Duration(secs)*time.Second
		n := int64(0)
		for _, later := range rs[i+1:] {
			if later.Served >= end {
				break
			}
			if later.Status == http.StatusOK {
				n++
			}
		}
		if n > rem {
			errs = append(errs, fmt.Errorf("request %d at %v: RateLimit %q, yet %d were admitted within t", i, r.At, r.RateLimit, n))
		}
		if r.Status == http.StatusTooManyRequests {
			if ra, err := ParseRetryAfter(r.RetryAfter); err == nil && ra < secs {
				errs = append(errs, fmt.Errorf("request %d at %v: Retry-After %d points before the end of t=%d", i, r.At, ra, secs))
			}
		}
	}
	return errs
}
