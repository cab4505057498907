package redis

import (
	"context"
	"slices"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestBatchAnswerRestoresReplies pins how a run's answer (script.lua, 'm':
// one list, per call 0 or its length, now, then per key its refund count
// and per limit remaining, reset, mark and refill) becomes each call's
// whole reply (take.go's layout), and that an answer of the wrong shape
// fails the calls it cannot be read for instead of handing them numbers.
func TestBatchAnswerRestoresReplies(t *testing.T) {
	type call struct {
		keys int
		cost int64
	}
	cases := []struct {
		name   string
		calls  []call
		answer []int64
		want   [][]int64 // per call its reply; nil: declined (sent again)
		errs   []bool    // per call, whether it fails
	}{{
		name:   "one key one limit, then a declined call",
		calls:  []call{{1, 3}, {1, 1}},
		answer: []int64{1 + 1*(1+4), 500, 7, 9, 1000, 0, 800, 0},
		want:   [][]int64{{1, 500, 3, 0, 0, kindCharged, 500, 7, 9, 1000, 0, 0, 800}, nil},
		errs:   []bool{false, false},
	}, {
		name:   "two keys of two limits, a token bucket's mark kept",
		calls:  []call{{2, 1}},
		answer: []int64{1 + 2*(1+8), 42, 0, 4, 10, 77, 5, 1, 20, 0, 20, 3, 6, 11, 88, 6, 2, 30, 0, 30},
		want: [][]int64{{1, 42, 1, 0, 0,
			kindCharged, 42, 0, 4, 10, 0, 77, 5, 1, 20, 0, 0, 20,
			kindCharged, 42, 3, 6, 11, 0, 88, 6, 2, 30, 0, 0, 30}},
		errs: []bool{false},
	}, {
		name:   "a length past the end fails that call and the rest",
		calls:  []call{{1, 1}, {1, 1}},
		answer: []int64{6, 1, 2, 3},
		errs:   []bool{true, true},
	}, {
		name:   "a length that fits no number of limits fails the call",
		calls:  []call{{1, 1}, {1, 1}},
		answer: []int64{4, 1, 2, 3, 4, 0},
		errs:   []bool{true, false},
	}, {
		name:   "numbers left over fail every call",
		calls:  []call{{1, 1}},
		answer: []int64{0, 9},
		errs:   []bool{true},
	}, {
		name:   "an answer that ends early fails the calls left",
		calls:  []call{{1, 1}, {1, 1}},
		answer: []int64{0},
		want:   [][]int64{nil, nil},
		errs:   []bool{false, true},
	}}
	for step, c := range cases {
		w := &wire{run: true}
		for _, cl := range c.calls {
			w.calls = append(w.calls, &pending{keys: make([]string, cl.keys), args: []any{opFast, int64(0), cl.cost, ""}})
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
