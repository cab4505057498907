package ratelimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
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
		c.breaker = breaker.Breaker{Threshold: int64(failures), Cooldown: int64(cooldown), Quiet: true}
	}
}

func circuitErr(cooldown int64) error {
	return fmt.Errorf("ratelimit: store: %w (skipping it for up to %s after repeated failures)", ErrCircuitOpen, time.Duration(cooldown))
}
