package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/client"
)

// Servers for the unit tests: in-process http.RoundTrippers, on a clock the
// test drives, so that no test waits for a window to pass.

// quotaServer admits quota requests per fixed window of the fake clock
// and answers with the draft-11 fields (t rounded down), Retry-After on a
// 429.
type quotaServer struct {
	clk    *client.FakeClock
	name   string
	quota  int
	window time.Duration
	start  time.Time
	// hold, when set, is called with the request's arrival number (from 1)
	// after it is counted and before it is answered.
	hold func(n int)

	mu       sync.Mutex
	count    map[time.Duration]int
	arrivals int
	denied   int
}

func newQuotaServer(clk *client.FakeClock, name string, quota int, window time.Duration) *quotaServer {
	return &quotaServer{clk: clk, name: name, quota: quota, window: window, start: clk.Now(), count: map[time.Duration]int{}}
}

func (s *quotaServer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	s.mu.Lock()
	s.arrivals++
	n := s.arrivals
	now := s.clk.Now()
	idx := now.Sub(s.start) / s.window
	end := s.start.Add((idx + 1) * s.window)
	h := http.Header{}
	h.Set("RateLimit-Policy", fmt.Sprintf("%q;q=%d;w=%d", s.name, s.quota, int64(s.window/time.Second)))
	status, r := http.StatusOK, 0
	if s.count[idx] < s.quota {
		s.count[idx]++
		r = s.quota - s.count[idx]
	} else {
		status = http.StatusTooManyRequests
		s.denied++
		h.Set("Retry-After", fmt.Sprint(int64((end.Sub(now)+time.Second-1)/time.Second)))
	}
	h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", s.name, r, int64(end.Sub(now)/time.Second)))
	s.mu.Unlock()
	if s.hold != nil {
		s.hold(n)
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("ok")), Request: req}, nil
}

func (s *quotaServer) stats() (arrivals, denied int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.arrivals, s.denied
}

// routes sends each request to the RoundTripper of its host and path
// ("host/path"), or of its host alone.
type routes map[string]http.RoundTripper

func (m routes) RoundTrip(req *http.Request) (*http.Response, error) {
	if rt := m[req.URL.Host+req.URL.Path]; rt != nil {
		return rt.RoundTrip(req)
	}
	if rt := m[req.URL.Host]; rt != nil {
		return rt.RoundTrip(req)
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// scripted answers the n-th request (from 0) with replies[n] (the last
// one once they run out), and records what it received.
type scripted struct {
	replies []reply

	mu       sync.Mutex
	received []received
}

type reply struct {
	status int
	header http.Header
	body   *trackedBody // nil: a fresh one
}

type received struct {
	method, body string
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	s.mu.Lock()
	n := len(s.received)
	s.received = append(s.received, received{req.Method, string(body)})
	rp := s.replies[min(n, len(s.replies)-1)]
	s.mu.Unlock()
	b := rp.body
	if b == nil {
		b = newTrackedBody("answer")
	}
	h := http.Header{}
	for k, v := range rp.header {
		h[k] = append([]string(nil), v...)
	}
	return &http.Response{StatusCode: rp.status, Header: h, Body: b, Request: req}, nil
}

func (s *scripted) calls() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.received...)
}

// trackedBody is a body that reports whether it was read to the end and
// closed.
type trackedBody struct {
	r      *strings.Reader
	closed atomic.Bool
}

func newTrackedBody(s string) *trackedBody { return &trackedBody{r: strings.NewReader(s)} }

func (b *trackedBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *trackedBody) Close() error               { b.closed.Store(true); return nil }
func (b *trackedBody) drained() bool              { return b.r.Len() == 0 }

// closeTracker is a request body that reports whether it was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// limited is this project's Limiter serving a route, in process: every
// limited is an in-process server that limits as this project's Limiter
// limits a route of policy "hello" (a window of quota requests, exact:
// no more than quota in any window; holding off), and writes what it
// writes: RateLimit-Policy and RateLimit (draft-11, t rounded down) on
// every answer, Retry-After (rounded up) on a 429. It reads the time from
// now. (The client module needs only the standard library: the tests
// against the Limiter itself live in client/limitertest.)
type limited struct {
	now      func() time.Time
	quota    int
	window   time.Duration
	mu       sync.Mutex
	times    []time.Time // admissions within the last window, oldest first
	admitted atomic.Int64
	denied   atomic.Int64
}

// newLimited serves quota requests per window ("10/s": quota 10, window
// 1s), reading the time from now (time.Now when nil).
func newLimited(t testing.TB, policy string, now func() time.Time) *limited {
	t.Helper()
	var quota int
	var unit string
	if _, err := fmt.Sscanf(policy, "%d/%s", &quota, &unit); err != nil || unit != "s" || quota < 1 {
		t.Fatalf("newLimited: %q: want N/s", policy)
	}
	if now == nil {
		now = time.Now
	}
	return &limited{now: now, quota: quota, window: time.Second}
}

// RoundTrip answers req in process.
func (l *limited) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	l.mu.Lock()
	now := l.now()
	for len(l.times) > 0 && !l.times[0].After(now.Add(-l.window)) {
		l.times = l.times[1:]
	}
	h := http.Header{}
	h.Set("RateLimit-Policy", fmt.Sprintf(`"hello";q=%d;w=%d`, l.quota, int64(l.window/time.Second)))
	status := http.StatusOK
	if len(l.times) < l.quota {
		l.times = append(l.times, now)
		l.admitted.Add(1)
	} else {
		status = http.StatusTooManyRequests
		l.denied.Add(1)
	}
	r, t := l.quota-len(l.times), time.Duration(0)
	if r == 0 {
		t = l.times[0].Add(l.window).Sub(now) // until the oldest leaves the window
	}
	h.Set("RateLimit", fmt.Sprintf(`"hello";r=%d;t=%d`, r, int64(t/time.Second)))
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", fmt.Sprint(max(int64((t+time.Second-1)/time.Second), 1)))
	}
	l.mu.Unlock()
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("hello\n")), Request: req}, nil
}

// get sends GET url through rt with ctx, returning the status (0 on an
// error) and the error.
func get(ctx context.Context, rt http.RoundTripper, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// clockStart is where fake clocks start: now, so that context deadlines
// measured from the fake clock are real deadlines in the future.
func clockStart() time.Time { return time.Now() }

// awaitTimers fails the test unless n timers are pending within 5 s (real).
func awaitTimers(t *testing.T, clk *client.FakeClock, n int) {
	t.Helper()
	if !clk.AwaitTimers(n, 5*time.Second) {
		t.Fatalf("%d timers pending, want %d: the requests are not waiting for the clock", clk.Timers(), n)
	}
}

// advanceUntil moves the clock from timer to timer until c receives, and
// returns what it received; it fails the test after 10 s (real).
func advanceUntil[T any](t *testing.T, clk *client.FakeClock, c <-chan T) T {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case v := <-c:
			return v
		case <-deadline:
			t.Fatalf("still waiting at %s, %d timers pending", clk.Now(), clk.Timers())
		case <-tick.C:
			clk.AdvanceToNextTimer()
		}
	}
}
