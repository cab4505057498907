package ratelimit

import "time"

// SetLogClock replaces the clock of the log throttle of l and restarts the
// throttle, so tests can step through it without sleeping.
func SetLogClock(l *Limiter, now func() time.Time) { l.setClock(now) }
