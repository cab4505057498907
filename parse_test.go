package ratelimit

import (
	"strings"
	"testing"
	"time"
)

func TestParsePolicy(t *testing.T) {
	cases := []struct {
		in   string
		want []Limit // Rate and Period only
	}{
		{"10/s, 120/m, 240/h", []Limit{perSecond(10), perMinute(120), perHour(240)}},
		{"10/second;120/minute", []Limit{perSecond(10), perMinute(120)}},
		{"1000/24h", []Limit{{Rate: 1000, Period: 24 * time.Hour}}},
		{"5/1d", []Limit{perDay(5)}},
		{" 3 / 15m ; 7/2 hours ", []Limit{{Rate: 3, Period: 15 * time.Minute}, {Rate: 7, Period: 2 * time.Hour}}},
		{"100/500ms", []Limit{{Rate: 100, Period: 500 * time.Millisecond}}},
		{"9/1m30s", []Limit{{Rate: 9, Period: 90 * time.Second}}},
		{"1/Sec,2/MIN", []Limit{perSecond(1), perMinute(2)}},
	}
	for _, c := range cases {
		p, err := ParsePolicy(c.in)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", c.in, err)
			continue
		}
		got := p.Limits()
		if len(got) != len(c.want) {
			t.Errorf("ParsePolicy(%q): %d limits, want %d", c.in, len(got), len(c.want))
			continue
		}
		for i := range got {
			if got[i].Rate != c.want[i].Rate || got[i].Period != c.want[i].Period {
				t.Errorf("ParsePolicy(%q) limit %d: %d/%s, want %d/%s", c.in, i, got[i].Rate, got[i].Period, c.want[i].Rate, c.want[i].Period)
			}
		}
		if p.Name() != DefaultPolicyName || p.Algorithm() != SlidingWindow {
			t.Errorf("ParsePolicy(%q): name %q algorithm %s", c.in, p.Name(), p.Algorithm())
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	cases := []struct{ in, wantText string }{
		{"", "no limits"},
		{" , ;", "no limits"},
		{"10", "RATE/PERIOD"},
		{"0/s", "limit 1"},
		{"-1/s", "positive whole number"},
		{"x/s", "positive whole number"},
		{"10/s, 5/fortnight", `limit 2 "5/fortnight"`},
		{"10/", "missing period"},
		{"10/s, 20/s", "duplicate period"},
		{"10/s, 20/1000ms", "duplicate period"},
		{"10/0s", "period"},
		{"10/1us", "between 1ms"},
		{"10/400d", "longer than the maximum"},
		{"10/106752d", "longer than the maximum"},
		{"10/999999h", "longer than the maximum"},
		{"2000000000/s", "above the maximum"},
		{"99999999999999999999/s", "positive whole number"},
		{strings.Repeat("1/s,", 2000), "too long"},
		{"1/s,2/2s,3/3s,4/4s,5/5s,6/6s,7/7s,8/8s,9/9s", "at most 8"},
	}
	for _, c := range cases {
		_, err := ParsePolicy(c.in)
		if err == nil || !strings.Contains(err.Error(), c.wantText) || !strings.HasPrefix(err.Error(), "ratelimit: ") {
			t.Errorf("ParsePolicy(%.40q): error %v, want one containing %q", c.in, err, c.wantText)
		}
	}
	if p, err := ParsePolicy("10/s", Named("x"), nil); err == nil || p != nil || err.Error() != "ratelimit: ParsePolicy: option 1 is nil" {
		t.Errorf("ParsePolicy with a nil option: %v, %v; want an error naming option 1", p, err)
	}
}

// FuzzParsePolicy: any input gives a policy or an error, never a panic,
// and every accepted policy is valid and round-trips through String.
func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"10/s, 120/m, 240/h", "10/second;120/minute", "1000/24h", "1/1m30s", "5/7ms", "0/s", "1/-1s", "9/999999d", ",,,", "1/s;1/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "ratelimit: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		for _, l := range p.Limits() {
			if l.Rate < 1 || l.Rate > MaxRate || l.Period < MinPeriod || l.Period > MaxPeriod {
				t.Fatalf("%q accepted an invalid limit %+v", s, l)
			}
		}
		again, err := ParsePolicy(p.String())
		if err != nil || again.ID() != p.ID() {
			t.Fatalf("%q: String() %q does not parse back to the same policy: %v", s, p.String(), err)
		}
	})
}

// perSecond, perMinute, perHour and perDay are Limits of rate per period.
func perSecond(rate int64) Limit { return Limit{Rate: rate, Period: time.Second} }
func perMinute(rate int64) Limit { return Limit{Rate: rate, Period: time.Minute} }
func perHour(rate int64) Limit   { return Limit{Rate: rate, Period: time.Hour} }
func perDay(rate int64) Limit    { return Limit{Rate: rate, Period: 24 * time.Hour} }
