package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/store/storekit"
)

// clocked is a store under test on the scenario's clock.
type clocked struct {
	s   ratelimit.Store
	set func(time.Time)
}

// reservingAlgorithms are the algorithms whose policies reserve a place in
// line (every limit an exact log, or the token bucket).
var reservingAlgorithms = []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.SlidingLog, ratelimit.TokenBucket}

// reserveStep is one call of a reservation scenario: at ms after t0, an
// operation on keys with a cost, and what it must answer.
type reserveStep struct {
	at      int64 // ms after t0
	op      int   // opTake, opUpTo, opReserve or opRefund
	keys    []string
	cost    int64
	ref     int   // opRefund: the step whose receipt is refunded
	allowed bool  // want
	granted int64 // want (opUpTo)
	delayMS int64 // want (opReserve), -1: not checked
	remain  int64 // want Remaining when ≥ 0
}

func runReserveSteps(t *testing.T, cs clocked, p *ratelimit.Policy, steps []reserveStep) {
	t.Helper()
	ctx := context.Background()
	receipts := make([]ratelimit.Receipt, len(steps))
	for i, s := range steps {
		cs.set(t0.Add(time.Duration(s.at) * time.Millisecond))
		req := ratelimit.Request{Policy: p, Keys: s.keys, Cost: s.cost}
		var d ratelimit.Decision
		var err error
		switch s.op {
		case opUpTo:
			d, err = cs.s.(storekit.Granter).TakeUpTo(ctx, req)
		case opReserve:
			d, err = cs.s.(storekit.Reserver).Reserve(ctx, req, time.Hour)
		case opRefund:
			if err := cs.s.(storekit.Refunder).Refund(ctx, receipts[s.ref]); err != nil {
				t.Fatalf("step %d: refund: %v", i, err)
			}
			continue
		default:
			d, err = cs.s.Take(ctx, req)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		receipts[i] = d.Receipt
		if d.Allowed != s.allowed {
			t.Fatalf("step %d (+%dms %q cost %d): allowed %v, want %v: %+v", i, s.at, s.keys, s.cost, d.Allowed, s.allowed, d)
		}
		if s.op == opUpTo && d.Granted != s.granted {
			t.Fatalf("step %d: granted %d, want %d", i, d.Granted, s.granted)
		}
		if s.op == opReserve && s.delayMS >= 0 && d.Delay != time.Duration(s.delayMS)*time.Millisecond {
			t.Fatalf("step %d: delay %s, want %dms", i, d.Delay, s.delayMS)
		}
		if s.remain >= 0 && d.Remaining != s.remain {
			t.Fatalf("step %d: remaining %d, want %d: %+v", i, d.Remaining, s.remain, d)
		}
	}
}

// twoKeyReservation: key b is full, key a has room; a
// reservation for a and b waits for b's turn at +1s and counts on a from
// then. a's own charge at +0.2s must not make that reservation look older
// than it is: at +1.25s a holds one unit of the last second (+1s) besides
// the one at +0.2s that just left, so a cost of 2 is denied, a grant of up
// to 2 gets 1, and a peek reports 1 left.
func twoKeyReservation(t *testing.T, h Harness) {
	for _, alg := range []ratelimit.Algorithm{ratelimit.SlidingWindow, ratelimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			s, clk := h.start(t)
			cs := clocked{s: s, set: clk.Set}
			p := ratelimit.MustParsePolicy("2/s", ratelimit.WithAlgorithm(alg), ratelimit.Named(fmt.Sprintf("two%d", alg)))
			a, b := "a:"+t.Name(), "b:"+t.Name()
			runReserveSteps(t, cs, p, []reserveStep{
				{at: 0, keys: []string{b}, cost: 2, allowed: true, remain: -1},
				{at: 0, op: opReserve, keys: []string{a, b}, cost: 1, allowed: true, delayMS: 1000, remain: -1},
				{at: 200, keys: []string{a}, cost: 1, allowed: true, remain: 0},
				{at: 1250, keys: []string{a}, cost: 0, allowed: true, remain: 1},
				{at: 1250, keys: []string{a}, cost: 2, allowed: false, remain: -1},
				{at: 1250, op: opUpTo, keys: []string{a}, cost: 2, allowed: true, granted: 1, remain: 0},
				{at: 1250, keys: []string{a}, cost: 1, allowed: false, remain: -1},
			})
		})
	}
}

// cancelledWaiters pins what a reservation given
// back (a waiter that left) returns, whatever its place in line:
//   - 32 waiters on a full 4/2s key, all cancelled: the key is as if they
//     had never come (free again when its own units leave, at +2s);
//   - three waiters on 1/s, the middle one cancelled: the others keep
//     their turns, a newcomer queues behind the last one still in line;
//     once that one leaves too, the newcomer gets the middle one's turn;
//   - a reservation on two keys, cancelled: the key that had room has it
//     back at once.
func cancelledWaiters(t *testing.T, h Harness) {
	for _, alg := range reservingAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s, clk := h.start(t)
			cs := clocked{s: s, set: clk.Set}
			name := fmt.Sprintf("cancel%d", alg)
			k := "k:" + t.Name()
			// All 32 cancelled, in an order that is neither first nor
			// last: k must then answer as k2, which never had waiters.
			p := ratelimit.MustParsePolicy("4/2s", ratelimit.WithAlgorithm(alg), ratelimit.Named(name))
			k2 := "k2:" + t.Name()
			steps := []reserveStep{
				{at: 0, keys: []string{k}, cost: 4, allowed: true, remain: 0},
				{at: 0, keys: []string{k2}, cost: 4, allowed: true, remain: 0},
			}
			for i := 0; i < 32; i++ {
				steps = append(steps, reserveStep{at: 10, op: opReserve, keys: []string{k}, cost: 1, allowed: true, delayMS: -1, remain: -1})
			}
			for _, i := range []int{5, 17, 2, 32, 9, 33, 31, 16, 3, 4, 6, 7, 8, 10, 11, 12, 13, 14, 15, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30} {
				steps = append(steps, reserveStep{at: 100, op: opRefund, ref: i})
			}
			runReserveSteps(t, cs, p, steps)
			for _, at := range []int64{100, 499, 500, 1999, 2000} {
				cs.set(t0.Add(time.Duration(at) * time.Millisecond))
				got, want := mustTake(t, cs.s, p, 0, k), mustTake(t, cs.s, p, 0, k2)
				got.Receipt, want.Receipt = ratelimit.Receipt{}, ratelimit.Receipt{}
				for i := range got.Limits {
					got.Limits[i].Key, want.Limits[i].Key = 0, 0
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("+%dms: after every waiter left, the key answers %+v; one that never had waiters %+v", at, got, want)
				}
			}

			// Three waiters on 1/s, the middle one cancelled.
			p1 := ratelimit.MustParsePolicy("1/s", ratelimit.WithAlgorithm(alg), ratelimit.Named(name+"b"))
			runReserveSteps(t, cs, p1, []reserveStep{
				{at: 0, keys: []string{k}, cost: 1, allowed: true, remain: -1},
				{at: 0, op: opReserve, keys: []string{k}, cost: 1, allowed: true, delayMS: 1000, remain: -1},
				{at: 0, op: opReserve, keys: []string{k}, cost: 1, allowed: true, delayMS: 2000, remain: -1},
				{at: 0, op: opReserve, keys: []string{k}, cost: 1, allowed: true, delayMS: 3000, remain: -1},
				{at: 500, op: opRefund, ref: 2},
				{at: 500, op: opReserve, keys: []string{k}, cost: 1, allowed: true, delayMS: 3500, remain: -1},
				{at: 600, op: opRefund, ref: 5},
				{at: 600, op: opRefund, ref: 3},
				{at: 600, op: opReserve, keys: []string{k}, cost: 1, allowed: true, delayMS: 1400, remain: -1},
			})

			// Two keys, one with room, cancelled.
			a, b := "a:"+t.Name(), "b:"+t.Name()
			runReserveSteps(t, cs, p1, []reserveStep{
				{at: 0, keys: []string{b}, cost: 1, allowed: true, remain: -1},
				{at: 0, op: opReserve, keys: []string{a, b}, cost: 1, allowed: true, delayMS: 1000, remain: -1},
				{at: 100, op: opRefund, ref: 1},
				{at: 100, keys: []string{a}, cost: 1, allowed: true, remain: 0},
			})
		})
	}
}

// blockEveryWay: once a key is blocked (BlockFor), no
// way in admits it until the block ends: not a repeat of a request ID
// admitted before the block (on its own, or beside a key that has room),
// not a grant of part of a cost. And a grant of nothing for lack of room
// is a denial like any other: it starts the block.
func blockEveryWay(t *testing.T, h Harness) {
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s, clk := h.start(t)
			cs := clocked{s: s, set: clk.Set}
			p := ratelimit.MustParsePolicy("2/m", ratelimit.WithAlgorithm(alg), ratelimit.BlockFor(time.Hour), ratelimit.Named(fmt.Sprintf("blk%d", alg)))
			k, free := "k:"+t.Name(), "free:"+t.Name()
			steps := []struct {
				at      time.Duration
				keys    []string
				cost    int64
				id      string
				upTo    bool
				allowed bool
			}{
				{0, []string{k}, 1, "a", false, true},
				{0, []string{k}, 1, "b", false, true},
				{time.Second, []string{k}, 1, "", false, false}, // denied: the hour's block starts
				{2 * time.Second, []string{k}, 1, "a", false, false},
				{2 * time.Second, []string{k}, 1, "b", false, false},
				{2 * time.Second, []string{k, free}, 1, "a", false, false},
				{3 * time.Second, []string{k}, 2, "", true, false},
				{61 * time.Minute, []string{k}, 1, "", false, true}, // the block is over
			}
			for i, s := range steps {
				cs.set(t0.Add(s.at))
				req := ratelimit.Request{Policy: p, Keys: s.keys, Cost: s.cost, ID: s.id}
				var d ratelimit.Decision
				var err error
				if s.upTo {
					d, err = cs.s.(storekit.Granter).TakeUpTo(ctx, req)
				} else {
					d, err = cs.s.Take(ctx, req)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if d.Allowed != s.allowed || !s.allowed && (d.Repeated || d.Granted != 0) {
					t.Fatalf("step %d (+%s %q id %q): %+v, want allowed %v", i, s.at, s.keys, s.id, d, s.allowed)
				}
				if !s.allowed && i >= 3 && i < 7 && d.RetryAfter < 59*time.Minute {
					t.Fatalf("step %d: RetryAfter %s, want the block's hour", i, d.RetryAfter)
				}
			}

			// A grant of nothing for lack of room starts the block.
			g := "g:" + t.Name()
			cs.set(t0.Add(2 * time.Hour))
			mustTake(t, cs.s, p, 2, g)
			d, err := cs.s.(storekit.Granter).TakeUpTo(ctx, ratelimit.Request{Policy: p, Keys: []string{g}, Cost: 3})
			if err != nil || d.Allowed || d.Granted != 0 {
				t.Fatalf("grant on a full key: %+v, %v", d, err)
			}
			cs.set(t0.Add(2*time.Hour + 2*time.Minute)) // the window has room again, the block runs on
			if d := mustTake(t, cs.s, p, 1, g); d.Allowed || d.RetryAfter < 57*time.Minute {
				t.Fatalf("after a grant of nothing: %+v, want the block's hour", d)
			}
		})
	}
}
