package redis

import (
	"context"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
	"github.com/ratelimitkit/ratelimit/store/memory"
)

// TestRingSumMarksSoleSubBucket: a ring's sum is marked (layout.BucketSumSole
// minus the sum) exactly while the last charge's sub-bucket is the only one
// that holds cost: after a new key's charge, a lapsed ring's, and a charge
// of that sub-bucket again; a charge of another sub-bucket, a refund and a
// settle write it plain. A lapsed ring under a marked sum clears the one
// sub-bucket that held cost (an identity called now and then no longer
// writes every sub-bucket back to 0), and one whose sub-buckets the ring
// passed since skips reading them; every decision is the memory store's.
func TestRingSumMarksSoleSubBucket(t *testing.T) {
	sub := func(rate int64, period time.Duration) ratelimit.Limit { // sub-buckets below ExactRateMax
		return ratelimit.Limit{Rate: rate, Period: period, Precision: ratelimit.DefaultPrecision}
	}
	p, err := ratelimit.NewPolicy("sole", ratelimit.SlidingWindow, sub(20, time.Second), sub(100, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	const w = 50 * time.Millisecond // the 1s ring's sub-bucket
	steps := []struct {
		advance time.Duration // before the step
		do      string        // "take" (cost), "refund" (the last admission), "settle" (it, to cost)
		cost    int64
		marked  bool // the 1s ring's sum afterwards
		holding int  // its sub-buckets that hold cost afterwards
	}{
		{do: "take", cost: 1, marked: true, holding: 1},                                   // a new key
		{advance: 5 * time.Millisecond, do: "take", cost: 1, marked: true, holding: 1},    // the same sub-bucket
		{advance: w, do: "take", cost: 1, holding: 2},                                     // the next one
		{advance: 2 * time.Second, do: "take", cost: 1, marked: true, holding: 1},         // lapsed, sum plain: every sub-bucket cleared
		{advance: 1500 * time.Millisecond, do: "take", cost: 1, marked: true, holding: 1}, // lapsed, sum marked: its one cleared
		{advance: 1100 * time.Millisecond, do: "take", cost: 2, marked: true, holding: 1}, // again, 22 sub-buckets on
		{advance: 3 * w, do: "take", cost: 2, holding: 2},                                 // three on, under a marked sum: none read
		{advance: time.Millisecond, do: "refund", holding: 1},
		{advance: 3 * time.Second, do: "take", cost: 1, marked: true, holding: 1},
		{advance: time.Millisecond, do: "settle", cost: 3, holding: 1},
		{advance: 2 * time.Second, do: "take", cost: 1, marked: true, holding: 1},
		{advance: 20 * w, do: "take", cost: 1, holding: 2}, // twenty on: the edge one is the last charge's
		{advance: 3 * time.Second, do: "take", cost: 5, marked: true, holding: 1},
		{advance: 21 * w, do: "take", cost: 20, marked: true, holding: 1}, // twenty-one on: lapsed, the same place in the ring
		{advance: w, do: "take", cost: 1, marked: true, holding: 1},       // denied: nothing written
	}
	ctx := context.Background()
	c := &clock{t: t0}
	mr, _, r := miniStore(t, WithClock(c.Now), WithBatching(0))
	m := memory.New(memory.WithClock(c.Now))
	key := redisKey(r.prefix, p.ID(), "ip:a")
	sumName := strconv.Itoa(layout.FirstHashField)
	n1 := ratelimit.DefaultPrecision + 1
	var lastR, lastM ratelimit.Receipt
	for i, s := range steps {
		c.Set(c.Now().Add(s.advance))
		switch s.do {
		case "take":
			req := ratelimit.Request{Policy: p, Keys: []string{"ip:a"}, Cost: s.cost}
			got, want := takeBoth(t, i, r, m, req)
			if got.Allowed {
				lastR, lastM = got.Receipt, want.Receipt
			}
			got.Receipt, want.Receipt = ratelimit.Receipt{}, ratelimit.Receipt{}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d: cost %d: %+v, the reference %+v", i, s.cost, got, want)
			}
		case "refund":
			if err := r.Refund(ctx, lastR); err != nil {
				t.Fatalf("step %d: refund: %v", i, err)
			}
			if err := m.Refund(ctx, lastM); err != nil {
				t.Fatalf("step %d: refund the reference: %v", i, err)
			}
		case "settle":
			if err := r.Settle(ctx, lastR, s.cost); err != nil {
				t.Fatalf("step %d: settle: %v", i, err)
			}
			if err := m.Settle(ctx, lastM, s.cost); err != nil {
				t.Fatalf("step %d: settle the reference: %v", i, err)
			}
		}
		sum, err := strconv.ParseInt(mr.HGet(key, sumName), 10, 64)
		if err != nil {
			t.Fatalf("step %d: the ring's sum %q: %v", i, mr.HGet(key, sumName), err)
		}
		if marked := sum < 0; marked != s.marked {
			t.Errorf("step %d: the ring's sum %d marked: %v, want %v", i, sum, marked, s.marked)
		}
		if sum < 0 {
			sum = layout.BucketSumSole - sum
		}
		holding, total := 0, int64(0)
		for f := layout.FirstHashField + 1; f <= layout.FirstHashField+n1; f++ {
			v := mr.HGet(key, strconv.Itoa(f))
			if v == "" || v == "0" {
				continue
			}
			n, err := strconv.ParseInt(v[1:], 10, 64)
			if err != nil || v[0] != ' ' {
				t.Fatalf("step %d: sub-bucket field %d holds %q", i, f, v)
			}
			holding++
			total += n / w.Microseconds()
		}
		if holding != s.holding || total != sum {
			t.Errorf("step %d: %d sub-buckets hold %d in all, the sum %d; want %d sub-buckets holding the sum", i, holding, total, sum, s.holding)
		}
	}
}
