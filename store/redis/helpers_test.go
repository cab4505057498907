package redis

import (
	"sync"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// algorithms are every algorithm, for tests that run each.
var algorithms = []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.FixedWindow, ratelimit.TokenBucket,
	ratelimit.SlidingLog, ratelimit.SlidingWindowApprox}

// t0 is the first instant of the tests' clocks: a realistic epoch time,
// not aligned to any window.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// clock is a controlled clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }
