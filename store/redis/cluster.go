package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// takeCluster runs one request whose keys live in different slots: each
// key's script is its own command, all sent at once (one round trip in
// parallel). Every master's answer is awaited, up to three quarters of the
// budget, so that a denial reports the longest wait any master gave; masters
// that never answered are left out. Charges made for a request that is not
// admitted (or, granting, beyond the smallest grant), and the slots a
// denied request took, are given back before the call returns (one more
// round trip, on that path only); those of masters that answered late,
// off the request's path.
func (r *Store) takeCluster(ctx context.Context, req ratelimit.Request, o verdict.Call, prep *prepared, keys, idKeys []string, now int64) (ratelimit.Decision, error) {
	nl := len(plan.Layout(req.Policy).Limits)
	pctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		// End the calls at three quarters of the budget, leaving time to
		// answer with what the live masters said.
		var cancel context.CancelFunc
		pctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*3/4))
		defer cancel()
	}
	answers := make(chan keyAnswer, len(keys))
	for i := range keys {
		rid := r.resendID(ctx) // one per command: each is sent, and resent, on its own
		go func(i int) {
			ks := keys[i : i+1]
			if idKeys != nil {
				ks = []string{keys[i], idKeys[i]}
			}
			rep, err := r.runOnNode(pctx, prep.script, ks, prep.takeArgs(now, o, rid, idKeys != nil))
			err = resendErr(err)
			if err == nil {
				err = checkReply(rep, 1, nl)
			}
			answers <- keyAnswer{i, rep, err}
		}(i)
	}
	replies := make([][]int64, len(keys))
	var failed error
	pending := len(keys)
collect:
	for pending > 0 {
		var a keyAnswer
		select {
		case a = <-answers:
		case <-pctx.Done():
			select { // an answer that arrived with the deadline still counts
			case a = <-answers:
			default:
				break collect
			}
		}
		pending--
		if a.err != nil {
			failed = fmt.Errorf("ratelimit/store: redis: key %d: %w", a.i, a.err)
			continue
		}
		replies[a.i] = a.rep
	}
	denied, grant := false, o.Cost
	for _, rep := range replies {
		if rep == nil {
			continue
		}
		if rep[rAllowed] == 0 {
			denied = true
		}
		grant = min(grant, rep[rGranted])
	}
	allowed := !denied && failed == nil && pending == 0
	// Give back what the request was charged and will not use, and the
	// slots it will not hold.
	refunds := &refunder{r: r, pol: req.Policy, release: !allowed && plan.Layout(req.Policy).Slots}
	for ki, rep := range replies {
		if rep == nil {
			continue
		}
		part := rep[rHeader:]
		if part[0] != kindCharged {
			continue
		}
		back := rep[rGranted]
		if allowed {
			back -= grant
		}
		if back <= 0 {
			continue
		}
		m := make([]int64, 0, 2+nl)
		m = append(m, part[1], part[2])
		for i := 0; i < nl; i++ {
			m = append(m, limitAt(part, i)[lMark])
		}
		refunds.add(keys[ki], back, slices.Clone(m))
		// Report this key as if it had not been charged what comes back;
		// its receipt's TATs are those after the grant alone.
		lay := plan.Layout(req.Policy)
		for i := 0; i < nl; i++ {
			limitAt(part, i)[lRemaining] += back
			if l := lay.Limits[i]; l.Kind == layout.Token {
				limitAt(part, i)[lMark] -= back * l.Width
			}
		}
		if !allowed {
			part[0] = kindDecided
		}
		rep[rGranted] -= back
	}
	if len(refunds.keys) > 0 {
		// All or nothing in the same store call: what the answered
		// masters charged and the request will not use goes back before
		// the call returns, within its budget. A give-back that fails
		// is not sent again (its outcome is unknown: a second refund
		// could take another charge's units): the units stay charged
		// and a slot lapses after its lease, which never over-admits.
		gctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			gctx, cancel = context.WithTimeout(ctx, refundTimeout)
			defer cancel()
		}
		refunds.send(gctx)
	}
	if pending > 0 {
		// Masters that had not answered by three quarters of the budget
		// may still charge: their answers are awaited off the request's
		// path and given back.
		late := &refunder{r: r, pol: req.Policy, release: refunds.release}
		r.refunds.Add(1)
		go func() {
			defer r.refunds.Done()
			late.run(answers, pending, keys, nl)
		}()
	}
	if !denied && (failed != nil || pending > 0) {
		if failed == nil {
			failed = fmt.Errorf("ratelimit/store: redis: %d of %d keys got no answer: %w", pending, len(keys), context.DeadlineExceeded)
		}
		return ratelimit.Decision{}, failed // no key denied, some could not decide
	}
	var got [][]int64
	var gotKeys []string
	for ki, rep := range replies {
		if rep != nil {
			if !allowed {
				rep[rAllowed] = 0
			}
			rep[rGranted] = grant
			got = append(got, rep)
			gotKeys = append(gotKeys, req.Keys[ki])
		}
	}
	sub := req
	sub.Keys = gotKeys
	d := decide(sub, got, nl)
	// Indexes refer to the request's keys, not to those that answered.
	remap := make([]int, 0, len(gotKeys))
	for ki, rep := range replies {
		if rep != nil {
			remap = append(remap, ki)
		}
	}
	d.Key = remap[d.Key]
	for i := range d.Limits {
		d.Limits[i].Key = remap[d.Limits[i].Key]
	}
	if !allowed {
		d.Granted, d.Receipt = 0, ratelimit.Receipt{}
	}
	return d, nil
}

// keyAnswer is one key's script reply in a Redis Cluster request.
type keyAnswer struct {
	i   int
	rep []int64
	err error
}

// refundTimeout bounds the give-back of a Cluster request called without
// a deadline, and the refunds of late answers, off the request's path.
const refundTimeout = 2 * time.Second

// refunder takes back charges a Cluster request will not use, and with
// release the slots of a request not admitted.
type refunder struct {
	r       *Store
	pol     *ratelimit.Policy
	release bool
	keys    []string
	costs   []int64
	marks   [][]int64
}

func (f *refunder) add(key string, cost int64, marks []int64) {
	f.keys = append(f.keys, key)
	f.costs = append(f.costs, cost)
	f.marks = append(f.marks, marks)
}

// run waits, off the request's path, for the answers still pending (those
// that charged are refunded too: the request did not wait for them), then
// gives them back.
func (f *refunder) run(answers <-chan keyAnswer, pending int, keys []string, nl int) {
	ctx, cancel := context.WithTimeout(context.Background(), refundTimeout)
	defer cancel()
	for ; pending > 0; pending-- {
		select {
		case a := <-answers:
			if a.err == nil && a.rep[rHeader] == kindCharged && a.rep[rGranted] > 0 {
				m := []int64{a.rep[rHeader+1], a.rep[rHeader+2]}
				for i := 0; i < nl; i++ {
					m = append(m, limitAt(a.rep[rHeader:], i)[lMark])
				}
				f.add(keys[a.i], a.rep[rGranted], m)
			}
		case <-ctx.Done():
			return
		}
	}
	f.send(ctx)
}

// send refunds every charge added and, with release, frees their slots:
// the refunds of every key sent together, then the releases.
func (f *refunder) send(ctx context.Context) {
	if len(f.keys) == 0 {
		return
	}
	prep := f.r.scripts.prepare(f.pol, f.r.ttlExtra.Milliseconds())
	runEach(ctx, f.r.client, prep.script, f.keys, func(i int) []any {
		return prep.refundArgs(f.r.nowUS(), f.costs[i], f.marks[i])
	})
	if f.release {
		runEach(ctx, f.r.client, prep.script, f.keys, func(i int) []any {
			return prep.slotArgs(f.r.nowUS(), false, f.marks[i])
		})
	}
}
