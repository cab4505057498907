package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/breaker"
)

// What a Limiter does when its store fails: the failure mode, the
// timeout and circuit breaker that bound what a failing store costs a
// request, and the log that tells an operator the story of an outage.

// FailureMode says what a Limiter does when it cannot get a decision: the
// store (and the fallback store, if any) failed or did not answer within
// the timeout. Set it with WithFailureMode.
type FailureMode uint8

const (
	// FailOpen lets the request through, without rate-limit headers: an
	// outage of the store does not become an outage of the service, but
	// leaves the routes unlimited while it lasts. The error goes to the
	// error hook and the outage to the log (see WithLogger). Only
	// WithFailureMode(FailOpen) chooses it.
	FailOpen FailureMode = iota
	// FailClosed answers 503 Service Unavailable with "Retry-After: 1",
	// "Cache-Control: no-store" and a problem document of the type
	// UnavailableProblemType that reveals nothing of the error. A request
	// of cost 0 is served all the same. Allow and AllowN report the
	// request denied, with a RetryAfter of one second. It is the default
	// when no fallback store can decide (see WithFailureMode).
	FailClosed
)

// String returns "fail-open" or "fail-closed".
func (m FailureMode) String() string { return enumName(failureModeNames, uint8(m), "failure-mode") }

var failureModeNames = []string{"fail-open", "fail-closed"}

// failClosedRetryAfter is the Retry-After of the 503 answered by
// FailClosed, and the RetryAfter of its Decision: store outages are
// usually short, and the limiter gives up on a store within its timeout,
// so a client may try again soon.
const failClosedRetryAfter = time.Second

// The outage log: what an operator reads of the store's failures. The
// error hook and the observers get every error; the log tells the story of
// an outage in a few lines:
//
//   - one line (level Error) when the store starts failing: the error, and
//     what the Limiter does meanwhile;
//   - while it lasts, at most one summary every outageSummaryEvery (level
//     Warn), with the counts since the previous line;
//   - one line (level Info) once the store has answered for outageSettle
//     without failing: the outage's length, from its first failure to the
//     first answer after its last, and how many requests the fallback
//     decided, passed unlimited or refused.
//
// An outage is a run of failures of the store (or of the fallback store),
// skipped calls of the open circuit included, that no outageSettle of
// answers interrupts: a store that fails for some keys and answers for
// others (a Cluster with a master down) is one outage until it answers for
// all. The lines are written by the requests themselves (no goroutine
// runs): the recovery line by the first request that finds the store
// answering for outageSettle.
//
// Caller's mistakes (a cost above the policy's capacity, an invalid
// request, an operation the store lacks) are no outage: they are logged at
// most once every mistakeLogEvery, with the count of those left unlogged.

const (
	// outageSummaryEvery is the least time between two lines of one outage.
	outageSummaryEvery = time.Minute
	// outageSettle is how long the store must answer without failing
	// before its outage is over.
	outageSettle = time.Second
	// mistakeLogEvery is the least time between two logs of a caller's
	// mistake.
	mistakeLogEvery = time.Minute
)

// noStreak is outageLog.okSince while the store has not answered since
// its last failure.
const noStreak = math.MinInt64

// outageLog is the state of a Limiter's outage log. Times are nanoseconds
// since the Limiter's epoch (decider.sinceEpoch). The hot path reads one
// atomic (active) when the store answers; counting is atomic; the lock is
// taken only to begin, summarize or end an outage.
type outageLog struct {
	// What the log tells, set by New: where it writes, and what the
	// Limiter does while the store fails.
	logger   *slog.Logger
	mode     FailureMode
	fallback bool
	breaker  *breaker.Breaker

	active   atomic.Bool
	okSince  atomic.Int64 // when the store's current run of answers began; noStreak
	lastLine atomic.Int64 // when the latest line of the outage was written
	lastErr  atomic.Pointer[error]
	n        outageCounters // since the Limiter was built

	mu      sync.Mutex
	start   int64        // when the outage began
	atStart outageCounts // n when it began
	atLine  outageCounts // n at its latest line

	lastMistake    atomic.Int64
	mistakesUnseen atomic.Int64
}

// outageCounters count, since the Limiter was built, the store's failures
// and answers and the decisions made without it.
type outageCounters struct {
	failed    atomic.Int64 // store calls that failed (or timed out)
	skipped   atomic.Int64 // calls the open circuit kept from the store
	answered  atomic.Int64 // store calls answered during an outage
	fallback  atomic.Int64 // decisions of the fallback store
	unlimited atomic.Int64 // requests passed unlimited (FailOpen)
	refused   atomic.Int64 // requests refused (FailClosed)
}

// outageCounts is a reading of outageCounters.
type outageCounts struct{ failed, skipped, answered, fallback, unlimited, refused int64 }

func (c *outageCounters) read() outageCounts {
	return outageCounts{c.failed.Load(), c.skipped.Load(), c.answered.Load(),
		c.fallback.Load(), c.unlimited.Load(), c.refused.Load()}
}

func (c outageCounts) minus(o outageCounts) outageCounts {
	return outageCounts{c.failed - o.failed, c.skipped - o.skipped, c.answered - o.answered,
		c.fallback - o.fallback, c.unlimited - o.unlimited, c.refused - o.refused}
}

// restart forgets any outage in progress: for a new clock
// (decider.setClock).
func (o *outageLog) restart() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active.Store(false)
	o.okSince.Store(noStreak)
	o.lastMistake.Store(-int64(mistakeLogEvery)) // the first mistake is logged
	o.mistakesUnseen.Store(0)
}

// tally counts a decision the store did not make.
func (o *outageLog) tally(by decidedBy, outcome Outcome) {
	switch {
	case by == byFallback:
		o.n.fallback.Add(1)
	case outcome == FailedOpen:
		o.n.unlimited.Add(1)
	case outcome == FailedClosed:
		o.n.refused.Add(1)
	}
}

// storeFailed counts a failure at now of the store by names (byStore or
// byFallback), beginning an outage or writing its summary when one is due.
func (o *outageLog) storeFailed(ctx context.Context, now int64, by decidedBy, p *Policy, err error) {
	if o.okSince.Load() != noStreak {
		o.okSince.Store(noStreak)
	}
	skipped := errors.Is(err, ErrCircuitOpen)
	if !skipped {
		o.lastErr.Store(&err)
	}
	if !o.active.Load() {
		o.open(ctx, now, by, p, err)
	}
	if skipped {
		o.n.skipped.Add(1)
	} else {
		o.n.failed.Add(1)
	}
	if now-o.lastLine.Load() >= int64(outageSummaryEvery) {
		o.summarize(ctx, now)
	}
}

// begin writes the line that says the store is failing, unless another
// request just did.
func (o *outageLog) open(ctx context.Context, now int64, by decidedBy, p *Policy, err error) {
	o.mu.Lock()
	if o.active.Load() {
		o.mu.Unlock()
		return
	}
	o.start = now
	o.atStart = o.n.read()
	o.atLine = o.atStart
	o.lastLine.Store(now)
	o.active.Store(true)
	o.mu.Unlock()
	// Who decides now, and what the failure mode does should that fail
	// too: "failure_mode=fail-closed" beside a fallback read as if the
	// process refused requests while its fallback decided them.
	decides := []slog.Attr{slog.String("deciding", "failure mode"), slog.String("failure_mode", o.mode.String())}
	if o.fallback {
		decides = []slog.Attr{slog.String("deciding", "fallback store"), slog.String("if_the_fallback_fails", o.mode.String())}
	}
	o.logger.LogAttrs(ctx, slog.LevelError, "ratelimit: store failing; "+o.action()+" until it answers again",
		slog.String("store", by.String()), slog.String("policy", policyName(p)),
		decides[0], decides[1], slog.Any("error", err))
}

// action says what the Limiter does while its store fails.
func (o *outageLog) action() string {
	switch {
	case o.fallback:
		return "deciding per process with the fallback store"
	case o.mode == FailClosed:
		return "refusing every request with 503 (FailClosed)"
	}
	return "admitting every request unlimited (FailOpen)"
}

// summarize writes the summary of the outage since its latest line,
// unless another request just did.
func (o *outageLog) summarize(ctx context.Context, now int64) {
	o.mu.Lock()
	last := o.lastLine.Load()
	if !o.active.Load() || now-last < int64(outageSummaryEvery) {
		o.mu.Unlock()
		return
	}
	n := o.n.read()
	c := n.minus(o.atLine)
	o.atLine = n
	o.lastLine.Store(now)
	length := now - o.start
	o.mu.Unlock()
	attrs := []slog.Attr{slog.Duration("outage", roundLog(length)), slog.Duration("since_last_line", roundLog(now-last))}
	attrs = append(attrs, c.attrs(true)...)
	attrs = append(attrs, slog.Bool("circuit_open", o.breaker.Open()))
	if e := o.lastErr.Load(); e != nil {
		attrs = append(attrs, slog.Any("error", *e))
	}
	o.logger.LogAttrs(ctx, slog.LevelWarn, "ratelimit: store still failing", attrs...)
}

// storeAnswered notes that the store answered at now, and ends the outage
// (with its line) once the store has answered for outageSettle without
// failing.
func (o *outageLog) storeAnswered(ctx context.Context, now int64) {
	if !o.active.Load() {
		return
	}
	o.n.answered.Add(1)
	since := o.okSince.Load()
	if since == noStreak {
		o.okSince.CompareAndSwap(noStreak, now)
		return
	}
	if now-since < int64(outageSettle) {
		return
	}
	o.mu.Lock()
	if !o.active.Load() {
		o.mu.Unlock()
		return
	}
	o.active.Store(false)
	c := o.n.read().minus(o.atStart)
	length := max(since-o.start, 0)
	o.mu.Unlock()
	attrs := append([]slog.Attr{slog.Duration("outage", roundLog(length))}, c.attrs(false)...)
	o.logger.LogAttrs(ctx, slog.LevelInfo, "ratelimit: store answers again", attrs...)
}

// attrs returns the counts as log attributes, the store's answers only
// when answered is set (a recovery line leaves them out: they are no news).
func (c outageCounts) attrs(answered bool) []slog.Attr {
	out := []slog.Attr{slog.Int64("failed", c.failed), slog.Int64("skipped", c.skipped)}
	if answered {
		out = append(out, slog.Int64("answered", c.answered))
	}
	return append(out, slog.Int64("fallback", c.fallback), slog.Int64("unlimited", c.unlimited), slog.Int64("refused", c.refused))
}

// roundLog rounds a length of time for the log: to the millisecond.
func roundLog(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }

// logMistake logs a caller's mistake at now at level Error, at most once
// every mistakeLogEvery, with the number left unlogged since the previous
// one.
func (o *outageLog) logMistake(ctx context.Context, now int64, p *Policy, err error) {
	last := o.lastMistake.Load()
	if now-last < int64(mistakeLogEvery) || !o.lastMistake.CompareAndSwap(last, now) {
		o.mistakesUnseen.Add(1)
		return
	}
	o.logger.LogAttrs(ctx, slog.LevelError, "ratelimit: misconfigured or invalid request",
		slog.String("policy", policyName(p)), slog.Any("error", err),
		slog.Int64("unlogged_since_last", o.mistakesUnseen.Swap(0)))
}

// policyName is p's name, or "" for none.
func policyName(p *Policy) string {
	if p == nil {
		return ""
	}
	return p.Name()
}

// decidedBy says who made a decision.
type decidedBy uint8

const (
	byStore       decidedBy = iota // the store
	byFallback                     // the fallback store, the store having failed
	byFailureMode                  // no store could decide: FailOpen or FailClosed
)

// String names the decider in errors and logs.
func (b decidedBy) String() string {
	switch b {
	case byFallback:
		return "fallback store"
	case byFailureMode:
		return "failure mode"
	}
	return "store"
}
