package redis

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestKeptDenialAnswersAsDecided pins the denial a key keeps for the
// calls that repeat it (lua/denial.lua): a flood's repeats, answered from
// it within its hold, must be what the reference (the memory store)
// decides at their own time: the waits shortened by the time that
// passed, the hold ending at a sub-bucket's end or at an instant the
// denial names, and any charge (one in the key's last microsecond
// included), refund, reset, change of cost, clock that stepped back or
// second key deciding afresh. Logs, sub-buckets and both in one policy.
func TestKeptDenialAnswersAsDecided(t *testing.T) {
	type step struct {
		advance time.Duration // before the step
		do      string        // "take" (keys, cost), "refund" (the last admission on one key), "reset" (keys), "align" (to the next minute)
		keys    []string
		cost    int64
		other   bool // the take goes by another store on the same Redis, which has seen no denial
		wider   bool // the take is of the policy's next version: the same name, every rate one higher
	}
	a := []string{"ip:a"}
	take := func(advance time.Duration, cost int64) step {
		return step{advance: advance, do: "take", keys: a, cost: cost}
	}
	ms := time.Millisecond
	steps := []step{
		take(0, 1), take(3*ms, 1), take(20*ms, 1), take(ms, 1),
		take(10*ms, 1), take(7*ms, 1), take(time.Microsecond, 1), take(9*ms, 1), // repeats; a sub-bucket ends at 50 ms
		take(0, 2), take(ms, 2), // another cost: decided afresh
		take(-5*ms, 1), take(5*ms, 1), // the clock stepped back
		take(200*ms, 1), take(120*ms, 1),
		{do: "take", keys: []string{"ip:a", "user:b"}, cost: 1}, // two keys: the general path
		take(400*ms, 1), take(232*ms, 1), take(767*time.Microsecond, 1), take(ms, 1), take(ms, 1), take(2*ms, 1),
		{advance: ms, do: "refund"}, take(0, 1), take(ms, 1), take(ms, 1),
		{advance: ms, do: "reset", keys: a}, take(0, 1), take(0, 1),
		take(2*time.Second, 1), take(0, 1), take(0, 1), take(ms, 1), take(ms, 1),
		take(30*time.Second, 1), take(1500*ms, 1), take(ms, 6), take(ms, 6), // more than the limits hold: never
		take(40*time.Second, 1), take(0, 2), take(ms, 2), // room for one: cost 2 is denied and kept...
		take(-5*ms, 1), take(10*ms, 2), take(ms, 2), // ...then one is charged at the key's time, as it was
		// A denial with room left (refills and waits at the ends of
		// sub-buckets), repeated up to and past the end of its sub-bucket,
		// then after a charge of another cost.
		{do: "align"}, take(0, 1), take(100*ms, 1), take(100*ms, 2), take(10*ms, 2),
		take(39*ms+999*time.Microsecond, 2), take(time.Microsecond, 2), take(10*ms, 2),
		{advance: ms, do: "take", keys: a, cost: 1, other: true}, take(ms, 2), // a charge this store did not see
		// A charge at the key's time, as it was (the clock stepped back):
		// by the general path, then by another store's lean path.
		{do: "align"}, take(0, 1), take(0, 1), take(ms, 2), take(-5*ms, 1), take(10*ms, 2),
		{do: "align"}, take(0, 1), take(0, 1), take(ms, 2), {do: "take", keys: a, cost: 2, other: true},
		{advance: -5 * ms, do: "take", keys: a, cost: 1, other: true}, take(10*ms, 2),
		{do: "align"}, take(0, 1), take(0, 1), take(ms, 2),
		{advance: -5 * ms, do: "take", keys: []string{"ip:a", "user:c"}, cost: 1, other: true}, take(10*ms, 2),
		{do: "align"}, take(0, 1), take(0, 1), take(0, 1), take(ms, 1), // a denial kept...
		{advance: ms, do: "take", keys: a, cost: 1, wider: true}, // ...is not the next version's
		{do: "align"}, take(0, 1), take(0, 1), take(ms, 2), {advance: -ms, do: "take", keys: a, cost: 1, other: true}, take(10*ms, 2),
		// A denial just after an admission left; the clock steps back
		// before that (not behind the key's time).
		{do: "align"}, take(0, 1), take(3*ms, 1), take(20*ms, 1), take(978*ms, 2), take(-2*ms, 2),
	}
	sub := func(rate int64, period time.Duration) ratelimit.Limit { // sub-buckets below ExactRateMax
		return ratelimit.Limit{Rate: rate, Period: period, Precision: ratelimit.DefaultPrecision}
	}
	for _, policy := range []struct {
		name   string
		limits []ratelimit.Limit
	}{
		{"logs", []ratelimit.Limit{{Rate: 3, Period: time.Second}, {Rate: 5, Period: time.Minute}}},
		{"log and sub-buckets", []ratelimit.Limit{{Rate: 3, Period: time.Second}, {Rate: 100, Period: time.Minute}}},
		{"sub-buckets", []ratelimit.Limit{sub(3, time.Second), sub(5, time.Minute)}},
	} {
		t.Run(policy.name, func(t *testing.T) {
			ctx := context.Background()
			c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
			mr, client, r := miniStore(t, WithClock(c.Now), WithBatching(0))
			other, err := New(client, WithClock(c.Now), WithBatching(0))
			if err != nil {
				t.Fatal(err)
			}
			m := memory.New(memory.WithClock(c.Now))
			p, err := ratelimit.NewPolicy("kept", ratelimit.SlidingWindow, policy.limits...)
			if err != nil {
				t.Fatal(err)
			}
			next := make([]ratelimit.Limit, len(policy.limits))
			for i, l := range policy.limits {
				next[i] = l
				next[i].Rate++
			}
			p2, err := ratelimit.NewPolicy("kept", ratelimit.SlidingWindow, next...)
			if err != nil || p2.ID() != p.ID() {
				t.Fatalf("the next version: %v, or it does not share the counters", err)
			}
			key := redisKey(r.prefix, p.ID(), "ip:a")
			var lastR, lastM ratelimit.Receipt // the last admission on one key, by each
			answered := 0                      // denials a kept one answered
			for i, s := range steps {
				c.Set(c.Now().Add(s.advance))
				switch s.do {
				case "align":
					c.Set(c.Now().Truncate(time.Minute).Add(2 * time.Minute))
					continue
				case "refund":
					if err := r.Refund(ctx, lastR); err != nil {
						t.Fatalf("step %d: refund: %v", i, err)
					}
					if err := m.Refund(ctx, lastM); err != nil {
						t.Fatalf("step %d: refund the reference: %v", i, err)
					}
					continue
				case "reset":
					if err := r.Reset(ctx, p, s.keys...); err != nil {
						t.Fatalf("step %d: reset: %v", i, err)
					}
					if err := m.Reset(ctx, p, s.keys...); err != nil {
						t.Fatalf("step %d: reset the reference: %v", i, err)
					}
					continue
				}
				before := mr.HGet(key, layout.HashDenial)
				req := ratelimit.Request{Policy: p, Keys: s.keys, Cost: s.cost}
				if s.wider {
					req.Policy = p2
				}
				by := r
				if s.other {
					by = other
				}
				got, want := takeBoth(t, i, by, m, req)
				if got.Allowed && len(s.keys) == 1 {
					lastR, lastM = got.Receipt, want.Receipt
				}
				if !got.Allowed && before != "" && before[:layout.TimeDigits] != fmt.Sprintf("%0*d", layout.TimeDigits, c.Now().UnixMicro()) &&
					mr.HGet(key, layout.HashDenial) == before {
					answered++
				}
				got.Receipt, want.Receipt = ratelimit.Receipt{}, ratelimit.Receipt{}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d: %v cost %d: %+v, the reference %+v", i, s.keys, s.cost, got, want)
				}
			}
			if answered < 5 {
				t.Fatalf("%d denials answered by a kept one, want 5 or more: the steps miss what they pin", answered)
			}
			t.Logf("%d denials answered by a kept one", answered)
		})
	}
}

// TestKeptDenialIsWhatAnswers shows that a repeat within the hold is
// answered from the kept fields, not decided again: a kept remaining
// written over in the key is what the next denial reports, until the hold
// ends.
func TestKeptDenialIsWhatAnswers(t *testing.T) {
	c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	mr, _, r := miniStore(t, WithClock(c.Now), WithBatching(0))
	p := ratelimit.MustParsePolicy("2/s", ratelimit.Named("kept"))
	key := redisKey(r.prefix, p.ID(), "ip:a")
	steps := []struct {
		advance   time.Duration
		overwrite bool // the kept limit's field, before the step
		remaining int64
		kept      bool // the key keeps a denial after the step
	}{
		{remaining: 1},
		{advance: time.Millisecond, remaining: 0},
		{advance: time.Millisecond, remaining: 0, kept: true},
		{advance: time.Millisecond, overwrite: true, remaining: 7, kept: true}, // answered from the field
		{advance: time.Second, remaining: 1, kept: true},                       // past the hold (the first admission left): decided afresh
	}
	for i, s := range steps {
		c.Set(c.Now().Add(s.advance))
		if s.overwrite {
			v := mr.HGet(key, layout.HashDenial+"1")
			mr.HSet(key, layout.HashDenial+"1", fmt.Sprintf("%*d", layout.DenialDigits, 7)+v[layout.DenialDigits:])
		}
		d := mustTake(t, r, p, 1, "ip:a")
		if d.Remaining != s.remaining {
			t.Fatalf("step %d: remaining %d, want %d", i, d.Remaining, s.remaining)
		}
		if kept := mr.HGet(key, layout.HashDenial) != ""; kept != s.kept {
			t.Fatalf("step %d: the key keeps a denial: %v, want %v", i, kept, s.kept)
		}
	}
}
