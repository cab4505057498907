package ratelimit

// Outcome is what a Limiter did with one request.
type Outcome uint8

const (
	// Allowed: admitted and charged.
	Allowed Outcome = iota
	// Denied: refused (429), nothing charged.
	Denied
	// DryRunDenied: would have been denied; served (WithDryRun).
	DryRunDenied
	// FailedOpen: no store could decide; served (FailOpen).
	FailedOpen
	// FailedClosed: no store could decide; refused (FailClosed, 503).
	FailedClosed
	// Abandoned: the client left while its request was held for its
	// turn (WithMaxDelay): its place was given back, nothing served.
	// Observers see it; the decision hook does not (no store decided).
	Abandoned
)

// String returns the outcome as a metric label: "allowed", "denied",
// "dry_run_denied", "failed_open", "failed_closed" or "abandoned".
func (o Outcome) String() string { return enumName(outcomeNames, uint8(o), "outcome") }

var outcomeNames = []string{"allowed", "denied", "dry_run_denied", "failed_open", "failed_closed", "abandoned"}
