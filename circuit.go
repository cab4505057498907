package ratelimit

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrCircuitOpen is wrapped by the error a Limiter reports when it did not
// ask its store because the store's circuit is open (see
// WithCircuitBreaker). The fallback store or the failure mode decided.
var ErrCircuitOpen = errors.New("store circuit open")

// Defaults of WithCircuitBreaker.
const (
	DefaultCircuitFailures = 5
	DefaultCircuitCooldown = time.Second
)

// WithCircuitBreaker makes the Limiter stop asking a store that keeps
// failing, so an outage does not cost every request the whole timeout:
// after failures consecutive store errors (timeouts included; requests
// whose client went away do not count) spanning at least cooldown (or at
// once, if the store has never answered), the circuit opens and requests
// go straight to the fallback store or the failure mode, without waiting.
//
// The time condition keeps a partial outage from stopping all limiting:
// in a Redis Cluster with one master down, the requests of identities on
// that master fail (each within the timeout, then fallback or failure
// mode) while the other masters keep answering, so the circuit stays
// closed and those identities keep being limited.
// After cooldown, one request probes the store with the normal timeout:
// if it answers, the circuit closes and limiting resumes; if not, the
// circuit stays open for another cooldown. The default is
// DefaultCircuitFailures (5) and DefaultCircuitCooldown (1s); failures 0
// turns the breaker off. A negative count or a non-positive cooldown with
// failures > 0 makes New fail.
func WithCircuitBreaker(failures int, cooldown time.Duration) Option {
	return func(c *config) {
		if failures < 0 || failures > 0 && cooldown <= 0 {
			c.fail("WithCircuitBreaker(%d, %s): want failures ≥ 0 and, when > 0, a positive cooldown", failures, cooldown)
			return
		}
		c.breakerSet = true
		c.breaker = circuit{threshold: int64(failures), cooldown: int64(cooldown)}
	}
}

// circuit is a lock-free breaker. Times are nanoseconds on the Limiter's
// monotonic clock (since its epoch).
type circuit struct {
	threshold, cooldown int64
	failures            atomic.Int64
	streak              atomic.Int64 // when the current run of failures began
	everOK              atomic.Bool  // some call has succeeded
	openUntil           atomic.Int64 // 0: closed
	probing             atomic.Bool  // a probe is in flight
}

// allow reports whether the store may be asked now; probe is true when the
// call is the single probe of a half-open circuit. now is read only when
// the circuit is not closed.
func (c *circuit) allow(now func() int64) (ok, probe bool) {
	if c.threshold == 0 {
		return true, false
	}
	until := c.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now() < until {
		return false, false
	}
	if c.probing.CompareAndSwap(false, true) {
		return true, true
	}
	return false, false
}

// record notes the outcome of a store call. It reports whether this call
// opened the circuit. A success reads no clock: "no success within the
// cooldown" is "the current run of failures began at least a cooldown
// ago", since any success ends the run.
func (c *circuit) record(now func() int64, ok, probe bool) (opened bool) {
	if c.threshold == 0 {
		return false
	}
	if ok {
		if c.failures.Load() != 0 {
			c.failures.Store(0)
		}
		if !c.everOK.Load() {
			c.everOK.Store(true)
		}
		if c.openUntil.Load() != 0 {
			c.openUntil.Store(0)
		}
		if probe {
			c.probing.Store(false)
		}
		return false
	}
	t := now()
	n := c.failures.Add(1)
	if n == 1 {
		c.streak.Store(t)
	}
	if probe {
		c.openUntil.Store(t + c.cooldown)
		c.probing.Store(false)
		return false
	}
	quiet := !c.everOK.Load() || t-c.streak.Load() >= c.cooldown
	if n >= c.threshold && quiet && c.openUntil.Load() == 0 {
		return c.openUntil.CompareAndSwap(0, t+c.cooldown)
	}
	return false
}

// open reports whether the circuit is open (not closed) now.
func (c *circuit) open() bool { return c.threshold != 0 && c.openUntil.Load() != 0 }

func circuitErr(cooldown int64) error {
	return fmt.Errorf("ratelimit: store: %w (skipping it for up to %s after repeated failures)", ErrCircuitOpen, time.Duration(cooldown))
}
