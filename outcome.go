package ratelimit

// Outcome is what a Limiter did with one request.
type Outcome uint8

// Allowed: admitted and charged.
const Allowed Outcome = 0

// Denied: refused (429), nothing charged.
const Denied Outcome = 1

// DryRunDenied: would have been denied; served (WithDryRun).
const DryRunDenied Outcome = 2

// FailedOpen: no store could decide; served (FailOpen).
const FailedOpen Outcome = 3

// FailedClosed: no store could decide; refused (FailClosed, 503).
const FailedClosed Outcome = 4

// String returns the outcome as a metric label: "allowed", "denied",
// "dry_run_denied", "failed_open" or "failed_closed".
func (o Outcome) String() string { return enumName(outcomeNames, uint8(o), "outcome") }

var outcomeNames = []string{"allowed", "denied", "dry_run_denied", "failed_open", "failed_closed"}
