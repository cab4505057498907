package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// How a request ends: execute runs a served request and finishes it by
// outcome (a refund, a settle, its slots released). Slots of Concurrent
// limits: a charge that holds them releases them once, at the store that
// made it; a served request renews them every quarter lease while it runs.

// holdsSlots reports whether the charge rc holds slots of Concurrent
// limits.
func holdsSlots(rc Receipt) bool { return rc.Policy != nil && rc.Policy.layout.Slots }

// release frees the slots the charge rc holds, once, whoever asks.
func (dc *decider) release(ctx context.Context, r *http.Request, rc Receipt) error {
	if !holdsSlots(rc) || rc.c != nil && !rc.c.released.CompareAndSwap(false, true) {
		return nil
	}
	by := chargedBy(rc)
	rl, ok := dc.storeOf(by).(releaser)
	if !ok {
		return fmt.Errorf("ratelimit: Release: the store (%T) cannot release slots: %w", dc.storeOf(by), errors.ErrUnsupported)
	}
	held := rc.holding()
	return dc.op(ctx, r, rc.Policy, by, "release", func(ctx context.Context) error { return rl.Release(ctx, held) })
}

// renew records the slots of rc anew; the receipt of the renewal holds
// them from then on (Receipt.holding). A failure goes to the hooks and the
// log: the slot then counts what is left of its lease.
func (dc *decider) renew(ctx context.Context, r *http.Request, rc Receipt) {
	by := chargedBy(rc)
	rl, ok := dc.storeOf(by).(releaser)
	if !ok || rc.c == nil {
		return
	}
	_ = dc.op(ctx, r, rc.Policy, by, "renew", func(ctx context.Context) error {
		n, err := rl.Renew(ctx, rc.holding())
		if err == nil && n.Policy != nil {
			n = n.claimed(by == byFallback)
			rc.c.renewed.Store(&n)
		}
		return err
	})
}

// holdSlots renews the slots the charge rc holds every quarter lease until
// the returned function is called, which stops the renewals and then
// releases the slots (the lifecycle calls it when its request ends).
func (dc *decider) holdSlots(ctx context.Context, r *http.Request, rc Receipt) func() {
	if !holdsSlots(rc) {
		return func() {}
	}
	var lease time.Duration
	for _, lim := range rc.Policy.limits {
		if lim.Concurrent {
			lease = lim.Period
		}
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(lease / 4) // a slot counts at least half a lease
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				dc.renew(ctx, r, rc)
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped // no renewal after the release
		_ = dc.release(ctx, r, rc)
	}
}

// execute runs an admitted request and finishes it by outcome: its slots of
// Concurrent limits are held while run runs (also when it panics) and
// released after; the charge goes back when WithRefundIf says so or a
// Limiter inside refused the request, or is settled to WithCostAfter's
// cost. run returns the status the client got and the bytes of body it
// wrote. A run that panics keeps its charge as it was.
func (f *journey) execute(run func() (status int, written int64)) {
	l, rc := f.l, f.res.Decision.Receipt
	defer l.holdSlots(f.ctx, f.req, rc)()
	status, written := run()
	switch {
	case f.frame.refused.Load():
		_ = l.refund(f.ctx, f.req, rc)
	case l.refundIf != nil && l.refundIf(f.req, status):
		_ = l.refund(f.ctx, f.req, rc)
	case l.costAfter != nil:
		_ = l.settle(f.ctx, f.req, rc, min(max(l.costAfter(f.req, status, written), 0), MaxSettle))
	}
}
