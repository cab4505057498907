// Package clientsim drives simulated HTTP clients through a rate-limited
// handler on a controlled clock, and checks what they get against what the
// policy promises: a client that honours Retry-After gets (close to) the
// stated rate, and no window of a limit's Period ever admits more than its
// Rate.
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

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/bridge"
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
// non-negative sf-integers, in that order.
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
	if rest != "" {
		return bad("unexpected " + strconv.Quote(rest))
	}
	return name, vals[0], vals[1], nil
}

// A Scenario is a policy, a client and what the client must get.
type Scenario struct {
	Name    string
	Policy  string // for ratelimit.ParsePolicy, named "api"
	Options []ratelimit.PolicyOption
	Limiter []ratelimit.Option // options of the Limiter besides FailClosed
	Client  Client
	Run     time.Duration // clock time the client runs
	Promise Promise
}

// Promise is what a Scenario's client must get. Zero fields check nothing.
type Promise struct {
	// Within and AtLeast: at least AtLeast admitted among the requests
	// sent before Within.
	Within  time.Duration
	AtLeast int
	// PerfectShare: at least this share of what an exact sliding window
	// of the first limit admits for the same requests before Within
	// (PerfectLog).
	PerfectShare float64
	// RetryAfter and WindowSecs: every 429 says Retry-After: RetryAfter and
	// RateLimit t=WindowSecs for the limit named DeniedBy (r=0).
	RetryAfter, WindowSecs int64
	DeniedBy               string
}

// Scenarios are the promises of "a client that honours Retry-After gets
// the rate it was promised": with the Limiter's defaults (a wait below one
// second is held, not refused) for every algorithm, small bursts and
// periods below a second included; and without holding (WithMaxDelay(0)),
// where whole-second periods keep the promise by Retry-After alone.
func Scenarios() []Scenario {
	honouring := Client{Latency: time.Millisecond, HonourRetryAfter: true}
	instant := Client{HonourRetryAfter: true}
	noHold := []ratelimit.Option{ratelimit.WithMaxDelay(0)}
	algorithm := func(a ratelimit.Algorithm) []ratelimit.PolicyOption {
		return []ratelimit.PolicyOption{ratelimit.WithAlgorithm(a)}
	}
	out := []Scenario{
		{Name: "10/s, honouring, 1ms per request, no holding", Policy: "10/s", Client: honouring, Run: time.Minute, Limiter: noHold,
			Promise: Promise{Within: time.Minute, AtLeast: 570, RetryAfter: 1, WindowSecs: 0, DeniedBy: "api-1s"}},
		{Name: "10/s, honouring, instant requests, no holding", Policy: "10/s", Client: instant, Run: time.Minute, Limiter: noHold,
			Promise: Promise{Within: time.Minute, AtLeast: 570, RetryAfter: 1, WindowSecs: 1, DeniedBy: "api-1s"}},
		// Long enough for the minute limit to deny and free up again.
		{Name: "10/s, 120/m, 240/h, honouring, 1ms per request", Policy: "10/s, 120/m, 240/h", Client: honouring, Run: 2 * time.Minute,
			Promise: Promise{Within: 12 * time.Second, AtLeast: 114}},
		// An hour, so that where the last burst falls moves the share by
		// under 2%: 95% is 6840 of 7200. (Told 66 instead of 60, as
		// sub-buckets counted Period plus one sub-bucket, a client got
		// 91.7%.) The first sub-bucket leaves 59.9s after the denial: t=59.
		{Name: "120/m, honouring, 1ms per request", Policy: "120/m", Client: honouring, Run: time.Hour,
			Promise: Promise{Within: time.Hour, AtLeast: 6840, RetryAfter: 60, WindowSecs: 59, DeniedBy: "api-1m"}},
		// Requests every 95ms: 106 in 10 s, of which a window of 10/s can
		// admit at most 100, and an exact sliding window (the default
		// counts 10/s exactly) admits 97: one in about ten comes 50ms
		// early.
		{Name: "10/s, paced every 95ms, no holding", Policy: "10/s", Client: Client{Every: 95 * time.Millisecond}, Run: 10 * time.Second, Limiter: noHold,
			Promise: Promise{Within: 10 * time.Second, AtLeast: 95, PerfectShare: 1}},
	}
	// With the defaults, for every algorithm: 95% of the rate over a
	// minute, however small the burst or short the period (the
	// approximation from ratelimit.MinApproxRate up).
	for _, sc := range []struct {
		policy string
		opts   []ratelimit.PolicyOption
		rate   int // per second
	}{
		{"10/s", algorithm(ratelimit.SlidingWindow), 10},
		{"10/s", algorithm(ratelimit.SlidingLog), 10},
		{"10/s", algorithm(ratelimit.FixedWindow), 10},
		{"10/s", algorithm(ratelimit.TokenBucket), 10},
		{"20/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(5)}, 20},
		{"20/s", []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.TokenBucket), ratelimit.WithBurst(1)}, 20},
		{"10/500ms", algorithm(ratelimit.SlidingWindow), 20},
		{"30/s", algorithm(ratelimit.SlidingWindowApprox), 30},
		{"100/s", algorithm(ratelimit.SlidingWindow), 100},
		{"30/500ms", algorithm(ratelimit.SlidingWindowApprox), 60},
		{"10/500ms", algorithm(ratelimit.FixedWindow), 20},
	} {
		p, err := ratelimit.ParsePolicy(sc.policy, sc.opts...)
		if err != nil {
			panic(err)
		}
		name := fmt.Sprintf("%s %s, honouring, 1ms per request", sc.policy, p.Algorithm())
		if l := p.Limit(0); p.Algorithm() == ratelimit.TokenBucket && l.Burst != 0 && l.Burst != l.Rate {
			name = fmt.Sprintf("%s %s burst %d, honouring, 1ms per request", sc.policy, p.Algorithm(), l.Burst)
		}
		out = append(out, Scenario{Name: name, Policy: sc.policy, Options: sc.opts, Client: honouring, Run: time.Minute,
			Promise: Promise{Within: time.Minute, AtLeast: sc.rate * 60 * 95 / 100}})
	}
	return out
}

// checkRateLimit checks what every response's RateLimit field said
// (draft-11): within its t seconds, counted from the response, no more than
// its r requests after it were admitted; and a 429's Retry-After does not
// point before t's end.
func checkRateLimit(rs []Response) []error {
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

// Outcome is a run's figures, for logs.
type Outcome struct {
	Sent, Admitted, Perfect int
	RetryAfters             map[string]int // Retry-After values seen on 429s, and how often
}

// String summarises the outcome.
func (o Outcome) String() string {
	var ras []string
	for v, n := range o.RetryAfters {
		ras = append(ras, fmt.Sprintf("%s s ×%d", v, n))
	}
	sort.Strings(ras)
	return fmt.Sprintf("%d sent, %d admitted (an exact window would admit %d); Retry-After: %s",
		o.Sent, o.Admitted, o.Perfect, strings.Join(ras, ", "))
}

// Check runs s's client against a Limiter on st (default identifier, the
// client's IP; FailClosed with a long timeout, so that a store failure is
// an error rather than an admission) and checks every promise, and that no
// window of any limit's Period admitted more than its Rate. advance moves
// st's clock.
func (s Scenario) Check(st ratelimit.Store, advance func(time.Duration)) (Outcome, error) {
	p, err := ratelimit.ParsePolicy(s.Policy, append([]ratelimit.PolicyOption{ratelimit.Named("api")}, s.Options...)...)
	if err != nil {
		return Outcome{}, err
	}
	lim, err := ratelimit.New(st, p, append([]ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithTimeout(10 * time.Second)}, s.Limiter...)...)
	if err != nil {
		return Outcome{}, err
	}
	clk := NewClock(advance)
	start := time.Unix(0, 0)
	bridge.SetClock(lim, func() time.Time { return start.Add(clk.now) }, clk.Sleep)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	rs, err := s.Client.Run(lim.Handler(ok), clk, s.Run)
	if err != nil {
		return Outcome{}, err
	}
	adm := Admitted(rs)
	var sends []time.Duration
	for _, r := range rs {
		if r.At < s.Promise.Within {
			sends = append(sends, r.At)
		}
	}
	first := p.Limit(0)
	o := Outcome{Sent: len(sends), Admitted: CountBefore(adm, s.Promise.Within),
		Perfect: PerfectLog(sends, int(first.Rate), first.Period), RetryAfters: map[string]int{}}
	var errs []error
	for _, l := range p.Limits() {
		// What each algorithm promises of any window of one Period (see
		// ratelimit.Algorithm); the fixed window's aligned windows are not
		// the client's to see.
		most, what := l.Rate, "the rate"
		switch p.Algorithm() {
		case ratelimit.TokenBucket:
			most, what = max(l.Burst, 1)+l.Rate, "burst + rate"
			if l.Burst == 0 {
				most = 2 * l.Rate
			}
		case ratelimit.SlidingWindowApprox, ratelimit.FixedWindow:
			most, what = 2*l.Rate, "twice the rate"
		}
		if n := MaxInWindow(adm, l.Period); int64(n) > most {
			errs = append(errs, fmt.Errorf("a window of %v admitted %d, above %s (%d)", l.Period, n, what, most))
		}
	}
	if o.Admitted < s.Promise.AtLeast {
		errs = append(errs, fmt.Errorf("%d admitted in the first %v, want at least %d", o.Admitted, s.Promise.Within, s.Promise.AtLeast))
	}
	if share := s.Promise.PerfectShare; share > 0 && float64(o.Admitted) < share*float64(o.Perfect) {
		errs = append(errs, fmt.Errorf("%d admitted, want at least %.0f%% of the %d an exact window admits", o.Admitted, 100*share, o.Perfect))
	}
	errs = append(errs, checkRateLimit(rs)...)
	waited := false
	for i, r := range rs {
		if waited && r.Status != http.StatusOK && s.Client.Every == 0 {
			errs = append(errs, fmt.Errorf("request %d at %v waited the Retry-After it was given and was denied", i, r.At))
		}
		waited = false
		if r.Status != http.StatusTooManyRequests {
			continue
		}
		o.RetryAfters[r.RetryAfter]++
		waited = s.Client.HonourRetryAfter
		if s.Promise.DeniedBy == "" || r.At >= s.Promise.Within {
			continue
		}
		name, rem, reset, err := ParseRateLimit(r.RateLimit)
		if err != nil {
			errs = append(errs, fmt.Errorf("request %d at %v: %w", i, r.At, err))
			continue
		}
		if r.RetryAfter != strconv.FormatInt(s.Promise.RetryAfter, 10) || name != s.Promise.DeniedBy || rem != 0 || reset != s.Promise.WindowSecs {
			errs = append(errs, fmt.Errorf("request %d at %v: Retry-After %q, RateLimit %q; want Retry-After %d, RateLimit \"%s\";r=0;t=%d",
				i, r.At, r.RetryAfter, r.RateLimit, s.Promise.RetryAfter, s.Promise.DeniedBy, s.Promise.WindowSecs))
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more", len(errs)-10))
	}
	return o, errors.Join(errs...)
}
