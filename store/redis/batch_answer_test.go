package redis

import (
	"context"
	"slices"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// TestBatchAnswerRestoresReplies pins how a run's answer (script.lua, 'm':
// one list, the run's clock, then per call 0 or its length, then per key
// its refund count and per limit its remaining, its reset where its kind
// does not settle it, and its refill) becomes each call's whole reply
// (take.go's layout), each kind's reset and mark and each call's now
// restored (run_answer.go), and that an answer of the wrong shape fails
// the calls it cannot be read for instead of handing them numbers.
func TestBatchAnswerRestoresReplies(t *testing.T) {
	type call struct {
		keys int
		cost int64
		now  int64 // given; 0: Redis's clock, the run's
	}
	sliding := runLimit{shape: shapeOf(layout.Buckets), period: 1000}
	cases := []struct {
		name   string
		run    []runLimit // the policy's limits
		calls  []call
		answer []int64
		want   [][]int64 // per call its reply; nil: declined (sent again)
		errs   []bool    // per call, whether it fails
	}{{
		name:   "one key one sliding window (reset: its period), then a declined call",
		run:    []runLimit{sliding},
		calls:  []call{{1, 3, 0}, {1, 1, 0}},
		answer: []int64{500, 1 * (1 + 2), 7, 9, 800, 0},
		want:   [][]int64{{1, 500, 3, 0, 0, kindCharged, 500, 7, 9, 1000, 0, 0, 800}, nil},
		errs:   []bool{false, false},
	}, {
		name:   "two keys of a token bucket (mark: now + reset) and a fixed window (reset: its refill)",
		run:    []runLimit{{shape: shapeOf(layout.Token)}, {shape: shapeOf(layout.Fixed)}},
		calls:  []call{{2, 1, 0}},
		answer: []int64{42, 2 * (1 + 3 + 2), 0, 4, 10, 5, 1, 20, 3, 6, 11, 6, 2, 30},
		want: [][]int64{{1, 42, 1, 0, 0,
			kindCharged, 42, 0, 4, 10, 0, 52, 5, 1, 20, 0, 0, 20,
			kindCharged, 42, 3, 6, 11, 0, 53, 6, 2, 30, 0, 0, 30}},
		errs: []bool{false},
	}, {
		name:   "an approximate window (reset given) beside a log (reset: its period)",
		run:    []runLimit{{shape: shapeOf(layout.Approx)}, {shape: shapeOf(layout.Log), period: 60000000}},
		calls:  []call{{1, 2, 0}},
		answer: []int64{7, 1 * (1 + 3 + 2), 0, 5, 99, 40, 2, 300},
		want:   [][]int64{{1, 7, 2, 0, 0, kindCharged, 7, 0, 5, 99, 0, 0, 40, 2, 60000000, 0, 0, 300}},
		errs:   []bool{false},
	}, {
		name:   "a length past the end fails that call and the rest",
		run:    []runLimit{sliding},
		calls:  []call{{1, 1, 0}, {1, 1, 0}},
		answer: []int64{500, 6, 1, 2, 3},
		errs:   []bool{true, true},
	}, {
		name:   "a length that does not fit the policy's limits fails the call",
		run:    []runLimit{sliding},
		calls:  []call{{1, 1, 0}, {1, 1, 0}},
		answer: []int64{500, 2, 1, 2, 0},
		errs:   []bool{true, false},
	}, {
		name:   "numbers left over fail every call",
		run:    []runLimit{sliding},
		calls:  []call{{1, 1, 0}},
		answer: []int64{500, 0, 9},
		errs:   []bool{true},
	}, {
		name:   "an answer that ends early fails the calls left",
		run:    []runLimit{sliding},
		calls:  []call{{1, 1, 0}, {1, 1, 0}},
		answer: []int64{500, 0},
		want:   [][]int64{nil, nil},
		errs:   []bool{false, true},
	}, {
		name:   "a call's own now stands; the run's clock is the others'",
		run:    []runLimit{sliding},
		calls:  []call{{1, 1, 777}, {1, 1, 0}},
		answer: []int64{500, 3, 0, 4, 60, 3, 0, 3, 70},
		want: [][]int64{{1, 777, 1, 0, 0, kindCharged, 777, 0, 4, 1000, 0, 0, 60},
			{1, 500, 1, 0, 0, kindCharged, 500, 0, 3, 1000, 0, 0, 70}},
		errs: []bool{false, false},
	}, {
		name:   "a call of Redis's clock in a run that read none fails",
		run:    []runLimit{sliding},
		calls:  []call{{1, 1, 0}},
		answer: []int64{0, 3, 0, 4, 60},
		errs:   []bool{true},
	}, {
		name:   "an empty answer fails every call",
		run:    []runLimit{sliding},
		calls:  []call{{1, 1, 0}, {1, 1, 0}},
		answer: []int64{},
		errs:   []bool{true, true},
	}}
	for step, c := range cases {
		w := &wire{run: true, script: &script{run: c.run}}
		for _, cl := range c.calls {
			w.calls = append(w.calls, &pending{keys: make([]string, cl.keys), args: []any{opFast, cl.now, cl.cost, ""}})
		}
		vals := make([]any, len(c.answer))
		for i, v := range c.answer {
			vals[i] = v
		}
		cmd := goredis.NewCmd(context.Background())
		cmd.SetVal(vals)
		again := w.answer(cmd)
		for i, p := range w.calls {
			if got := p.err != nil; got != c.errs[i] {
				t.Fatalf("step %d (%s): call %d failed: %v, want failure %v", step, c.name, i, p.err, c.errs[i])
			}
			if p.err != nil {
				continue
			}
			sent := slices.Contains(again, p)
			if c.want == nil || c.want[i] == nil {
				if !sent {
					t.Fatalf("step %d (%s): call %d was not sent again", step, c.name, i)
				}
				continue
			}
			if sent || !slices.Equal(p.reply, c.want[i]) {
				t.Fatalf("step %d (%s): call %d got %v (sent again: %v), want %v", step, c.name, i, p.reply, sent, c.want[i])
			}
		}
	}
}
