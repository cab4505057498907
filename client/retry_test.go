package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/client"
)

// refusal is a 429 asking to come back in retryAfter seconds.
func refusal(retryAfter string) reply {
	return reply{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {retryAfter}}}
}

type result struct {
	resp *http.Response
	err  error
}

// send sends req through rt in a goroutine.
func send(rt http.RoundTripper, req *http.Request) <-chan result {
	c := make(chan result, 1)
	go func() {
		resp, err := rt.RoundTrip(req)
		c <- result{resp, err}
	}()
	return c
}

// TestRetryIdempotentMethodsAfterRetryAfter: a 429 to an idempotent
// method is retried once Retry-After has passed, not before, with the same
// body; the 429's body is drained and closed.
func TestRetryIdempotentMethodsAfterRetryAfter(t *testing.T) {
	for _, method := range []string{"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"} {
		t.Run(method, func(t *testing.T) {
			clk := client.NewFakeClock(clockStart())
			first := refusal("2")
			first.body = newTrackedBody(strings.Repeat("slow down ", 100))
			srv := &scripted{replies: []reply{first, {status: 200}}}
			rt := client.NewTransport(srv, client.WithClock(clk))
			var body io.Reader
			if method == "PUT" {
				body = bytes.NewReader([]byte("payload"))
			}
			req, _ := http.NewRequest(method, "http://api.test/x", body)
			res := send(rt, req)
			awaitTimers(t, clk, 1)
			if n := len(srv.calls()); n != 1 {
				t.Fatalf("%d calls before Retry-After has passed, want 1", n)
			}
			clk.Advance(2 * time.Second)
			r := <-res
			if r.err != nil || r.resp.StatusCode != 200 {
				t.Fatalf("got %v, %v; want the retry's 200", r.resp, r.err)
			}
			calls := srv.calls()
			if len(calls) != 2 || calls[0].body != calls[1].body || method == "PUT" && calls[1].body != "payload" {
				t.Errorf("calls %+v, want the same request twice", calls)
			}
			if !first.body.drained() || !first.body.closed.Load() {
				t.Errorf("the retried 429's body: drained %v, closed %v; want both", first.body.drained(), first.body.closed.Load())
			}
		})
	}
}

// TestRetryOnlyWhatIsSafe pins which requests a 429 is retried for: an
// idempotent method or one carrying the idempotency header, and a body
// that can be had again.
func TestRetryOnlyWhatIsSafe(t *testing.T) {
	noGetBody := func(req *http.Request) { req.GetBody = nil }
	tests := []struct {
		name    string
		method  string
		header  http.Header
		opts    []client.Option
		adjust  func(*http.Request)
		retried bool
	}{
		{"POST without Idempotency-Key", "POST", nil, nil, nil, false},
		{"PATCH without Idempotency-Key", "PATCH", nil, nil, nil, false},
		{"POST with Idempotency-Key", "POST", http.Header{"Idempotency-Key": {"k1"}}, nil, nil, true},
		{"POST with an empty Idempotency-Key", "POST", http.Header{"Idempotency-Key": {""}}, nil, nil, false},
		{"PATCH with Idempotency-Key", "PATCH", http.Header{"Idempotency-Key": {"k1"}}, nil, nil, true},
		{"POST with a custom idempotency header", "POST", http.Header{"X-Request-Id": {"r1"}},
			[]client.Option{client.WithIdempotencyHeader("x-request-id")}, nil, true},
		{"POST with Idempotency-Key when another header is named", "POST", http.Header{"Idempotency-Key": {"k1"}},
			[]client.Option{client.WithIdempotencyHeader("X-Request-Id")}, nil, false},
		{"POST with Idempotency-Key when no header is named", "POST", http.Header{"Idempotency-Key": {"k1"}},
			[]client.Option{client.WithIdempotencyHeader("")}, nil, false},
		{"PUT whose body cannot be had again", "PUT", nil, nil, noGetBody, false},
		{"POST with Idempotency-Key whose body cannot be had again", "POST", http.Header{"Idempotency-Key": {"k1"}}, nil, noGetBody, false},
		{"GET with retries off", "GET", nil, []client.Option{client.WithMaxRetries(0)}, nil, false},
		{"GET with negative retries: off", "GET", nil, []client.Option{client.WithMaxRetries(-2)}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := client.NewFakeClock(clockStart())
			first := refusal("1")
			first.body = newTrackedBody("slow down")
			srv := &scripted{replies: []reply{first, {status: 200}}}
			rt := client.NewTransport(srv, append([]client.Option{client.WithClock(clk)}, tc.opts...)...)
			req, _ := http.NewRequest(tc.method, "http://api.test/x", strings.NewReader("payload"))
			for k, v := range tc.header {
				req.Header[http.CanonicalHeaderKey(k)] = v
			}
			if tc.adjust != nil {
				tc.adjust(req)
			}
			res := send(rt, req)
			if tc.retried {
				awaitTimers(t, clk, 1)
				clk.Advance(time.Second)
			}
			r := <-res
			if r.err != nil {
				t.Fatal(r.err)
			}
			calls := srv.calls()
			if tc.retried {
				if r.resp.StatusCode != 200 || len(calls) != 2 || calls[1].body != "payload" {
					t.Errorf("status %d, calls %+v; want a retry with the same body and its 200", r.resp.StatusCode, calls)
				}
				return
			}
			// Not retried: the 429 as it came, its body unread and open.
			if r.resp.StatusCode != 429 || len(calls) != 1 || r.resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("status %d, %d calls; want the 429 unchanged after 1 call", r.resp.StatusCode, len(calls))
			}
			if b, _ := io.ReadAll(r.resp.Body); string(b) != "slow down" || first.body.closed.Load() {
				t.Errorf("429 body %q (closed %v), want it unread and open", b, first.body.closed.Load())
			}
		})
	}
}

// TestRetryHonoursMaxRetries: a request refused every time is sent
// 1 + max retries times; the last 429 is returned as it came, the others
// drained and closed.
func TestRetryHonoursMaxRetries(t *testing.T) {
	tests := []struct {
		name  string
		opts  []client.Option
		sends int
	}{
		{"default", nil, 1 + client.DefaultMaxRetries},
		{"none", []client.Option{client.WithMaxRetries(0)}, 1},
		{"one", []client.Option{client.WithMaxRetries(1)}, 2},
		{"five", []client.Option{client.WithMaxRetries(5)}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := client.NewFakeClock(clockStart())
			var replies []reply
			for range 10 {
				r := refusal("1")
				r.body = newTrackedBody("no")
				replies = append(replies, r)
			}
			srv := &scripted{replies: replies}
			rt := client.NewTransport(srv, append([]client.Option{client.WithClock(clk)}, tc.opts...)...)
			req, _ := http.NewRequest("GET", "http://api.test/x", nil)
			r := advanceUntil(t, clk, send(rt, req))
			if r.err != nil || r.resp.StatusCode != 429 {
				t.Fatalf("got %v, %v; want the last 429", r.resp, r.err)
			}
			if n := len(srv.calls()); n != tc.sends {
				t.Errorf("%d sends, want %d", n, tc.sends)
			}
			for i := range tc.sends {
				if closed, last := replies[i].body.closed.Load(), i == tc.sends-1; closed == last {
					t.Errorf("step %d: body closed %v, want %v", i, closed, !last)
				}
			}
		})
	}
}

// TestRetryHonoursTheContextDeadline: a retry whose wait would pass the
// context's deadline is not waited for: the 429 is returned at once, as it
// came. A context that ends while the retry waits ends the request with
// its error.
func TestRetryHonoursTheContextDeadline(t *testing.T) {
	t.Run("deadline before Retry-After", func(t *testing.T) {
		clk := client.NewFakeClock(clockStart())
		srv := &scripted{replies: []reply{refusal("10"), {status: 200}}}
		rt := client.NewTransport(srv, client.WithClock(clk))
		ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(5*time.Second))
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/x", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 429 || len(srv.calls()) != 1 || clk.Timers() != 0 {
			t.Errorf("got %v, %v after %d calls; want the 429 at once", resp, err, len(srv.calls()))
		}
	})
	t.Run("maximum wait before Retry-After", func(t *testing.T) {
		clk := client.NewFakeClock(clockStart())
		srv := &scripted{replies: []reply{refusal("10"), {status: 200}}}
		rt := client.NewTransport(srv, client.WithClock(clk), client.WithMaxWait(9*time.Second))
		req, _ := http.NewRequest("GET", "http://api.test/x", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 429 || len(srv.calls()) != 1 {
			t.Errorf("got %v, %v after %d calls; want the 429 at once", resp, err, len(srv.calls()))
		}
	})
	t.Run("context ends while waiting", func(t *testing.T) {
		clk := client.NewFakeClock(clockStart())
		first := refusal("3")
		first.body = newTrackedBody("no")
		srv := &scripted{replies: []reply{first, {status: 200}}}
		rt := client.NewTransport(srv, client.WithClock(clk))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/x", nil)
		res := send(rt, req)
		awaitTimers(t, clk, 1)
		cancel()
		r := <-res
		if !errors.Is(r.err, context.Canceled) || r.resp != nil {
			t.Errorf("got %v, %v; want context.Canceled", r.resp, r.err)
		}
		if !first.body.closed.Load() || len(srv.calls()) != 1 {
			t.Errorf("429 body closed %v after %d calls; want closed after 1", first.body.closed.Load(), len(srv.calls()))
		}
	})
}

// TestRetryThroughHTTPClient: through http.Client, against this project's
// Limiter: a burst beyond the quota is retried into the next window, and
// every request ends 200.
func TestRetryThroughHTTPClient(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := newLimited(t, "2/s", clk.Now)
	// Pacing would hold the third request; a shared transport learns only
	// from answers, so the first three go together, unknowing.
	rt := client.NewTransport(srv, client.WithClock(clk))
	hc := &http.Client{Transport: rt}
	codes := make(chan int, 3)
	start := make(chan struct{})
	for range 3 {
		go func() {
			<-start
			resp, err := hc.Get("http://api.test/hello")
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	close(start)
	for i := range 3 {
		if code := advanceUntil(t, clk, codes); code != 200 {
			t.Errorf("step %d: status %d, want 200", i, code)
		}
	}
	if d := srv.denied.Load(); d > 1 {
		t.Errorf("server refused %d, want at most 1 (the burst's third, before anything was known)", d)
	}
}
