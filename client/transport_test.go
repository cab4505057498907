package client_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/client"
)

// TestPacingWaitsForTheQuotaInsteadOfBeingRefused: against this project's
// Limiter (3/s, holding off), three requests go at once, the fourth waits
// until the window lets it in, and the server refuses none.
func TestPacingWaitsForTheQuotaInsteadOfBeingRefused(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := newLimited(t, "3/s", clk.Now)
	rt := client.NewTransport(srv, client.WithClock(clk))
	ctx := context.Background()
	for i := range 3 {
		if code, err := get(ctx, rt, "http://api.test/hello"); code != http.StatusOK {
			t.Fatalf("step %d: status %d, %v", i, code, err)
		}
	}
	done := make(chan int)
	go func() {
		code, _ := get(ctx, rt, "http://api.test/hello")
		done <- code
	}()
	awaitTimers(t, clk, 1)
	if n := srv.admitted.Load() + srv.denied.Load(); n != 3 {
		t.Fatalf("server saw %d requests while the fourth waits, want 3", n)
	}
	clk.Advance(time.Second)
	if code := <-done; code != http.StatusOK {
		t.Errorf("fourth request: status %d after its wait", code)
	}
	if d := srv.denied.Load(); d != 0 {
		t.Errorf("server refused %d requests, want 0", d)
	}
}

// TestPacingWaitDecisions pins how long a request waits after one answer,
// for each form of the fields: read from the *WaitError a zero maximum
// wait returns instead of waiting (0: the request goes).
func TestPacingWaitDecisions(t *testing.T) {
	start := clockStart().Truncate(time.Second)
	date := start.UTC().Format(http.TimeFormat)
	sec := time.Second
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	tests := []struct {
		name   string
		status int
		header http.Header
		wait   time.Duration
		policy string
	}{
		{"no fields: goes", 200, h(), 0, ""},
		{"draft-11, quota left: goes", 200, h("RateLimit", `"p";r=1;t=0`), 0, ""},
		{"draft-11, spent, t=0: a second (t is rounded down)", 200, h("RateLimit", `"p";r=0;t=0`), sec, "p"},
		{"draft-11, spent, t=5: 6 s", 200, h("RateLimit", `"p";r=0;t=5`), 6 * sec, "p"},
		{"draft-10 t: the client's own requests fill the window: t, not t+1", 200,
			h("RateLimit-Policy", `"p";q=1;w=1`, "RateLimit", `"p";r=0;t=1`), sec, "p"},
		{"a wait longer than the window explains (a penalty): t+1", 200,
			h("RateLimit-Policy", `"p";q=1;w=1`, "RateLimit", `"p";r=0;t=30`), 31 * sec, "p"},
		{"concurrent limit: the answered request's slot is free again: goes", 200,
			h("RateLimit-Policy", `"c";q=1;qu="concurrent-requests"`, "RateLimit", `"c";r=0`), 0, ""},
		{"draft-06: the reset", 200, h("RateLimit-Limit", "5", "RateLimit-Remaining", "0", "RateLimit-Reset", "7"), 7 * sec, ""},
		{"X-RateLimit: the reset in seconds", 200, h("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "7"), 7 * sec, ""},
		{"X-RateLimit: the reset as a Unix time", 200,
			h("Date", date, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strconv.FormatInt(start.Add(30*sec).Unix(), 10)), 30 * sec, ""},
		{"X-RateLimit: spent without a reset: DefaultPause", 200, h("X-RateLimit-Remaining", "0"), client.DefaultPause, ""},
		{"malformed RateLimit is ignored: goes", 200, h("RateLimit", `"p";r=0;t=5,`), 0, ""},
		{"429 with Retry-After in seconds", 429, h("Retry-After", "3"), 3 * sec, ""},
		{"429 with Retry-After as an HTTP-date", 429,
			h("Date", date, "Retry-After", start.Add(4*sec).UTC().Format(http.TimeFormat)), 4 * sec, ""},
		{"429 without any field: DefaultPause", 429, h(), client.DefaultPause, ""},
		{"429: Retry-After beyond t wins", 429, h("RateLimit", `"p";r=0;t=0`, "Retry-After", "4"), 4 * sec, "p"},
		{"429 naming a quota with some left: spent all the same", 429, h("RateLimit", `"p";r=3;t=1`), 2 * sec, "p"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := client.NewFakeClock(start)
			srv := &scripted{replies: []reply{{status: tc.status, header: tc.header}, {status: 200}}}
			rt := client.NewTransport(srv, client.WithClock(clk), client.WithMaxWait(0), client.WithMaxRetries(0))
			ctx := context.Background()
			if _, err := get(ctx, rt, "http://api.test/x"); err != nil {
				t.Fatal(err)
			}
			_, err := get(ctx, rt, "http://api.test/x")
			var we *client.WaitError
			switch {
			case tc.wait == 0 && err != nil:
				t.Fatalf("second request: %v, want it sent", err)
			case tc.wait == 0:
			case !errors.As(err, &we) || !errors.Is(err, client.ErrWaitTooLong):
				t.Fatalf("second request: %v, want a *WaitError wrapping ErrWaitTooLong", err)
			case we.Wait != tc.wait || we.Policy != tc.policy || we.Host != "http://api.test":
				t.Errorf("WaitError %+v, want a wait of %s for policy %q", we, tc.wait, tc.policy)
			}
		})
	}
}

// TestPacingCountsRequestsInFlight: told r=3, the transport lets three
// requests go and holds the fourth while they are unanswered, and still
// after they are answered (the quota is spent), until the window ends.
func TestPacingCountsRequestsInFlight(t *testing.T) {
	start := clockStart()
	clk := client.NewFakeClock(start)
	srv := newQuotaServer(clk, "p", 4, time.Second)
	arrived := make(chan int, 10)
	release := make(chan struct{})
	srv.hold = func(n int) {
		if n > 1 {
			arrived <- n
			<-release
		}
	}
	rt := client.NewTransport(srv, client.WithClock(clk))
	ctx := context.Background()
	if code, err := get(ctx, rt, "http://api.test/x"); code != 200 {
		t.Fatalf("first request: %d, %v", code, err)
	}
	var wg sync.WaitGroup
	codes := make(chan int, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := get(ctx, rt, "http://api.test/x")
			codes <- code
		}()
	}
	for range 3 {
		<-arrived
	}
	awaitTimers(t, clk, 1) // the fourth waits for the clock
	if b, _ := client.BudgetOf(rt, "http://api.test", "p"); b.InFlight != 3 || b.Rem > 0 {
		t.Errorf("budget %+v, want 3 in flight and nothing left", b)
	}
	close(release)
	for range 3 {
		if code := <-codes; code != 200 {
			t.Errorf("status %d, want 200", code)
		}
	}
	if n, _ := srv.stats(); n != 4 {
		t.Fatalf("server saw %d requests, want 4: the fifth must wait for the next window", n)
	}
	// It goes when the window ends, or at the latest t+1 s after the
	// answers, depending on the order they came in.
	if code := advanceUntil(t, clk, codes); code != 200 {
		t.Errorf("last request: status %d, want 200", code)
	}
	if now := clk.Now(); now.After(start.Add(2 * time.Second)) {
		t.Errorf("last request sent %s after the first, want at most 2s", now.Sub(start))
	}
	wg.Wait()
	if _, denied := srv.stats(); denied != 0 {
		t.Errorf("server refused %d requests, want 0", denied)
	}
}

// TestPacingSendsOneProbeWhenTheQuotaIsBack: when the time the server said
// comes, one request goes alone to learn the new budget; the others wait
// for its answer, then go as far as it allows.
func TestPacingSendsOneProbeWhenTheQuotaIsBack(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := newQuotaServer(clk, "p", 2, time.Second)
	probeIn := make(chan struct{})
	releaseProbe := make(chan struct{})
	srv.hold = func(n int) {
		if n == 3 {
			close(probeIn)
			<-releaseProbe
		}
	}
	// A maximum wait makes the requests that wait for the probe's answer
	// wait on the clock too, where the test can see them.
	rt := client.NewTransport(srv, client.WithClock(clk), client.WithMaxWait(time.Hour))
	ctx := context.Background()
	for i := range 2 {
		if code, err := get(ctx, rt, "http://api.test/x"); code != 200 {
			t.Fatalf("step %d: %d, %v", i, code, err)
		}
	}
	codes := make(chan int, 3)
	for range 3 {
		go func() {
			code, _ := get(ctx, rt, "http://api.test/x")
			codes <- code
		}()
	}
	awaitTimers(t, clk, 3)
	clk.Advance(time.Second)
	<-probeIn
	awaitTimers(t, clk, 2) // the other two wait for the probe's answer
	if n, _ := srv.stats(); n != 3 {
		t.Fatalf("server saw %d requests while the probe is unanswered, want 3", n)
	}
	if b, _ := client.BudgetOf(rt, "http://api.test", "p"); !b.Probing {
		t.Errorf("budget %+v, want a probe in flight", b)
	}
	close(releaseProbe)
	for i := range 2 {
		if code := <-codes; code != 200 {
			t.Errorf("step %d: status %d", i, code)
		}
	}
	awaitTimers(t, clk, 1) // the last one waits for the next window
	clk.Advance(time.Second)
	if code := <-codes; code != 200 {
		t.Errorf("last: status %d", code)
	}
	if n, denied := srv.stats(); n != 5 || denied != 0 {
		t.Errorf("server saw %d requests and refused %d, want 5 and 0", n, denied)
	}
}

// TestPacingFailsFastPastTheDeadline: a wait that would pass the context's
// deadline is not begun; the error wraps context.DeadlineExceeded and says
// how long the wait was. The request's body is closed, as it is not sent.
func TestPacingFailsFastPastTheDeadline(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := newQuotaServer(clk, "p", 1, 10*time.Second)
	rt := client.NewTransport(srv, client.WithClock(clk))
	hc := &http.Client{Transport: rt}
	if code, err := get(context.Background(), rt, "http://api.test/x"); code != 200 {
		t.Fatalf("first request: %d, %v", code, err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(5*time.Second))
	defer cancel()
	body := &closeTracker{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://api.test/x", body)
	_, err := hc.Do(req)
	var we *client.WaitError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &we) {
		t.Fatalf("error %v, want a *WaitError wrapping context.DeadlineExceeded", err)
	}
	if we.Wait != 10*time.Second || we.Policy != "p" {
		t.Errorf("WaitError %+v, want a wait of 10s for policy p", we)
	}
	if !body.closed.Load() {
		t.Error("the body of the request not sent is not closed")
	}
	if n, _ := srv.stats(); n != 1 || clk.Timers() != 0 {
		t.Errorf("server saw %d requests, %d timers pending; want 1 and 0", n, clk.Timers())
	}
}

// TestPacingReturnsTheContextErrorWhenItEndsFirst: a request waiting for
// its quota returns the context's error when the context ends.
func TestPacingReturnsTheContextErrorWhenItEndsFirst(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := newQuotaServer(clk, "p", 1, time.Second)
	rt := client.NewTransport(srv, client.WithClock(clk))
	if code, err := get(context.Background(), rt, "http://api.test/x"); code != 200 {
		t.Fatalf("first request: %d, %v", code, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := get(ctx, rt, "http://api.test/x")
		errc <- err
	}()
	awaitTimers(t, clk, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if n, _ := srv.stats(); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

// TestPacingNeverWaitsBeyondMaxWait: WithMaxWait bounds the wait: beyond
// it the request fails at once with ErrWaitTooLong; within it, it waits.
func TestPacingNeverWaitsBeyondMaxWait(t *testing.T) {
	tests := []struct {
		name    string
		maxWait time.Duration
		waits   bool
	}{
		{"zero never waits", 0, false},
		{"below the wait", 1500 * time.Millisecond, false},
		{"exactly the wait", 2 * time.Second, true},
		{"above the wait", time.Minute, true},
		{"negative: no bound", -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := client.NewFakeClock(clockStart())
			srv := newQuotaServer(clk, "p", 1, 2*time.Second)
			rt := client.NewTransport(srv, client.WithClock(clk), client.WithMaxWait(tc.maxWait))
			if code, err := get(context.Background(), rt, "http://api.test/x"); code != 200 {
				t.Fatalf("first request: %d, %v", code, err)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := get(context.Background(), rt, "http://api.test/x")
				errc <- err
			}()
			if !tc.waits {
				if err := <-errc; !errors.Is(err, client.ErrWaitTooLong) {
					t.Errorf("error %v, want ErrWaitTooLong", err)
				}
				return
			}
			awaitTimers(t, clk, 1)
			clk.Advance(2 * time.Second)
			if err := <-errc; err != nil {
				t.Errorf("error %v after the wait", err)
			}
			if _, denied := srv.stats(); denied != 0 {
				t.Errorf("server refused %d", denied)
			}
		})
	}
}
