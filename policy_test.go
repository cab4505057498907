package ratelimit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit/internal/layout"
)

func TestNewPolicyValidation(t *testing.T) {
	cases := []struct {
		name     string
		alg      Algorithm
		limits   []Limit
		wantText string
	}{
		{"bad name!", SlidingWindow, []Limit{perSecond(1)}, "not one of"},
		{strings.Repeat("n", 65), SlidingWindow, []Limit{perSecond(1)}, "1 to 64"},
		{"x", Algorithm(9), []Limit{perSecond(1)}, "unknown algorithm"},
		{"x", SlidingWindow, nil, "no limits"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: time.Second, Precision: 7}}, "whole microseconds"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: 10 * time.Millisecond, Precision: 20}}, "shorter than 1ms"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: time.Second, Precision: -1}}, "precision"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: time.Second, Precision: 1000}}, "precision"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: time.Second, Burst: 3}}, "token bucket only"},
		{"x", FixedWindow, []Limit{{Rate: 1, Period: time.Second, Precision: 2}}, "sliding window only"},
		{"x", TokenBucket, []Limit{{Rate: 1, Period: time.Second, Burst: -3}}, "burst"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: time.Second + time.Nanosecond}}, "whole number of microseconds"},
		{"x", TokenBucket, []Limit{{Rate: 1, Period: time.Hour, Burst: 3_000_000}}, "longer than"},
		// 1/366d with burst 284 keeps a time of now + burst × interval,
		// beyond 2^53 µs: rejected, since Lua would round it.
		{"x", TokenBucket, []Limit{{Rate: 1, Period: MaxPeriod, Burst: 284}}, "lose precision"},
		{"x", SlidingLog, []Limit{{Rate: MaxLogRate + 1, Period: time.Hour}}, "at most 1000"},
		{"x", SlidingLog, []Limit{{Rate: 5, Period: time.Hour, Precision: 5}}, "sliding window only"},
		{"x", SlidingWindowApprox, []Limit{{Rate: 5, Period: time.Hour, Burst: 5}}, "token bucket only"},
		{"x", Algorithm(5), []Limit{perSecond(1)}, "unknown algorithm"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: time.Second, Name: "a b"}}, "name"},
		{"x", SlidingWindow, []Limit{{Rate: 1, Period: time.Second, Name: "n"}, {Rate: 1, Period: time.Minute, Name: "n"}}, "duplicate name"},
	}
	for _, c := range cases {
		_, err := NewPolicy(c.name, c.alg, c.limits...)
		if err == nil || !strings.Contains(err.Error(), c.wantText) {
			t.Errorf("NewPolicy(%.20q, %s, %+v): error %v, want one containing %q", c.name, c.alg, c.limits, err, c.wantText)
		}
	}
}

func TestPolicyDefaults(t *testing.T) {
	p := MustParsePolicy("10/s, 120/m, 240/h", Named("api"))
	ls := p.Limits()
	// 10/s is small enough to count exactly (a log); the others in
	// DefaultPrecision sub-buckets.
	for i, want := range []struct {
		name      string
		precision int
		counter   layout.Kind
	}{{"api-1s", 0, layout.Log}, {"api-1m", DefaultPrecision, layout.Buckets}, {"api-1h", DefaultPrecision, layout.Buckets}} {
		if ls[i].Name != want.name || ls[i].Precision != want.precision || p.layout.Limits[i].Kind != want.counter {
			t.Errorf("limit %d: name %q precision %d counter %d, want %q, %d and %d", i, ls[i].Name, ls[i].Precision, p.layout.Limits[i].Kind, want.name, want.precision, want.counter)
		}
	}
	if p.String() != "10/1s, 120/1m, 240/1h" {
		t.Errorf("String() = %q", p.String())
	}
	if p.layout.Reserves {
		t.Error("a policy with sub-bucket limits says it can reserve")
	}
	if !MustParsePolicy("10/s, 30/m").layout.Reserves || !MustParsePolicy("100/s", WithAlgorithm(TokenBucket)).layout.Reserves {
		t.Error("an exact or token-bucket policy says it cannot reserve")
	}
	if got := MustParsePolicy(fmt.Sprintf("%d/s", ExactRateMax+1)).layout.Limits[0].Kind; got != layout.Buckets {
		t.Errorf("rate ExactRateMax+1: counter %d, want sub-buckets", got)
	}
	if got := MustParsePolicy("5/s", WithPrecision(5)).layout.Limits[0].Kind; got != layout.Buckets {
		t.Errorf("a precision set: counter %d, want sub-buckets", got)
	}
	// A short period that the default precision cannot divide falls back
	// to the largest precision that fits.
	short := MustParsePolicy("50/7ms")
	if got := short.limits[0].Precision; got != 7 {
		t.Errorf("50/7ms: precision %d, want 7", got)
	}
	tb := MustParsePolicy("3/s", WithAlgorithm(TokenBucket))
	if tb.limits[0].Burst != 3 || tb.MaxCost() != 3 {
		t.Errorf("token bucket burst %d max cost %d, want 3", tb.limits[0].Burst, tb.MaxCost())
	}
	if b := MustParsePolicy("3/s", WithAlgorithm(TokenBucket), WithBurst(9)); b.MaxCost() != 9 {
		t.Errorf("WithBurst(9): max cost %d", b.MaxCost())
	}
	// Same definition, same counters; a changed rate, the same counters
	// (see TestPolicyIDs); a changed period, new counters.
	if MustParsePolicy("10/s").ID() != MustParsePolicy("10/second").ID() {
		t.Error("equal policies have different IDs")
	}
	if MustParsePolicy("10/s").ID() != MustParsePolicy("11/s").ID() {
		t.Error("policies that differ in a rate only have different IDs")
	}
	if MustParsePolicy("10/s").ID() == MustParsePolicy("10/2s").ID() {
		t.Error("policies of different periods share an ID")
	}
	// Limits returns a copy.
	ls[0].Rate = 99
	if p.limits[0].Rate != 10 {
		t.Error("Limits() exposes the policy's own slice")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustParsePolicy did not panic on a bad policy")
		}
	}()
	MustParsePolicy("nope")
}

// TestPolicyIDs: the fingerprint in a policy's ID is 64 bits (two token
// buckets of one name collided under the 32-bit fingerprint of an earlier
// version, whose rates it covered), so policies whose counters are laid
// out differently never share them; policies of one name that differ
// only in rates (and a token bucket's burst) share them (see Policy.ID).
func TestPolicyIDs(t *testing.T) {
	tb := WithAlgorithm(TokenBucket)
	a := MustParsePolicy("18305/1h", Named("api"), tb)
	fp := strings.TrimPrefix(a.ID(), "api:")
	if len(fp) != 16 {
		t.Fatalf("ID %q: fingerprint of %d hex digits, want 16 (64 bits)", a.ID(), len(fp))
	}
	// Near-identical layouts: every pair differs.
	seen := map[string]string{}
	add := func(desc string, p *Policy) {
		if prev, dup := seen[p.ID()]; dup {
			t.Errorf("%s and %s share the ID %q", desc, prev, p.ID())
		}
		seen[p.ID()] = desc
	}
	for sec := 1; sec <= 2000; sec++ {
		if sec == 60 {
			continue // the period of the 100/m token bucket below, which shares its counters
		}
		add(fmt.Sprintf("10/%ds token bucket", sec), MustParsePolicy(fmt.Sprintf("10/%ds", sec), Named("api"), tb))
	}
	for _, alg := range []Algorithm{SlidingWindow, FixedWindow, TokenBucket, SlidingLog, SlidingWindowApprox} {
		add("100/m "+alg.String(), MustParsePolicy("100/m", Named("api"), WithAlgorithm(alg)))
	}
	add("100/m precision 5", MustParsePolicy("100/m", Named("api"), WithPrecision(5)))
	add("100/m block 1m", MustParsePolicy("100/m", Named("api"), BlockFor(time.Minute)))
	add("100/m, 5/s", MustParsePolicy("100/m, 5/s", Named("api")))
	add("100/2m", MustParsePolicy("100/2m", Named("api")))
	add("32/m (a log)", MustParsePolicy("32/m", Named("api")))
	add("10/m (a log), 5/s", MustParsePolicy("10/m, 5/s", Named("api")))

	// Rates whose counts mean the same under any rate: one ID per layout.
	for i, c := range []struct {
		a, b string
		opts []PolicyOption
	}{
		{"100/m", "1000/m", nil}, // sub-buckets, both above ExactRateMax
		{"10/m", "32/m", nil},    // logs
		{"30/m", "1000/m", []PolicyOption{WithAlgorithm(SlidingLog)}},
		{"10/s, 100/m", "20/s, 33/m", nil},
		{"10/m, 100/h", "20/m, 500/h", []PolicyOption{WithAlgorithm(FixedWindow)}},
		{"40/m", "30/m", []PolicyOption{WithAlgorithm(SlidingWindowApprox)}},
		{"10/m", "20/m", []PolicyOption{WithPrecision(6)}},
		{"100/m, 5000/h", "120/m, 9000/h", nil},
		{"18305/h", "63142/h", []PolicyOption{tb}}, // token buckets: the TAT keeps its interval
		{"100/m", "7/m", []PolicyOption{tb, WithBurst(7)}},
	} {
		pa := MustParsePolicy(c.a, append([]PolicyOption{Named("api")}, c.opts...)...)
		pb := MustParsePolicy(c.b, append([]PolicyOption{Named("api")}, c.opts...)...)
		if pa.ID() != pb.ID() {
			t.Errorf("step %d: %s and %s have the IDs %q and %q, want one", i, pa, pb, pa.ID(), pb.ID())
		}
		if pa.def == pb.def {
			t.Errorf("step %d: %s and %s share the definition %q", i, pa, pb, pa.def)
		}
	}
}

// TestBlockForOption: BlockFor is validated and kept; With(BlockFor(d))
// copies a policy with a penalty and its own ID.
func TestBlockForOption(t *testing.T) {
	p := MustParsePolicy("5/15m", BlockFor(time.Hour), Named("login"))
	if p.BlockFor() != time.Hour || (time.Duration(p.layout.TTLMS)*time.Millisecond) < time.Hour {
		t.Fatalf("BlockFor %s TTL %s, want 1h and a TTL covering it", p.BlockFor(), (time.Duration(p.layout.TTLMS) * time.Millisecond))
	}
	for _, d := range []time.Duration{-time.Second, time.Nanosecond, MaxSpan + time.Microsecond} {
		if _, err := ParsePolicy("5/m", BlockFor(d)); err == nil || !strings.Contains(err.Error(), "BlockFor") {
			t.Errorf("BlockFor(%s): error %v", d, err)
		}
	}
	base := MustParsePolicy("10/s, 120/m", Named("x"))
	q, err := base.With(BlockFor(time.Minute))
	if err != nil || q.BlockFor() != time.Minute || q.ID() == base.ID() || q.String() != base.String() {
		t.Fatalf("With(BlockFor): %v %v, ids %q %q", q, err, q.ID(), base.ID())
	}
	if back, _ := q.With(BlockFor(0)); back.ID() != base.ID() {
		t.Fatalf("With(BlockFor(0)) gives ID %q, want the original %q", back.ID(), base.ID())
	}
}

// TestPolicyWith: With copies a built policy under another name or
// penalty, as ParsePolicy would have built it with those options, and
// leaves p alone; it refuses the options that change how limits are
// counted, nil options and invalid values.
func TestPolicyWith(t *testing.T) {
	named, err := NewPolicy("api", SlidingWindow, Limit{Rate: 10, Period: time.Second}, Limit{Rate: 100, Period: time.Minute, Name: "minute"})
	if err != nil {
		t.Fatal(err)
	}
	bucket := MustParsePolicy("10/s", WithAlgorithm(TokenBucket), WithBurst(3), Named("tb"))
	tests := []struct {
		name string
		p    *Policy
		opts []PolicyOption
		want *Policy // built directly; nil when With must fail
		err  string
	}{
		{"nothing", named, nil, named, ""},
		{"penalty", named, []PolicyOption{BlockFor(time.Minute)},
			mustNewPolicy(t, "api", SlidingWindow, time.Minute, Limit{Rate: 10, Period: time.Second}, Limit{Rate: 100, Period: time.Minute, Name: "minute"}), ""},
		{"name: default limit names follow, given ones stay", named, []PolicyOption{Named("login")},
			mustNewPolicy(t, "login", SlidingWindow, 0, Limit{Rate: 10, Period: time.Second}, Limit{Rate: 100, Period: time.Minute, Name: "minute"}), ""},
		{"empty name is the default", named, []PolicyOption{Named("")},
			mustNewPolicy(t, DefaultPolicyName, SlidingWindow, 0, Limit{Rate: 10, Period: time.Second}, Limit{Rate: 100, Period: time.Minute, Name: "minute"}), ""},
		{"the last option wins", named, []PolicyOption{BlockFor(time.Hour), BlockFor(0)}, named, ""},
		{"token bucket keeps its burst", bucket, []PolicyOption{Named("tb2"), BlockFor(time.Second)},
			MustParsePolicy("10/s", WithAlgorithm(TokenBucket), WithBurst(3), Named("tb2"), BlockFor(time.Second)), ""},
		{"algorithm", named, []PolicyOption{WithAlgorithm(FixedWindow)}, nil, "WithAlgorithm changes how the limits are counted"},
		{"precision", named, []PolicyOption{Named("ok"), WithPrecision(5)}, nil, "WithPrecision changes how the limits are counted"},
		{"burst", bucket, []PolicyOption{WithBurst(5)}, nil, "WithBurst changes how the limits are counted"},
		{"nil option", named, []PolicyOption{BlockFor(time.Second), nil}, nil, "Policy.With: option 1 is nil"},
		{"bad penalty", named, []PolicyOption{BlockFor(time.Nanosecond)}, nil, "BlockFor(1ns)"},
		{"bad name", named, []PolicyOption{Named("a b")}, nil, `policy name "a b"`},
		{"nil policy", nil, []PolicyOption{BlockFor(time.Second)}, nil, "Policy.With: nil policy"},
	}
	for i, tt := range tests {
		before := ""
		if tt.p != nil {
			before = tt.p.ID() + " " + tt.p.String() + " " + tt.p.BlockFor().String()
		}
		got, err := tt.p.With(tt.opts...)
		if tt.want == nil {
			if err == nil || got != nil || !strings.HasPrefix(err.Error(), "ratelimit: ") || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("step %d (%s): With = %v, %v; want an error with %q", i, tt.name, got, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, tt.name, err)
		}
		if got == tt.p {
			t.Errorf("step %d (%s): With returned p itself, want a copy", i, tt.name)
		}
		if got.ID() != tt.want.ID() || got.Name() != tt.want.Name() || got.BlockFor() != tt.want.BlockFor() ||
			got.Algorithm() != tt.want.Algorithm() || fmt.Sprint(got.Limits()) != fmt.Sprint(tt.want.Limits()) || got.header != tt.want.header {
			t.Errorf("step %d (%s): With gives %s %q %v %v, want %s %q %v %v", i, tt.name,
				got.ID(), got.Name(), got.BlockFor(), got.Limits(), tt.want.ID(), tt.want.Name(), tt.want.BlockFor(), tt.want.Limits())
		}
		if after := tt.p.ID() + " " + tt.p.String() + " " + tt.p.BlockFor().String(); after != before {
			t.Errorf("step %d (%s): p changed from %q to %q", i, tt.name, before, after)
		}
	}
}

// mustNewPolicy builds a policy with a penalty, as With must.
func mustNewPolicy(t *testing.T, name string, alg Algorithm, block time.Duration, limits ...Limit) *Policy {
	t.Helper()
	p, err := buildPolicy(name, alg, limits, block, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
