package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store"
)

// epoch is the simulated time 0: midnight UTC of a day, so it starts an
// aligned window of every period up to a day (the fixed window and the
// weighted window count aligned windows).
var epoch = time.Unix(19675*86400, 0).UTC()

// clock is the simulated clock the memory store reads. Nothing sleeps:
// the traffic sets it to each request's instant.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// traffic is what one client (one IP) sends. From BurstFrom to PoliteFrom
// it bursts: one request every BurstEvery, whatever it is answered. From
// PoliteFrom to End it honours Retry-After: one request every PoliteEvery
// while admitted; after a 429 it waits exactly the Retry-After it was sent
// (whole seconds) before its next request.
type traffic struct {
	BurstFrom, BurstEvery   time.Duration
	PoliteFrom, PoliteEvery time.Duration
	End                     time.Duration
}

// standardTraffic scales one script to a limit of rate per period, in
// units of the period P and of the emission interval T = P/rate: a burst at
// ten times the rate from 0.8·P to 1.3·P, across the window edge at P, then
// requests at five times the rate that honour Retry-After, until end.
func standardTraffic(rate int64, period, end time.Duration) traffic {
	t := period / time.Duration(rate)
	return traffic{
		BurstFrom:   period * 8 / 10,
		BurstEvery:  t / 10,
		PoliteFrom:  period * 13 / 10,
		PoliteEvery: t / 5,
		End:         end,
	}
}

// Phases of the client, as recorded in each event.
const (
	phaseBurst  = "burst"
	phasePolite = "polite"
)

// event is one request and what the client was answered.
type event struct {
	At     time.Duration // since epoch
	Phase  string        // phaseBurst or phasePolite
	Status int           // HTTP status the client saw
	// RetryAfter is the Retry-After header of a 429, in seconds (0 when
	// allowed).
	RetryAfter int64
	// Exact is the Decision's RetryAfter, before the header rounds it up.
	Exact time.Duration
}

// Admitted reports whether the request was served.
func (e event) Admitted() bool { return e.Status == http.StatusOK }

// run is one scenario's traffic through one Limiter.
type run struct {
	Policy  *ratelimit.Policy
	Traffic traffic
	Events  []event
}

// clientAddr is the client's address; the Limiter's default identifier
// (ByIP) keys it as ip:192.0.2.7.
const clientAddr = "192.0.2.7:40000"

// simulate drives the traffic through a Limiter's Handler over a memory
// store on a simulated clock, as a client would see it: status codes and
// the Retry-After header. The Decision behind each answer (for the exact,
// unrounded RetryAfter) is read with a decision hook.
func simulate(p *ratelimit.Policy, tr traffic) (*run, error) {
	if tr.BurstEvery <= 0 || tr.PoliteEvery <= 0 || tr.BurstFrom > tr.PoliteFrom || tr.PoliteFrom > tr.End {
		return nil, fmt.Errorf("simulate %s: bad traffic %+v", p.Name(), tr)
	}
	clk := &clock{now: epoch}
	var last ratelimit.Decision
	// Holding off (WithMaxDelay(0)): every denial is a 429, so the figure
	// shows the algorithm's own answers; held requests would wait on the
	// real clock, which the simulation does not move.
	lim, err := ratelimit.New(store.NewMemory(store.WithClock(clk.Now)), p, ratelimit.WithMaxDelay(0),
		ratelimit.WithDecisionHook(func(_ *http.Request, res ratelimit.Result) { last = res.Decision }))
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", p.Name(), err)
	}
	h := lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	r := &run{Policy: p, Traffic: tr}
	send := func(at time.Duration, phase string) (event, error) {
		clk.set(epoch.Add(at))
		req := httptest.NewRequest(http.MethodGet, "/api", nil)
		req.RemoteAddr = clientAddr
		rec := httptest.NewRecorder()
		last = ratelimit.Decision{}
		h.ServeHTTP(rec, req)
		ev := event{At: at, Phase: phase, Status: rec.Code}
		switch rec.Code {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			secs, err := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
			if err != nil || secs < 1 {
				return ev, fmt.Errorf("simulate %s: 429 at %s with Retry-After %q", p.Name(), at, rec.Header().Get("Retry-After"))
			}
			ev.RetryAfter, ev.Exact = secs, last.RetryAfter
		default:
			return ev, fmt.Errorf("simulate %s: status %d at %s", p.Name(), rec.Code, at)
		}
		r.Events = append(r.Events, ev)
		return ev, nil
	}
	for at := tr.BurstFrom; at < tr.PoliteFrom; at += tr.BurstEvery {
		if _, err := send(at, phaseBurst); err != nil {
			return nil, err
		}
	}
	for at := tr.PoliteFrom; at < tr.End; {
		ev, err := send(at, phasePolite)
		if err != nil {
			return nil, err
		}
		if ev.Admitted() {
			at += tr.PoliteEvery
		} else {
			at += time.Duration(ev.RetryAfter) * time.Second
		}
	}
	return r, nil
}

// admittedTimes returns the instants of the admitted requests, in order.
func (r *run) admittedTimes() []time.Duration {
	var ts []time.Duration
	for _, e := range r.Events {
		if e.Admitted() {
			ts = append(ts, e.At)
		}
	}
	return ts
}

// step is one point of a step function: Count holds from At until the
// next step.
type step struct {
	At    time.Duration
	Count int
}

// trailing returns, as a step function over [0, end], the number of
// admissions in the trailing window (t−period, t]: the window of length
// period that ends with t. Admissions exactly one period apart are never
// counted together, as in the algorithms' guarantees.
func trailing(admitted []time.Duration, period, end time.Duration) []step {
	steps := []step{{0, 0}}
	in, out, n := 0, 0, 0 // next admission to enter, next to leave
	for {
		next := end + 1
		if in < len(admitted) {
			next = admitted[in]
		}
		if out < in && admitted[out]+period <= next {
			next = admitted[out] + period
		}
		if next > end {
			break
		}
		for out < in && admitted[out]+period == next {
			out++
			n--
		}
		for in < len(admitted) && admitted[in] == next {
			in++
			n++
		}
		if last := &steps[len(steps)-1]; last.At == next {
			last.Count = n
		} else {
			steps = append(steps, step{next, n})
		}
	}
	return steps
}

// maxCount is the largest Count of steps.
func maxCount(steps []step) int {
	m := 0
	for _, s := range steps {
		m = max(m, s.Count)
	}
	return m
}

// bins counts the events per bin of width w over [0, end): admitted by
// phase and denied.
type bins struct {
	Width                 time.Duration
	Burst, Polite, Denied []int // per bin
}

func binEvents(events []event, w, end time.Duration) bins {
	n := int((end + w - 1) / w)
	b := bins{Width: w, Burst: make([]int, n), Polite: make([]int, n), Denied: make([]int, n)}
	for _, e := range events {
		i := int(e.At / w)
		if i < 0 || i >= n {
			continue
		}
		switch {
		case !e.Admitted():
			b.Denied[i]++
		case e.Phase == phaseBurst:
			b.Burst[i]++
		default:
			b.Polite[i]++
		}
	}
	return b
}
