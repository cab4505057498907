package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// A batch of queued calls (batch.go) sends the common calls of a baked
// policy ('f': a plain Take) as script runs ('m', or 'u' for calls alike)
// of up to maxMulti calls, not one call each: Redis then starts the
// script, sets up its names and reads its clock once for a run, which is
// most of what a call costs it beyond its own keys (docs/internals.md,
// "Batching"). A run decides its calls in order, each exactly as it would
// alone; a call its lean path cannot answer (a denial, a penalty, a
// resend, ...) gets 0, nothing written, and goes again alone in another
// pipeline.

// multiArgs is how many arguments each call of a batch carries: its number
// of keys, now, cost and resend ID (MARGS in the script).
const multiArgs = 4

// maxMulti bounds the calls in one run. Redis runs a script alone, so a
// run holds up every other client for as long as it lasts: 32 calls take
// about 0.2 ms, no longer than a pipeline of 32 calls keeps one busy.
const maxMulti = 32

// runSize is how many calls each run holds, at most, when n calls of one
// script go as runs: as few runs as maxMulti allows, of sizes that differ
// by one at most (40 calls: two runs of 20, not 32 and 8; 65: 22, 22 and
// 21). A batch's first run goes on a pipeline of its own (batch.go's
// split), and its callers are answered while Redis decides the rest: runs
// of even size keep Redis and the callers equally busy.
func runSize(n int) int {
	if n < 1 {
		return 1
	}
	runs := (n + maxMulti - 1) / maxMulti
	return (n + runs - 1) / runs
}

// runBackoff is how many of its next batches a policy's calls go unmerged
// after a run most of whose calls went again alone (a flood of denials):
// there a run costs them a second round trip, and Redis the lean path's
// try, for nothing.
const runBackoff = 8

// wire is one command of a batch's pipeline: one call alone, or a run of
// several (run).
type wire struct {
	script *script
	keys   []string
	args   []any
	calls  []*pending
	run    bool
}

// mergeable says whether a call of these arguments is a common call of a
// baked policy (its arguments carry no policy), which a run can carry.
func mergeable(args []any) bool {
	return len(args) == 4 && args[0] == opFast
}

// merge lays out live as the commands of one batch: the mergeable calls
// of each script together (in runs of runSize), in the order of their
// first, and every other call alone. A script with batches left in skip
// (see runBackoff) has its calls sent alone, and one batch fewer left.
// Without runs (a Cluster master's batch: a run's keys would span slots),
// every call goes alone.
func merge(live []*pending, skip map[*script]int, runs bool) []*wire {
	wires := make([]*wire, 0, len(live))
	open := map[*script]*wire{}
	skipped := map[*script]bool{}
	size := map[*script]int{} // calls a run of the script holds
	for _, p := range live {
		if mergeable(p.args) {
			size[p.script]++
		}
	}
	for sc, n := range size {
		size[sc] = runSize(n)
	}
	for _, p := range live {
		if skip[p.script] > 0 {
			skipped[p.script] = true
		}
		if !runs || !mergeable(p.args) || skipped[p.script] {
			wires = append(wires, &wire{script: p.script, keys: p.keys, args: p.args, calls: []*pending{p}})
			continue
		}
		w := open[p.script]
		if w == nil || len(w.calls) == size[p.script] {
			w = &wire{script: p.script}
			open[p.script] = w
			wires = append(wires, w)
		}
		w.calls = append(w.calls, p)
	}
	for sc := range skipped {
		if skip[sc]--; skip[sc] == 0 {
			delete(skip, sc)
		}
	}
	for _, w := range wires {
		if len(w.calls) > 1 {
			w.lay()
		} else if w.args == nil {
			w.keys, w.args = w.calls[0].keys, w.calls[0].args
		}
	}
	return wires
}

// lay makes w a run of its calls: their keys one call's after another's,
// and per call its number of keys, now, cost and resend ID; or, when
// every call has the same number of keys, now and cost (the common case:
// one identity, Redis's clock, cost 1), those three once and then one
// resend ID per call (opAlike): Redis then reads three arguments a call
// fewer, about 4% of a one-limit decision (bench/luacost.sh).
func (w *wire) lay() {
	w.run, w.keys = true, nil
	first := w.calls[0]
	alike := true
	for _, p := range w.calls {
		w.keys = append(w.keys, p.keys...)
		if len(p.keys) != len(first.keys) || p.args[1] != first.args[1] || p.args[2] != first.args[2] {
			alike = false
		}
	}
	if alike {
		w.args = make([]any, 4, 4+len(w.calls))
		w.args[0], w.args[1], w.args[2], w.args[3] = opAlike, len(first.keys), first.args[1], first.args[2]
		for _, p := range w.calls {
			w.args = append(w.args, p.args[3])
		}
		return
	}
	w.args = make([]any, 1, 1+multiArgs*len(w.calls))
	w.args[0] = opMulti
	for _, p := range w.calls {
		w.args = append(w.args, len(p.keys), p.args[1], p.args[2], p.args[3])
	}
}

// runOne sends a common call as a run of one: what a Store does with every
// common call when a test sets runs, so that the conformance suite goes
// through the script's batch path.
func runOne(ctx context.Context, c goredis.UniversalClient, s *script, keys []string, args []any) ([]int64, error) {
	p := &pending{ctx: ctx, script: s, keys: keys, args: args}
	w := &wire{script: s, calls: []*pending{p}}
	w.lay()
	if again := w.answer(runScript(ctx, c, s, w.keys, w.args)); len(again) > 0 {
		alone(ctx, c, again)
	}
	return p.reply, p.err
}

// answer hands each call of w its part of cmd's reply, and returns those
// the run could not answer.
func (w *wire) answer(cmd *goredis.Cmd) (again []*pending) {
	if !w.run {
		p := w.calls[0]
		p.reply, p.err = cmd.Int64Slice()
		return nil
	}
	rep, err := cmd.Int64Slice()
	var clock int64 // the run's reading of Redis's clock
	if err == nil && len(rep) == 0 {
		err = fmt.Errorf("a batch of %d calls got an empty answer", len(w.calls))
	} else if err == nil {
		clock, rep = rep[0], rep[1:]
	}
	for _, p := range w.calls {
		if err != nil {
			p.err = err
			continue
		}
		if len(rep) == 0 {
			err = fmt.Errorf("a batch of %d calls ended early", len(w.calls))
			p.err = err
			continue
		}
		n := rep[0]
		if n == 0 {
			again = append(again, p)
			rep = rep[1:]
			continue
		}
		if n < 0 || n > int64(len(rep)-1) {
			err = fmt.Errorf("an answer of %d numbers in a batch of %d", n, len(rep)-1)
			p.err = err
			continue
		}
		p.reply, p.err = admitted(rep[1:1+n], len(p.keys), p.args[1], p.args[2], clock, w.script.run)
		rep = rep[1+n:]
	}
	if err == nil && len(rep) != 0 {
		for _, p := range w.calls {
			p.reply, p.err = nil, fmt.Errorf("a batch of %d calls got %d numbers too many", len(w.calls), len(rep))
		}
		return nil
	}
	return again
}

// admitted is the whole reply (take.go's layout) of a call of nk keys,
// now given (0: Redis's, which the run read as clock) and cost
// that a run's lean path admitted, from the run's answer for it
// (script.lua, 'm'): per key its refund count and per limit what its
// shape in run says (run_answer.go). What it leaves out every such
// admission says alike: admitted, granted its cost, no release or flags,
// each key charged at now, no retry, and each limit's reset and mark
// where its kind settles them.
func admitted(part []int64, nk int, given, cost any, clock int64, run []runLimit) ([]int64, error) {
	c, ok := cost.(int64)
	now, nowOK := given.(int64)
	if now == 0 {
		now = clock
	}
	per := 1 // a key's refund count, then its limits
	for _, r := range run {
		per += r.width()
	}
	if !ok || !nowOK || now <= 0 || nk == 0 || len(run) == 0 || nk*per != len(part) {
		return nil, fmt.Errorf("unexpected answer of %d numbers for %d keys in a batch", len(part), nk)
	}
	nl := len(run)
	reply := make([]int64, rHeader+nk*keySize(nl))
	reply[rAllowed], reply[rNow], reply[rGranted] = 1, now, c
	for k := range nk {
		src, dst := part[k*per:], reply[rHeader+k*keySize(nl):]
		dst[0], dst[1], dst[2] = kindCharged, now, src[0]
		at := 1
		for i, r := range run {
			at += r.restore(limitAt(dst, i), src[at:], now)
		}
	}
	return reply, nil
}

// alone sends again, one command each, the calls a run could not answer,
// as opDeclined: the lean path declined them, so they go by the general
// path at once. Nothing of them was written, so a call whose resend ID
// went out once is a first run again (fresh); one whose ID went out more
// than once (the pipeline was resent) may have been charged by the run
// that was lost, and stays a resend, which the script looks up.
func alone(ctx context.Context, c goredis.UniversalClient, calls []*pending) {
	args := make([][]any, len(calls))
	for i, p := range calls {
		args[i] = append([]any(nil), p.args...)
		if rid, ok := p.args[3].(*resendID); !ok || rid.sent.Load() <= 1 {
			args[i] = fresh(args[i])
		}
		if args[i][0] == opFast {
			args[i][0] = opDeclined
		}
	}
	if len(calls) == 1 {
		p := calls[0]
		p.reply, p.err = runScript(p.ctx, c, p.script, p.keys, args[0]).Int64Slice()
		return
	}
	cmds := pipeline(ctx, c, len(calls), func(i int) (*script, []string, []any) {
		return calls[i].script, calls[i].keys, args[i]
	})
	for i, p := range calls {
		p.reply, p.err = cmds[i].Int64Slice()
	}
}
