package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Release frees the slots d's charge holds in the policy's Concurrent
// limits, for every key, in one store call to the store that made the
// charge, so that another request can start. The Handler releases a
// request's slots when its handler returns (also on a panic, and when the
// client left), renewing them every quarter lease while it runs; Release
// is for requests decided outside HTTP (Allow, AllowN, WaitN), which are
// not renewed: release within half the lease (Limit.Period of the
// Concurrent limit), or the slot lapses by itself within the lease. A charge
// is released at most once in a process, whoever asks; a Decision that
// charged nothing, or of a policy without a Concurrent limit, releases
// nothing and returns nil. A Refund or Settle of the charge does not free
// its slots. The store must be a Releaser (the memory and Redis stores
// are), else the error wraps errors.ErrUnsupported. A store failure is
// returned as is: the slot then lapses after its lease.
func (l *Limiter) Release(ctx context.Context, d Decision) error {
	if ctx == nil {
		ctx = context.Background()
	}
	return l.release(ctx, nil, d.Receipt)
}

// holdsSlots reports whether the charge rc holds slots of Concurrent
// limits.
func holdsSlots(rc Receipt) bool {
	p := rc.policy()
	return p != nil && p.layout.Slots
}

func (l *Limiter) release(ctx context.Context, r *http.Request, rc Receipt) error {
	if !holdsSlots(rc) || !rc.r.released.CompareAndSwap(false, true) {
		return nil
	}
	s := l.charger(rc)
	rl, ok := s.(Releaser)
	if !ok {
		return fmt.Errorf("ratelimit: Release: the store (%T) cannot release slots: %w", s, errors.ErrUnsupported)
	}
	held := rc.holding()
	return l.op(ctx, r, rc.policy(), l.which(s), "release", func(ctx context.Context) error { return rl.Release(ctx, held) })
}

// renew records the slots of rc anew; the receipt of the renewal holds
// them from then on (Receipt.holding). A failure goes to the hooks and the
// log: the slot then counts what is left of its lease.
func (l *Limiter) renew(r *http.Request, rc Receipt) {
	s := l.charger(rc)
	rl, ok := s.(Releaser)
	if !ok {
		return
	}
	_ = l.op(r.Context(), r, rc.policy(), l.which(s), "renew", func(ctx context.Context) error {
		n, err := rl.Renew(ctx, rc.holding())
		if err == nil && n.r != nil && n.r != rc.holding().r {
			rc.r.renewed.Store(n.r)
		}
		return err
	})
}

// holdSlots renews the slots the charge rc holds every quarter lease until
// the returned function is called, which stops the renewals and then
// releases the slots (the Handler calls it when the handler returns).
func (l *Limiter) holdSlots(r *http.Request, rc Receipt) func() {
	if !holdsSlots(rc) {
		return func() {}
	}
	var lease time.Duration
	for _, lim := range rc.policy().limits {
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
				l.renew(r, rc)
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped // no renewal after the release
		_ = l.release(r.Context(), r, rc)
	}
}
