package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/internal/plan"
	"github.com/ratelimitkit/ratelimit/store/internal/verdict"
)

// takeArgs lays out a take's ARGV (lua/script.lua): the operation and the
// call's own arguments, then the policy's unless its script has them baked
// in.
func (p *prepared) takeArgs(now int64, o verdict.Call, rid any, hasID bool) []any {
	args := make([]any, 7, 7+len(p.tail))
	mode, delay := modeTake, o.MaxDelay
	switch {
	case o.Force:
		mode = modeForce
	case o.Hold > 0:
		mode, delay = modeLease, o.Hold
	case o.UpTo:
		mode = modeUpTo
	}
	id := "0"
	if hasID {
		id = "1"
	}
	args[0], args[1], args[2], args[3], args[4], args[5], args[6] = opTake, now, o.Cost, mode, delay, rid, id
	return append(args, p.tail...)
}

// A take's modes (ARGV[4] of 't'), named M_* in the script's prelude.
const (
	modeTake  = "0" // all of the cost, or nothing
	modeUpTo  = "1" // the most of the cost that fits (storekit.Granter)
	modeForce = "2" // all of it whatever room there is: a settle's debt (verdict.Call.Force)
	modeLease = "3" // the most that fits, recorded ARGV[5] µs ahead (storekit.Leaser, verdict.Call.Hold)
)

// nowUS is the time the scripts get: 0, for Redis TIME, unless a test set
// a clock.
func (r *Store) nowUS() int64 {
	if r.now != nil {
		return r.now().UnixMicro()
	}
	return 0
}

func (r *Store) take(ctx context.Context, req ratelimit.Request, o verdict.Call) (ratelimit.Decision, error) {
	pol := req.Policy
	now := r.nowUS()
	prep := r.scripts.prepare(pol, r.ttlExtra.Milliseconds())
	nl := len(plan.Layout(pol).Limits)
	keys := make([]string, len(req.Keys))
	for i, k := range req.Keys {
		keys[i] = redisKey(r.prefix, pol.ID(), k)
	}
	var idKeys []string
	// Under a policy with a Concurrent limit a repeat of a request ID is
	// decided and charged anew: every run holds a slot (store/memory's do).
	if req.ID != "" && !plan.Layout(pol).Slots {
		h := layout.IDHash(req.ID)
		idKeys = make([]string, len(req.Keys))
		for i, k := range req.Keys {
			idKeys[i] = redisKey(r.prefix, pol.ID()+":id:"+h, k)
		}
	}

	if !r.cluster || len(keys) == 1 {
		script, all := prep.script, append(keys, idKeys...)
		var args []any
		plain := idKeys == nil && !o.UpTo && !o.Force && o.MaxDelay == 0 && !r.general
		routed := plain && prep.tail == nil && r.denied.held(keys) // (the lean path runs only for a baked policy)
		if plain {
			op := opFast
			if routed {
				op = opDeclined
			}
			args = append([]any{op, now, o.Cost, r.resendID(ctx)}, prep.tail...)
		} else {
			args = prep.takeArgs(now, o, r.resendID(ctx), idKeys != nil)
		}
		var reply []int64
		var err error
		switch {
		case r.runs && mergeable(args):
			reply, err = runOne(ctx, r.client, script, all, args)
		case r.batch != nil:
			reply, err = r.batch.do(ctx, script, all, args)
		case r.cluster:
			reply, err = r.runOnNode(ctx, script, all, args)
		default:
			reply, err = runScript(ctx, r.client, script, all, args).Int64Slice()
		}
		if err != nil {
			err = resendErr(err)
			return ratelimit.Decision{}, fmt.Errorf("ratelimit/store: redis: %w", err)
		}
		if err := checkReply(reply, len(keys), nl); err != nil {
			return ratelimit.Decision{}, err
		}
		if plain {
			r.denied.learn(keys, reply, nl, routed)
		}
		return decide(req, [][]int64{reply}, nl), nil
	}
	return r.takeCluster(ctx, req, o, prep, keys, idKeys, now)
}

// Reply layout of the take script (lua/script.lua): a header of rHeader
// numbers, then per key rKeyHead (a kind, the time of its charge, its
// refund count) and rPerLimit per limit. The prelude hands the three
// sizes to the script.
const (
	rAllowed  = 0
	rNow      = 1
	rGranted  = 2
	rRelease  = 3
	rHeader   = 5
	rKeyHead  = 3
	rPerLimit = 5
)

// A limit's numbers in a reply, from its first.
const (
	lRemaining = 0
	lReset     = 1
	lRetry     = 2
	lMark      = 3 // a token bucket's TAT right after a charge, else 0
	lRefill    = 4
)

// keySize is how many numbers a reply holds per key.
func keySize(nl int) int { return rKeyHead + rPerLimit*nl }

// limitAt returns limit i's numbers in part, a key's part of a reply.
func limitAt(part []int64, i int) []int64 { return part[rKeyHead+rPerLimit*i:] }

// Key kinds in a reply.
const (
	kindDecided  = 0
	kindCharged  = 1
	kindRecorded = 2 // answered by its request ID's record
	kindResent   = 3 // a resend of a call that charged
)

func checkReply(reply []int64, nkeys, nlim int) error {
	if want := rHeader + nkeys*keySize(nlim); len(reply) != want || reply[rAllowed] != 0 && reply[rAllowed] != 1 {
		return fmt.Errorf("ratelimit/store: redis: unexpected script reply of %d values, want %d", len(reply), want)
	}
	return nil
}

// decide builds the Decision of replies that together cover req.Keys in
// order (one reply for all keys, or one per key on a Cluster), as the
// memory store builds its own.
func decide(req ratelimit.Request, replies [][]int64, nl int) ratelimit.Decision {
	d := ratelimit.Decision{Limits: make([]ratelimit.LimitStatus, nl)}
	allowed, all := true, true
	var marks []int64
	var charged []string
	ki := 0
	var first []int64 // the first key's part
	for _, rep := range replies {
		if rep[rAllowed] == 0 {
			allowed = false
		}
		n := (len(rep) - rHeader) / keySize(nl)
		for k := 0; k < n; k, ki = k+1, ki+1 {
			part := rep[rHeader+k*keySize(nl):]
			if ki == 0 {
				first = part
			}
			for i := 0; i < nl; i++ {
				p := limitAt(part, i)
				verdict.Fold(&d, i, ki, verdict.Status{Rem: p[lRemaining], Reset: p[lReset], Refill: p[lRefill], Retry: p[lRetry]}, ki == 0)
			}
			if part[0] != kindRecorded {
				all = false
			}
			if part[0] == kindCharged {
				if charged == nil { // sized once for every key, so that appends never grow them
					charged = make([]string, 0, len(req.Keys))
					marks = make([]int64, 0, len(req.Keys)*(2+nl))
				}
				charged = append(charged, req.Keys[ki])
				marks = append(marks, part[1], part[2])
				for i := 0; i < nl; i++ {
					marks = append(marks, limitAt(part, i)[lMark])
				}
			}
		}
	}
	rep := replies[0]
	d.Granted = rep[rGranted]
	if all {
		d.Repeated = true
		if at := first[1]; at > rep[rNow] {
			d.Delay = time.Duration(at-rep[rNow]) * time.Microsecond
		}
	} else if rel := rep[rRelease]; rel > rep[rNow] {
		d.Delay = time.Duration(rel-rep[rNow]) * time.Microsecond
	}
	verdict.Finish(&d, allowed, req.Policy)
	if len(charged) > 0 {
		d.Receipt = ratelimit.Receipt{Policy: req.Policy, Keys: charged, Cost: d.Granted, Marks: marks}
	}
	return d
}
