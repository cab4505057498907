package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// NewTransport returns an http.RoundTripper that sends requests through
// base (http.DefaultTransport when nil), pacing them by the rate-limit
// headers of the answers and retrying what a 429 refused when that is safe.
//
// It reads, on every response: RateLimit-Policy and RateLimit (IETF
// draft-ietf-httpapi-ratelimit-headers-10 and -11), RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset (draft-06 and earlier),
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (delay
// seconds, or a Unix time), and Retry-After (seconds or an HTTP-date). It
// keeps what they say per host (scheme://host[:port]) and per quota policy,
// shared by every goroutine using the transport.
//
// Before sending, a request whose quota is spent (the server said 0
// remain, or as many requests as remained have been sent since, counting
// those still unanswered) waits until the time the server said more comes
// back. The wait is bounded by the request's context: the transport
// returns the context's error if it ends first, and a *WaitError wrapping
// context.DeadlineExceeded at once if the wait would pass its deadline.
// A wait a server says is believed for WithLongestWait at most (an hour,
// or the longest window the host's RateLimit-Policy states).
//
// A 429, or a 503 with Retry-After, is retried, at most WithMaxRetries
// times and after Retry-After, only when that is safe: an idempotent
// method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or a request carrying
// the Idempotency-Key header (see WithIdempotencyHeader), and a body that
// can be sent again (none, or Request.GetBody set, as http.NewRequest does
// for in-memory bodies). Otherwise, or when the wait would pass the
// deadline, WithMaxWait or WithLongestWait, the answer is returned as it
// came. The body of a retried answer is drained and closed.
//
// The transport is safe for concurrent use, and bounded whatever servers
// say: at most 1,024 hosts are remembered (the idle ones, then those no
// request is under way to, are forgotten first). Malformed fields are
// ignored, never a panic. Use one transport per client identity (API key,
// account): the server counts per identity, the transport per host.
func NewTransport(base http.RoundTripper, opts ...Option) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return &transport{base: base, cfg: cfg, hosts: map[string]*host{}}
}

type transport struct {
	base http.RoundTripper
	cfg  config

	mu    sync.Mutex
	hosts map[string]*host
}

var errNoResponse = errors.New("ratelimit/client: the base RoundTripper returned neither a response nor an error")

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil || req.URL == nil {
		closeBody(req)
		return nil, errors.New("ratelimit/client: request without a URL")
	}
	ctx := req.Context()
	h := t.host(hostKey(req.URL))
	route := routeKey(req)
	retryable := t.retryable(req)
	attempt := req
	for tries := 0; ; tries++ {
		tk, err := t.acquire(ctx, h, route)
		if err != nil {
			closeBody(attempt)
			return nil, err
		}
		resp, err := t.base.RoundTrip(attempt)
		if resp == nil && err == nil {
			err = errNoResponse
		}
		now := t.cfg.clock.Now()
		if err != nil {
			h.finish(tk, nil, now, t.cfg.longestWait)
			return nil, err
		}
		ans := readAnswer(resp.Header, now)
		held := h.finish(tk, &response{status: resp.StatusCode, answer: ans}, now, t.cfg.longestWait)
		if !refused(resp.StatusCode, ans) || !retryable || tries >= t.cfg.maxRetries || held {
			return resp, nil
		}
		next, ok := t.nextAttempt(ctx, h, route, req)
		if !ok {
			return resp, nil
		}
		drainAndClose(resp)
		attempt = next
	}
}

// CloseIdleConnections closes the idle connections of the base transport,
// when it has such a method (http.Client.CloseIdleConnections calls it).
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// host returns the state of key, forgetting hosts when there are too
// many: the idle ones, then, while there are still too many, hosts no
// request is sent to or waits for: forgetting one loses only what its
// server said to wait for, and its next request goes and learns it again.
// The bound is passed only while every host has requests under way.
func (t *transport) host(key string) *host {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.hosts[key]; h != nil {
		return h
	}
	if len(t.hosts) >= maxHosts {
		now := t.cfg.clock.Now()
		for k, h := range t.hosts {
			if h.idle(now) {
				delete(t.hosts, k)
			}
		}
		for k, h := range t.hosts {
			if len(t.hosts) < maxHosts {
				break
			}
			if h.quiet() {
				delete(t.hosts, k)
			}
		}
	}
	h := newHost(key)
	t.hosts[key] = h
	return h
}

// refused reports an answer that refuses its request for the rate: a 429,
// or a 503 that says when to come back (Retry-After), which is honoured
// the same way.
func refused(status int, a answer) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable && a.hasRetryAfter
}

// acquire waits until a request to route may go, and lets it go.
func (t *transport) acquire(ctx context.Context, h *host, route string) (*ticket, error) {
	clk := t.cfg.clock
	start := clk.Now()
	waiting := false
	defer func() {
		if waiting {
			h.done()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := clk.Now()
		tk, v, changed := h.tryAcquire(route, now)
		if tk != nil {
			return tk, nil
		}
		if err := t.tooLong(ctx, h, v, start, now); err != nil {
			return nil, err
		}
		if !waiting {
			waiting = true
			h.wait()
		}
		fire := v.until
		if t.cfg.maxWait >= 0 {
			if limit := start.Add(t.cfg.maxWait); fire.IsZero() || limit.Before(fire) {
				fire = limit
			}
		}
		var timer <-chan time.Time
		stop := func() bool { return false }
		if !fire.IsZero() {
			timer, stop = clk.TimerAt(fire)
		}
		select {
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-timer:
		case <-changed:
			stop()
		}
	}
}

// tooLong returns the error of a request held by v at now, when waiting
// (since start) would pass the context's deadline or the maximum wait.
func (t *transport) tooLong(ctx context.Context, h *host, v verdict, start, now time.Time) error {
	werr := func(err error) error {
		wait := time.Duration(0)
		if !v.until.IsZero() {
			wait = v.until.Sub(now)
		}
		return &WaitError{Host: h.key, Policy: v.policy, Wait: wait, Err: err}
	}
	if !v.until.IsZero() {
		if dl, ok := ctx.Deadline(); ok && !v.until.Before(dl) {
			return werr(context.DeadlineExceeded)
		}
	}
	if t.cfg.maxWait >= 0 {
		limit := start.Add(t.cfg.maxWait)
		if !now.Before(limit) || !v.until.IsZero() && v.until.After(limit) {
			return werr(ErrWaitTooLong)
		}
	}
	return nil
}

// hostKey is the state key of u's host: scheme://host[:port], lower case,
// without the scheme's default port.
func hostKey(u *url.URL) string {
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	switch {
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		host = strings.TrimSuffix(host, ":80")
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		host = strings.TrimSuffix(host, ":443")
	}
	return scheme + "://" + host
}

// routeKey is the route of req: its method and path.
func routeKey(req *http.Request) string {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	return method + " " + path
}

// closeBody closes the body of a request the transport does not send, as
// an http.RoundTripper must.
func closeBody(req *http.Request) {
	if req != nil && req.Body != nil {
		req.Body.Close()
	}
}
