package client

import (
	"net/http"
	"time"
)

// DefaultMaxRetries is how many times a refused (429) request is retried
// unless WithMaxRetries says otherwise.
const DefaultMaxRetries = 3

// DefaultIdempotencyHeader is the header that makes a request of any method
// safe to retry (IETF draft "The Idempotency-Key HTTP Header Field"),
// unless WithIdempotencyHeader names another.
const DefaultIdempotencyHeader = "Idempotency-Key"

// Option configures NewTransport.
type Option func(*config)

type config struct {
	maxRetries  int
	maxWait     time.Duration // < 0: no bound but the request's context
	longestWait time.Duration // WithLongestWait
	idemHeader  string        // canonical; "" when no header makes a request retryable
	clock       clock
}

func defaultConfig() config {
	return config{
		maxRetries:  DefaultMaxRetries,
		maxWait:     -1,
		longestWait: DefaultLongestWait,
		idemHeader:  DefaultIdempotencyHeader,
		clock:       realClock{},
	}
}

// DefaultLongestWait is the longest wait the transport keeps from a
// server's answer unless WithLongestWait says otherwise.
const DefaultLongestWait = time.Hour

// WithLongestWait bounds how long the transport believes a server's word
// that its quota is spent (Retry-After, RateLimit's t, a reset): a wait
// said longer than d, and than the longest window the host's
// RateLimit-Policy states, is held to that for the requests that follow,
// and the request whose answer said it is not retried: its answer is
// returned as it came. So a server that answers "wait a year" (or a
// hostile one that says 1e20 seconds) blocks that host for d at most. d ≤
// 0 restores the default, DefaultLongestWait.
func WithLongestWait(d time.Duration) Option {
	return func(c *config) {
		c.longestWait = d
		if d <= 0 {
			c.longestWait = DefaultLongestWait
		}
	}
}

// WithMaxRetries sets how many times a request refused with 429 is sent
// again, when it is safe to (see NewTransport); 0 turns retries off, and so
// does a negative n. The default is DefaultMaxRetries.
func WithMaxRetries(n int) Option {
	return func(c *config) { c.maxRetries = max(n, 0) }
}

// WithMaxWait bounds how long a request waits for its quota, in all, before
// being sent or retried. A request that would wait longer is not sent: the
// transport returns a *WaitError wrapping ErrWaitTooLong (or, for a retry,
// the 429 response itself). d = 0 never waits. A negative d restores the
// default: no bound but the request's context.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) { c.maxWait = max(d, -1) }
}

// WithIdempotencyHeader names the request header whose presence (with a
// non-empty value) makes a request of any method safe to retry after a 429,
// as the server deduplicates it. The default is DefaultIdempotencyHeader;
// "" makes only the idempotent methods retryable.
func WithIdempotencyHeader(name string) Option {
	return func(c *config) {
		c.idemHeader = ""
		if name != "" {
			c.idemHeader = http.CanonicalHeaderKey(name)
		}
	}
}
