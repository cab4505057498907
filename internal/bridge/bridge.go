// Package bridge carries what package ratelimit keeps unexported to the
// packages of store writers (store/storekit) and of this module's stores:
// a policy's layout, and the making and reading of receipts; and to
// internal/testkit/clientsim, a Limiter's clock. Package
// ratelimit fills it in at init; its values are typed loosely (any) only
// because ratelimit imports this package, so it cannot import ratelimit.
// Callers use the typed wrappers of store/storekit.
package bridge

import (
	"context"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

var (
	// Layout returns the layout of a *ratelimit.Policy.
	Layout func(policy any) *layout.Policy
	// Definition returns the name and a fingerprint of a
	// *ratelimit.Policy's whole definition, rates included.
	Definition func(policy any) string
	// NewReceipt returns the ratelimit.Receipt of a charge of cost,
	// under a *ratelimit.Policy, for keys, with the store's marks.
	NewReceipt func(policy any, keys []string, cost int64, marks []int64) any
	// ReadReceipt returns what NewReceipt was given (a nil policy for the
	// zero Receipt).
	ReadReceipt func(receipt any) (policy any, keys []string, cost int64, marks []int64)
	// CheckDecision reports a ratelimit.Decision that points outside its
	// ratelimit.Request.
	CheckDecision func(decision, request any) error
	// LeaseCounters returns the *ratelimit.Policy a Limiter leases a
	// leased *ratelimit.Policy's quota under, or a nil one.
	LeaseCounters func(policy any) any
	// SetClock gives a *ratelimit.Limiter the clock it reads and the
	// sleep it waits with (holding, Wait), so that a simulation moves its
	// own clock instead of sleeping.
	SetClock func(limiter any, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error)
)
