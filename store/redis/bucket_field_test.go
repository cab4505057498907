package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/internal/layout"
)

// TestSubBucketFieldFormat: a sub-bucket's field holds its cost and its
// latest admission's offset as one number, cost × width + offset, after
// a space (layout.BucketPackFormat), while that is below 2^53; beyond, as
// "-cost.offset" (layout.BucketWideFormat), whether a settle's debt or one
// take passes the bound. Both read back as the cost and offset charged.
// (Whether 284 in a year-long sub-bucket passes it depends on the offset:
// at this test's time, 6.7e12 µs into it, it does not.)
func TestSubBucketFieldFormat(t *testing.T) {
	at := time.Date(2026, 5, 1, 0, 0, 0, 123457000, time.UTC)
	cases := []struct {
		policy string
		prec   int
		cost   int64 // the take's
		settle int64 // then settled to this, when above 0
		wide   bool  // whether the field is past 2^53
	}{
		{"40/s", 0, 3, 0, false},
		{"40/s", 0, 40, 0, false},
		{"40/366d", 1, 1, 0, false},
		{"40/366d", 1, 1, 284, false},
		{"40/366d", 1, 1, 2000, true},
		{"1000000000/366d", 120, 34179, 0, false},
		{"1000000000/366d", 120, 40000, 0, true},
		{"1000000000/366d", 120, 1_000_000_000, 0, true},
	}
	for i, c := range cases {
		mr := miniredis.RunT(t)
		mr.SetTime(at)
		client := goredis.NewClient(&goredis.Options{Addr: mr.Addr()})
		s, err := New(client)
		if err != nil {
			t.Fatal(err)
		}
		opts := []ratelimit.PolicyOption{ratelimit.WithAlgorithm(ratelimit.SlidingWindow)}
		if c.prec > 0 {
			opts = append(opts, ratelimit.WithPrecision(c.prec))
		}
		p := ratelimit.MustParsePolicy(c.policy, opts...)
		d := mustTake(t, s, p, c.cost, "k")
		if !d.Allowed {
			t.Fatalf("step %d: %s cost %d denied: %+v", i, c.policy, c.cost, d)
		}
		want := c.cost
		if c.settle > 0 {
			if err := s.Settle(context.Background(), d.Receipt, c.settle); err != nil {
				t.Fatalf("step %d: settle: %v", i, err)
			}
			want = c.settle
		}
		l := p.Limits()[0]
		prec := l.Precision
		if prec == 0 {
			prec = ratelimit.DefaultPrecision
		}
		width := l.Period.Microseconds() / int64(prec)
		offset := at.UnixMicro() % width
		key := redisKey(DefaultPrefix, p.ID(), "k")
		names, err := mr.HKeys(key)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		sumName := strconv.Itoa(layout.FirstHashField) // the ring's sum, marked or not
		if sum, err := strconv.ParseInt(mr.HGet(key, sumName), 10, 64); err != nil || sum != want && sum != layout.BucketSumSole-want {
			t.Errorf("step %d: %s: the ring's sum %q, want %d or %d", i, c.policy, mr.HGet(key, sumName), want, layout.BucketSumSole-want)
		}
		var fields []string
		for _, name := range names {
			if f := mr.HGet(key, name); name != sumName && (strings.HasPrefix(f, " ") || strings.HasPrefix(f, "-")) {
				fields = append(fields, f)
			}
		}
		if len(fields) != 1 {
			t.Fatalf("step %d: %s: sub-bucket fields %q, want one", i, c.policy, fields)
		}
		f := fields[0]
		var gotCost, gotOffset int64
		if strings.HasPrefix(f, "-") {
			cs, ls, ok := strings.Cut(f[1:], layout.BucketSep)
			gotCost, _ = strconv.ParseInt(cs, 10, 64)
			gotOffset, _ = strconv.ParseInt(ls, 10, 64)
			if !ok || !c.wide {
				t.Errorf("step %d: %s cost %d: field %q, want %d × %d + %d after a space", i, c.policy, want, f, want, width, offset)
			}
		} else {
			n, err := strconv.ParseInt(f[1:], 10, 64)
			if err != nil || c.wide || n >= layout.BucketExact {
				t.Errorf("step %d: %s cost %d: field %q, want \"-%d%s%d\"", i, c.policy, want, f, want, layout.BucketSep, offset)
			}
			gotCost, gotOffset = n/width, n%width
		}
		if gotCost != want || gotOffset != offset {
			t.Errorf("step %d: %s: field %q holds cost %d at offset %d, want %d at %d", i, c.policy, f, gotCost, gotOffset, want, offset)
		}
	}
}
