package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Observer receives what a Limiter does, for metrics and traces: every
// decision with its outcome, every store call with its latency and error,
// and every change of the store's circuit. Subscribe any number with
// WithObserver; the metrics modules (metrics/prometheus, metrics/otel) are
// Observers. Methods are called on the request's goroutine, synchronously:
// they must be quick and safe for concurrent use. A panic in one reaches
// net/http (or the caller of Allow), after the Limiter has recorded what it
// must (see the README on panics).
type Observer interface {
	// ObserveDecision is called once per decided request: after the store
	// (or fallback, or failure mode) decided, before the response is
	// written. Requests that no identifier applies to, and skipped
	// requests (WithSkip), are not decided.
	ObserveDecision(DecisionEvent)
	// ObserveStore is called after every store call the Limiter makes
	// (Take, Reserve, TakeUpTo, Refund, Reset, Settle, Release, Renew),
	// answered or not, and when
	// the circuit answers instead of the store (Err wraps ErrCircuitOpen,
	// Duration 0).
	ObserveStore(StoreEvent)
	// ObserveCircuit is called when the store's circuit opens or closes.
	ObserveCircuit(CircuitEvent)
}

// DecisionEvent describes one decided request.
type DecisionEvent struct {
	// Request is the HTTP request; nil for Allow, AllowN, Wait, WaitN and
	// AllowUpTo.
	Request *http.Request
	// Result is the Limiter's Result, as handlers read it (FromContext).
	Result Result
	// Outcome is what happened to the request.
	Outcome Outcome
	// Fallback reports that the fallback store decided (WithFallback, or
	// the store's own: FallbackStore), the main store having failed.
	Fallback bool
	// Held is how long the request was held for its turn (WithMaxDelay)
	// before it was served (Allowed), refused after all (Denied) or its
	// client left (Abandoned); 0 when it was not held.
	Held time.Duration
	// HoldFull reports a request that would have been held, refused at
	// once because MaxHeld requests were held already (WithMaxHeld).
	HoldFull bool
	// Hold is what became of a held request, as a metric label:
	// "served", "refused" (still denied at the end of its hold),
	// "gave_up" (Abandoned) or "queue_full" (HoldFull); "" when the
	// request was not held.
	Hold string
}

// StoreEvent describes one store call.
type StoreEvent struct {
	// Policy is the policy of the call.
	Policy *Policy
	// Op is the operation: "take", "reserve", "take_up_to", "lease" (a
	// grant of a leased policy, WithLease), "refund", "reset", "settle",
	// "release" or "renew".
	Op string
	// Fallback reports a call to the fallback store, not the main one.
	Fallback bool
	// Duration is how long the call took (0 when the circuit answered).
	Duration time.Duration
	// Err is the call's error, nil when it succeeded. Its text is for logs:
	// it may carry server addresses, never keys.
	Err error
	// ErrorKind classifies Err for metric labels: "" (no error),
	// "timeout" (the store did not answer within the Limiter's timeout),
	// "circuit_open", "invalid_request", "unsupported" or "error"
	// (anything else: connection errors, error replies, a Cluster
	// master's open circuit).
	ErrorKind string
}

// errorKind is StoreEvent.ErrorKind for err.
func errorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrInvalidRequest):
		return "invalid_request"
	case errors.Is(err, errors.ErrUnsupported):
		return "unsupported"
	}
	return "error"
}

// CircuitEvent describes a change of the store's circuit (see
// WithCircuitBreaker).
type CircuitEvent struct {
	// Open is true when the circuit opened (the store is skipped), false
	// when it closed (a probe got an answer).
	Open bool
	// Cooldown is how long the store is skipped before a probe.
	Cooldown time.Duration
}

// holdOf is DecisionEvent.Hold for a request of outcome o held for held
// (0: not held), or refused at once with MaxHeld held (full).
func holdOf(o Outcome, held time.Duration, full bool) string {
	switch {
	case full:
		return "queue_full"
	case held <= 0:
		return ""
	case o == Abandoned:
		return "gave_up"
	case o == Denied || o == FailedClosed:
		return "refused"
	}
	return "served"
}
