// Package breaker is the circuit breaker shared by the Limiter (around its
// whole store) and the Redis store (around each Cluster master).
package breaker

import "sync/atomic"

// Breaker is a lock-free circuit breaker. Times are nanoseconds on a clock
// of the caller's choosing (never 0 while in use), read only when needed.
//
// It opens after Threshold consecutive failures; with Quiet, only once the
// run of failures spans at least Cooldown, or at once if no call has ever
// succeeded. While open, calls are refused until Cooldown has passed; then
// exactly one call, the probe, goes through. A success closes the circuit;
// a failed probe opens it for another Cooldown. Only the probe's outcome
// ends the probe, and late failures of calls made before the circuit
// opened do not stretch the cooldown. Threshold 0 turns it off.
type Breaker struct {
	Threshold int64
	Cooldown  int64
	Quiet     bool

	failures  atomic.Int64
	streak    atomic.Int64 // when the current run of failures began
	everOK    atomic.Bool  // some call has succeeded
	openUntil atomic.Int64 // 0: closed
	probing   atomic.Bool  // a probe is in flight
}

// Allow reports whether a call may go out now; probe is true when the call
// is the single probe of a half-open circuit. now is read only when the
// circuit is not closed.
func (b *Breaker) Allow(now func() int64) (ok, probe bool) {
	if b.Threshold == 0 {
		return true, false
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if now() < until {
		return false, false
	}
	if b.probing.CompareAndSwap(false, true) {
		return true, true
	}
	return false, false
}

// Change is what a recorded outcome did to the circuit.
type Change uint8

const (
	Unchanged Change = iota
	Opened           // this failure opened the circuit
	Closed           // this success closed an open circuit (a probe, or a call that began before it opened)
)

// Record notes the outcome of a call that Allow let through (probe as Allow
// said), and reports whether it opened or closed the circuit. A success
// reads no clock: "no success within the cooldown" is "the current run of
// failures began at least a cooldown ago", since any success ends the run.
func (b *Breaker) Record(now func() int64, ok, probe bool) Change {
	if b.Threshold == 0 {
		return Unchanged
	}
	if ok {
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
		if !b.everOK.Load() {
			b.everOK.Store(true)
		}
		closed := false
		if until := b.openUntil.Load(); until != 0 {
			closed = b.openUntil.CompareAndSwap(until, 0)
		}
		if probe {
			b.probing.Store(false)
		}
		if closed {
			return Closed
		}
		return Unchanged
	}
	t := now()
	n := b.failures.Add(1)
	if n == 1 {
		b.streak.Store(t)
	}
	if probe {
		b.openUntil.Store(t + b.Cooldown)
		b.probing.Store(false)
		return Unchanged
	}
	quiet := !b.Quiet || !b.everOK.Load() || t-b.streak.Load() >= b.Cooldown
	if n >= b.Threshold && quiet && b.openUntil.Load() == 0 && b.openUntil.CompareAndSwap(0, t+b.Cooldown) {
		return Opened
	}
	return Unchanged
}

// Forget notes a call whose outcome says nothing of the callee (cancelled
// by the caller, or the caller's own bug): the run of failures neither
// ends nor grows, and a probe is released for the next call.
func (b *Breaker) Forget(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}

// Open reports whether the circuit is open (not closed) now.
func (b *Breaker) Open() bool { return b.Threshold != 0 && b.openUntil.Load() != 0 }
