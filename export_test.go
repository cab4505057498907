package ratelimit

import (
	"context"
	"encoding/base64"
	"time"
)

// PK is the pk parameter value (an sf-binary, ":...:") the Limiter writes
// for the identity key.
func PK(key string) string {
	var b [pkLen]byte
	return ":" + base64.StdEncoding.EncodeToString(pkOf(&b, key)) + ":"
}

// SetLogClock replaces the clock of the log throttle of l and restarts the
// throttle, so tests can step through it without sleeping.
func SetLogClock(l *Limiter, now func() time.Time) { l.setClock(now) }

// SetSleep replaces how l waits (WithMaxDelay, Wait): tests make it move a
// simulated clock instead of sleeping.
func SetSleep(l *Limiter, sleep func(ctx context.Context, d time.Duration) error) { l.sleep = sleep }

// LeaseSlots is how many keys of leased policies l keeps state for.
func LeaseSlots(l *Limiter) int {
	l.leases.mu.Lock()
	defer l.leases.mu.Unlock()
	return len(l.leases.m)
}
