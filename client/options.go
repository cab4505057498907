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
	maxRetries int
	maxWait    time.Duration // < 0: no bound but the request's context
	idemHeader string        // canonical; "" when no header makes a request retryable
	clock      clock
}

func defaultConfig() config {
	return config{
		maxRetries: DefaultMaxRetries,
		maxWait:    -1,
		idemHeader: DefaultIdempotencyHeader,
		clock:      realClock{},
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
