package ratelimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/testkit/clientsim"
	"github.com/ratelimitkit/ratelimit/internal/testkit/redistest"
	"github.com/ratelimitkit/ratelimit/internal/testkit/testmode"
	"github.com/ratelimitkit/ratelimit/store"
	rlredis "github.com/ratelimitkit/ratelimit/store/redis"
)

// TestCompliantClient: a client that bursts and, after every 429, waits
// exactly the whole seconds of Retry-After gets the rate its policy states
// (10/s: at least 95%, told "Retry-After: 1" and t=1; the example's
// "10/s, 120/m, 240/h": 114 or more of the first 12 s's 120; 120/m: at
// least 95%, told 60), a client pacing itself at 95ms on 10/s gets at least
// 95 of the 100 an exact window admits in 10 s, and no window of any
// limit's Period admits more than its Rate. Through Limiter.Handler, on the
// memory store and on miniredis (the Redis store's scripts), both on a
// controlled clock; TestRealCompliantClient runs the same on a real
// Redis. Without RATELIMIT_FULL=1, miniredis runs every other scenario (the
// first, the third, ...) and the real Redis the others: the memory store
// runs them all, and the conformance suite holds the scripts to its
// decisions.
func TestCompliantClient(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) (ratelimit.Store, func(time.Duration))
	}{
		{"memory", func(t *testing.T) (ratelimit.Store, func(time.Duration)) {
			clk := newTestClock()
			return store.NewMemory(store.WithClock(clk.Now)), clk.Advance
		}},
		{"miniredis", func(t *testing.T) (ratelimit.Store, func(time.Duration)) {
			m := miniredis.RunT(t)
			now := clockStart
			m.SetTime(now)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { client.Close() })
			st, err := store.NewRedis(client)
			if err != nil {
				t.Fatal(err)
			}
			return st, func(d time.Duration) {
				now = now.Add(d)
				m.SetTime(now)   // the scripts' TIME
				m.FastForward(d) // and the keys' expiry
			}
		}},
	}
	for _, s := range stores {
		for i, sc := range scenarios() {
			t.Run(s.name+"/"+sc.Name, func(t *testing.T) {
				if s.name == "miniredis" && i%2 == 1 {
					testmode.SkipUnlessFull(t)
				}
				st, advance := s.open(t)
				out, err := sc.Check(st, advance)
				t.Logf("%s %q: %v", sc.Name, sc.Policy, out)
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestRealCompliantClient runs TestCompliantClient's scenarios through
// Limiter.Handler on a real Redis, the scripts reading the test's clock
// instead of TIME. Without RATELIMIT_FULL=1 it runs every other scenario
// (the second, the fourth, ...): those TestCompliantClient leaves out on
// miniredis.
func TestRealCompliantClient(t *testing.T) {
	srv := redistest.StartServer(t)
	client := srv.Client(t)
	for i, sc := range scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			if i%2 == 0 {
				testmode.SkipUnlessFull(t)
			}
			clk := newTestClock()
			st, err := rlredis.New(client, rlredis.WithClock(clk.Now), rlredis.WithPrefix("compliant"+string(rune('a'+i))+":"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := sc.Check(st, clk.Advance)
			t.Logf("%s %q: %v", sc.Name, sc.Policy, out)
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A scenario is a policy, a client and what the client must get.
type scenario struct {
	Name    string
	Policy  string // for ratelimit.ParsePolicy, named "api"
	Options []ratelimit.PolicyOption
	Limiter []ratelimit.Option // options of the Limiter besides FailClosed
	Client  clientsim.Client
	Run     time.Duration // clock time the client runs
	promise promise
}

// promise is what a scenario's client must get. Zero fields check nothing.
type promise struct {
	// Within and AtLeast: at least AtLeast admitted among the requests
	// sent before Within.
	Within  time.Duration
	AtLeast int
	// PerfectShare: at least this share of what an exact sliding window
	// of the first limit admits for the same requests before Within
	// (clientsim.PerfectLog).
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
func scenarios() []scenario {
	honouring := clientsim.Client{Latency: time.Millisecond, HonourRetryAfter: true}
	instant := clientsim.Client{HonourRetryAfter: true}
	noHold := []ratelimit.Option{ratelimit.WithMaxDelay(0)}
	algorithm := func(a ratelimit.Algorithm) []ratelimit.PolicyOption {
		return []ratelimit.PolicyOption{ratelimit.WithAlgorithm(a)}
	}
	out := []scenario{
		{Name: "10/s, honouring, 1ms per request, no holding", Policy: "10/s", Client: honouring, Run: time.Minute, Limiter: noHold,
			promise: promise{Within: time.Minute, AtLeast: 570, RetryAfter: 1, WindowSecs: 0, DeniedBy: "api-1s"}},
		{Name: "10/s, honouring, instant requests, no holding", Policy: "10/s", Client: instant, Run: time.Minute, Limiter: noHold,
			promise: promise{Within: time.Minute, AtLeast: 570, RetryAfter: 1, WindowSecs: 1, DeniedBy: "api-1s"}},
		// Long enough for the minute limit to deny and free up again.
		{Name: "10/s, 120/m, 240/h, honouring, 1ms per request", Policy: "10/s, 120/m, 240/h", Client: honouring, Run: 2 * time.Minute,
			promise: promise{Within: 12 * time.Second, AtLeast: 114}},
		// An hour, so that where the last burst falls moves the share by
		// under 2%: 95% is 6840 of 7200. (Told 66 instead of 60, as
		// sub-buckets counted Period plus one sub-bucket, a client got
		// 91.7%.) The first sub-bucket leaves 59.9s after the denial: t=59.
		{Name: "120/m, honouring, 1ms per request", Policy: "120/m", Client: honouring, Run: time.Hour,
			promise: promise{Within: time.Hour, AtLeast: 6840, RetryAfter: 60, WindowSecs: 59, DeniedBy: "api-1m"}},
		// Requests every 95ms: 106 in 10 s, of which a window of 10/s can
		// admit at most 100, and an exact sliding window (the default
		// counts 10/s exactly) admits 97: one in about ten comes 50ms
		// early.
		{Name: "10/s, paced every 95ms, no holding", Policy: "10/s", Client: clientsim.Client{Every: 95 * time.Millisecond}, Run: 10 * time.Second, Limiter: noHold,
			promise: promise{Within: 10 * time.Second, AtLeast: 95, PerfectShare: 1}},
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
		if l := p.Limits()[0]; p.Algorithm() == ratelimit.TokenBucket && l.Burst != 0 && l.Burst != l.Rate {
			name = fmt.Sprintf("%s %s burst %d, honouring, 1ms per request", sc.policy, p.Algorithm(), l.Burst)
		}
		out = append(out, scenario{Name: name, Policy: sc.policy, Options: sc.opts, Client: honouring, Run: time.Minute,
			promise: promise{Within: time.Minute, AtLeast: sc.rate * 60 * 95 / 100}})
	}
	return out
}

// simOutcome is a run's figures, for logs.
type simOutcome struct {
	Sent, Admitted, Perfect int
	RetryAfters             map[string]int // Retry-After values seen on 429s, and how often
}

// String summarises the outcome.
func (o simOutcome) String() string {
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
func (s scenario) Check(st ratelimit.Store, advance func(time.Duration)) (simOutcome, error) {
	p, err := ratelimit.ParsePolicy(s.Policy, append([]ratelimit.PolicyOption{ratelimit.Named("api")}, s.Options...)...)
	if err != nil {
		return simOutcome{}, err
	}
	lim, err := ratelimit.New(st, p, append([]ratelimit.Option{ratelimit.WithFailureMode(ratelimit.FailClosed), ratelimit.WithTimeout(10 * time.Second)}, s.Limiter...)...)
	if err != nil {
		return simOutcome{}, err
	}
	clk := clientsim.NewClock(advance)
	start := time.Unix(0, 0)
	ratelimit.SetLogClock(lim, func() time.Time { return start.Add(clk.Now()) })
	ratelimit.SetSleep(lim, clk.Sleep)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	rs, err := s.Client.Run(lim.Handler(ok), clk, s.Run)
	if err != nil {
		return simOutcome{}, err
	}
	adm := clientsim.Admitted(rs)
	var sends []time.Duration
	for _, r := range rs {
		if r.At < s.promise.Within {
			sends = append(sends, r.At)
		}
	}
	first := p.Limits()[0]
	o := simOutcome{Sent: len(sends), Admitted: clientsim.CountBefore(adm, s.promise.Within),
		Perfect: clientsim.PerfectLog(sends, int(first.Rate), first.Period), RetryAfters: map[string]int{}}
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
		if n := clientsim.MaxInWindow(adm, l.Period); int64(n) > most {
			errs = append(errs, fmt.Errorf("a window of %v admitted %d, above %s (%d)", l.Period, n, what, most))
		}
	}
	if o.Admitted < s.promise.AtLeast {
		errs = append(errs, fmt.Errorf("%d admitted in the first %v, want at least %d", o.Admitted, s.promise.Within, s.promise.AtLeast))
	}
	if share := s.promise.PerfectShare; share > 0 && float64(o.Admitted) < share*float64(o.Perfect) {
		errs = append(errs, fmt.Errorf("%d admitted, want at least %.0f%% of the %d an exact window admits", o.Admitted, 100*share, o.Perfect))
	}
	errs = append(errs, clientsim.CheckRateLimit(rs)...)
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
		if s.promise.DeniedBy == "" || r.At >= s.promise.Within {
			continue
		}
		name, rem, reset, err := clientsim.ParseRateLimit(r.RateLimit)
		if err != nil {
			errs = append(errs, fmt.Errorf("request %d at %v: %w", i, r.At, err))
			continue
		}
		if r.RetryAfter != strconv.FormatInt(s.promise.RetryAfter, 10) || name != s.promise.DeniedBy || rem != 0 || reset != s.promise.WindowSecs {
			errs = append(errs, fmt.Errorf("request %d at %v: Retry-After %q, RateLimit %q; want Retry-After %d, RateLimit \"%s\";r=0;t=%d",
				i, r.At, r.RetryAfter, r.RateLimit, s.promise.RetryAfter, s.promise.DeniedBy, s.promise.WindowSecs))
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more", len(errs)-10))
	}
	return o, errors.Join(errs...)
}
