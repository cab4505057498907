package client_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/client"
)

// TestTransportForgetsHostsPastTheBound: 3,000 hosts that each answer a
// POST with 429 and "wait 100000 s" leave at most 1,024 hosts remembered:
// a host that said wait, with no request under way, is forgotten first
// when the bound is reached.
func TestTransportForgetsHostsPastTheBound(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := &scripted{replies: []reply{refusal("100000")}}
	rt := client.NewTransport(srv, client.WithClock(clk))
	for i := range 3000 {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://h%d.test/x", i), strings.NewReader("job"))
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("step %d: %v, %v; want the 429 as it came", i, resp, err)
		}
		resp.Body.Close()
	}
	if n := client.Hosts(rt); n > 1024 {
		t.Errorf("%d hosts remembered after 3,000 that said wait, want at most 1,024", n)
	}
}

// TestTransportHoldsHostileWaits: a wait a server says past the longest
// wait (an hour by default, or the longest window its RateLimit-Policy
// states) is held to it: the request it answered is not retried, the
// next ones wait that long at most, and after it the host is served
// again.
func TestTransportHoldsHostileWaits(t *testing.T) {
	year5138 := time.Date(5138, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	tests := []struct {
		name    string
		status  int
		header  []string
		opts    []client.Option
		longest time.Duration
	}{
		{"RateLimit t=999999999", 200, []string{"RateLimit", `"p";r=0;t=999999999`}, nil, time.Hour},
		{"X-RateLimit-Reset in the year 5138", 200, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", fmt.Sprint(year5138)}, nil, time.Hour},
		{"429, Retry-After 1e20", 429, []string{"Retry-After", "100000000000000000000"}, nil, time.Hour},
		{"503, Retry-After a year", 503, []string{"Retry-After", "31536000"}, nil, time.Hour},
		{"WithLongestWait(5m)", 429, []string{"Retry-After", "86400"}, []client.Option{client.WithLongestWait(5 * time.Minute)}, 5 * time.Minute},
		{"a policy window of 2h", 200, []string{"RateLimit-Policy", `"p";q=10;w=7200`, "RateLimit", `"p";r=0;t=999999`}, nil, 2 * time.Hour},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := client.NewFakeClock(clockStart())
			hdr := http.Header{}
			for j := 0; j+1 < len(tc.header); j += 2 {
				hdr.Set(tc.header[j], tc.header[j+1])
			}
			srv := &scripted{replies: []reply{{status: tc.status, header: hdr}, {status: 200}}}
			rt := client.NewTransport(srv, append([]client.Option{client.WithClock(clk)}, tc.opts...)...)
			if code, err := get(context.Background(), rt, "http://api.test/x"); code != tc.status || err != nil {
				t.Fatalf("step %d: %d, %v; want the answer as it came", i, code, err)
			}
			if n := len(srv.calls()); n != 1 {
				t.Fatalf("step %d: %d calls, want 1: the answer that said a wait past the bound is not retried", i, n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.longest+time.Hour)
			defer cancel()
			res := make(chan error, 1)
			go func() { _, err := get(ctx, rt, "http://api.test/x"); res <- err }()
			awaitTimers(t, clk, 1)
			clk.Advance(tc.longest - time.Second)
			select {
			case err := <-res:
				t.Fatalf("step %d: the next request went before the bound: %v", i, err)
			default:
			}
			clk.Advance(time.Second)
			select {
			case err := <-res:
				if err != nil {
					t.Fatalf("step %d: the next request after %s: %v, want it served", i, tc.longest, err)
				}
			case <-time.After(5 * time.Second): // real time: a guard against a hang
				t.Fatalf("step %d: the next request still waits after %s", i, tc.longest)
			}
		})
	}
}

// TestTransportHonoursRetryAfterOn503: a 503 with Retry-After paces the
// host and is retried, when that is safe, as a 429 is.
func TestTransportHonoursRetryAfterOn503(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := &scripted{replies: []reply{{status: 503, header: http.Header{"Retry-After": {"2"}}}, {status: 200}}}
	rt := client.NewTransport(srv, client.WithClock(clk))
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/x", nil)
	res := send(rt, req)
	awaitTimers(t, clk, 1)
	if n := len(srv.calls()); n != 1 {
		t.Fatalf("%d calls before Retry-After has passed, want 1", n)
	}
	clk.Advance(2 * time.Second)
	r := <-res
	if r.err != nil || r.resp.StatusCode != 200 || len(srv.calls()) != 2 {
		t.Fatalf("got %v, %v after %d calls; want the retry's 200 after 2", r.resp, r.err, len(srv.calls()))
	}
	// Without Retry-After a 503 says nothing of the rate: not retried.
	srv2 := &scripted{replies: []reply{{status: 503}, {status: 200}}}
	rt2 := client.NewTransport(srv2, client.WithClock(clk))
	if code, err := get(context.Background(), rt2, "http://api.test/x"); code != 503 || err != nil || len(srv2.calls()) != 1 {
		t.Errorf("a bare 503: %d, %v after %d calls; want it as it came, once", code, err, len(srv2.calls()))
	}
}
