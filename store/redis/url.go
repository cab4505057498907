package redis

import (
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// NewFromURL returns a Store on a client of its own for the Redis that url
// names ("redis://[user:password@]host:port[/db]", "rediss://" for TLS,
// as go-redis's ParseURL reads it), built with the options that make a
// request fail fast while Redis is down: ContextTimeoutEnabled (the
// Limiter's timeout reaches the socket), one dial per new connection with
// no pause after a failed one, and no command retries within the timeout.
// Options of the URL's query (dial_timeout=, pool_size=, ...) apply
// first; the four above override them. Close closes the client.
func NewFromURL(url string, opts ...Option) (*Store, error) {
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("ratelimit/store: NewRedisURL: %w", err)
	}
	o.ContextTimeoutEnabled = true
	o.DialerRetries = 1
	o.DialerRetryTimeout = time.Millisecond
	o.MaxRetries = -1
	client := goredis.NewClient(o)
	s, err := New(client, opts...)
	if err != nil {
		client.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// Close stops the fleet's heartbeat (WithFleetShare) and closes the
// client the Store made (NewFromURL); a Store on a client of the
// caller's leaves it open, for the caller to close.
func (s *Store) Close() error {
	if s.fleet != nil {
		s.fleet.close()
	}
	if !s.owned {
		return nil
	}
	return s.client.Close()
}
