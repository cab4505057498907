package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/client"
)

// TestPacingKeepsHostsApart: a spent quota of one host holds no request to
// another.
func TestPacingKeepsHostsApart(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	a := newQuotaServer(clk, "p", 1, time.Minute)
	b := newQuotaServer(clk, "p", 1, time.Minute)
	rt := client.NewTransport(routes{"a.test": a, "b.test:8080": b}, client.WithClock(clk), client.WithMaxWait(0))
	ctx := context.Background()
	steps := []struct {
		url  string
		want bool // sent
	}{
		{"http://a.test/x", true},
		{"http://A.TEST:80/x", false}, // the same host
		{"http://b.test:8080/x", true},
		{"https://a.test/x", true}, // another scheme is another origin
		{"http://b.test:8080/y", false},
	}
	for i, s := range steps {
		_, err := get(ctx, rt, s.url)
		if sent := err == nil; sent != s.want {
			t.Errorf("step %d: %s sent %v (%v), want %v", i, s.url, sent, err, s.want)
		}
	}
}

// TestPacingKeepsRoutesApart: a route is held only by the quotas its
// answers named; a route never answered is held by every quota of the
// host, and gives back what it took from the quotas its answer does not
// name.
func TestPacingKeepsRoutesApart(t *testing.T) {
	type step struct {
		path string
		sent bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a route never answered is held by a spent quota", []step{
			{"/search", true},
			{"/search", false}, // spent for a minute
			{"/hello", false},  // never answered: held by search
		}},
		{"answered routes are held by their own quotas only", []step{
			{"/hello", true},   // hello: 2 left
			{"/health", true},  // never answered: takes from hello, gives it back (no fields)
			{"/search", true},  // never answered: takes from hello, gives it back; search is spent
			{"/search", false}, // spent
			{"/hello", true},   // hello: 1 left
			{"/health", true},  // held by nothing
			{"/other", false},  // never answered: held by search
			{"/hello", true},   // hello: 0 left
			{"/hello", false},
			{"/health", true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := client.NewFakeClock(clockStart())
			search := newQuotaServer(clk, "search", 1, time.Minute)
			hello := newQuotaServer(clk, "hello", 3, time.Minute)
			rt := client.NewTransport(routes{"api.test/search": search, "api.test/hello": hello, "api.test": routes{}},
				client.WithClock(clk), client.WithMaxWait(0))
			for i, s := range tc.steps {
				_, err := get(context.Background(), rt, "http://api.test"+s.path)
				if sent := err == nil; sent != s.sent {
					t.Errorf("step %d: %s sent %v (%v), want %v", i, s.path, sent, err, s.sent)
				}
			}
			if _, d := search.stats(); d != 0 {
				t.Errorf("search refused %d", d)
			}
			if _, d := hello.stats(); d != 0 {
				t.Errorf("hello refused %d", d)
			}
		})
	}
}

// TestPacingStaleAnswerCannotRaiseTheBudget: answers that arrive out of
// order are applied by when the server counted them: an older answer
// saying more remains does not undo a newer one.
func TestPacingStaleAnswerCannotRaiseTheBudget(t *testing.T) {
	clk := client.NewFakeClock(clockStart())
	srv := newQuotaServer(clk, "p", 3, time.Second)
	releases := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	arrived := make(chan int, 2)
	srv.hold = func(n int) {
		if c := releases[n]; c != nil {
			arrived <- n
			<-c
		}
	}
	rt := client.NewTransport(srv, client.WithClock(clk), client.WithMaxWait(0))
	ctx := context.Background()
	done := make(chan error, 2)
	go func() { _, err := get(ctx, rt, "http://api.test/x"); done <- err }()
	<-arrived // the first is counted: r=2
	go func() { _, err := get(ctx, rt, "http://api.test/x"); done <- err }()
	<-arrived // the second is counted: r=1
	close(releases[2])
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(releases[1]) // the stale answer, r=2, arrives last
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, _ := client.BudgetOf(rt, "http://api.test", "p"); b.Rem != 1 {
		t.Fatalf("budget %+v, want 1 left", b)
	}
	for i, want := range []bool{true, false} {
		_, err := get(ctx, rt, "http://api.test/x")
		if sent := err == nil; sent != want {
			t.Errorf("step %d: sent %v (%v), want %v", i, sent, err, want)
		}
	}
	if _, denied := srv.stats(); denied != 0 {
		t.Errorf("server refused %d", denied)
	}
}

// TestTransportNeverPanicsOnBadInput: a request without a URL, a base
// transport that answers nothing, fields full of garbage: errors or
// ignored fields, never a panic.
func TestTransportNeverPanicsOnBadInput(t *testing.T) {
	rt := client.NewTransport(rtFunc(func(*http.Request) (*http.Response, error) { return nil, nil }))
	if _, err := rt.RoundTrip(&http.Request{Method: "GET"}); err == nil {
		t.Error("a request without a URL: no error")
	}
	if _, err := rt.RoundTrip(nil); err == nil {
		t.Error("a nil request: no error")
	}
	if _, err := get(context.Background(), rt, "http://api.test/x"); err == nil {
		t.Error("a base that answers nothing: no error")
	}
	garbage := []string{"", "\x00", "\xff\xfe", `"`, `(`, `;;;`, `"a";r=`, `"a";r=-1;t=-1`, "99999999999999999999999",
		`"a";q=0;w=0`, `"a";r=0;t=999999999999999`, "Mon, 32 Jan 2006", "@", "%\"", ":::"}
	for i, g := range garbage {
		h := http.Header{}
		for _, k := range []string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
			"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After", "Date"} {
			h.Set(k, g)
		}
		for _, status := range []int{200, 429, 503} {
			srv := &scripted{replies: []reply{{status: status, header: h}}}
			rt := client.NewTransport(srv, client.WithMaxWait(0), client.WithMaxRetries(1))
			for range 2 {
				if _, err := get(context.Background(), rt, "http://api.test/x"); err != nil && !errors.Is(err, client.ErrWaitTooLong) {
					t.Errorf("step %d (%q, %d): %v", i, g, status, err)
				}
			}
		}
	}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTransportForwardsCloseIdleConnections: http.Client's
// CloseIdleConnections reaches the base transport.
func TestTransportForwardsCloseIdleConnections(t *testing.T) {
	base := &idleCloser{}
	hc := &http.Client{Transport: client.NewTransport(base)}
	hc.CloseIdleConnections()
	if !base.closed {
		t.Error("CloseIdleConnections did not reach the base transport")
	}
}

type idleCloser struct{ closed bool }

func (c *idleCloser) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, io.EOF
}
func (c *idleCloser) CloseIdleConnections() { c.closed = true }
