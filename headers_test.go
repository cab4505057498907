package ratelimit

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// SetHeaders
// ---------------------------------------------------------------------------

func policyOf(t testing.TB, name string, alg Algorithm, limits ...Limit) *Policy {
	t.Helper()
	p, err := NewPolicy(name, alg, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const allHeaderStyles = HeadersIETF | HeadersDraft06 | HeadersXRateLimit | HeadersDraft10

var legacyKeys = []string{
	"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
}

func TestSetHeaders(t *testing.T) {
	p3 := MustParsePolicy("10/s, 120/m, 240/h")
	p3Policy := hasPolicy(quotaPolicy{"default-1s", 10, 1}, quotaPolicy{"default-1m", 120, 60}, quotaPolicy{"default-1h", 240, 3600})
	subSecond := MustParsePolicy("10/500ms, 20/2s, 30/1ms, 40/300ms", Named("sub"))
	bucket := policyOf(t, "tb", TokenBucket,
		Limit{Rate: 10, Period: time.Second, Burst: 25},
		Limit{Rate: 100, Period: time.Minute},
	)
	smallBurst := policyOf(t, "sb", TokenBucket, Limit{Rate: 20, Period: time.Second, Burst: 5})
	named := policyOf(t, "api", FixedWindow,
		Limit{Rate: 100, Period: time.Minute, Name: "burst"},
		Limit{Rate: 1000, Period: 24 * time.Hour, Name: "daily"},
	)
	ietfKeys := []string{"RateLimit-Policy", "RateLimit"}

	tests := []struct {
		name   string
		style  HeaderStyle
		p      *Policy
		d      Decision
		before http.Header // headers present before the call
		checks []respCheck
	}{
		{
			name:  "ietf, three limits in order",
			style: HeadersIETF, p: p3,
			d: Decision{Allowed: true, Limit: 0, Remaining: 9, ResetAfter: time.Second, RefillAfter: time.Second},
			checks: []respCheck{
				hasOnlyHeaders(ietfKeys...), p3Policy, hasRateLimit("default-1s", 9, 1),
				// The exact bytes, once: members joined by ", ".
				hasHeader("RateLimit-Policy", `"default-1s";q=10;w=1, "default-1m";q=120;w=60, "default-1h";q=240;w=3600`),
				hasHeader("RateLimit", `"default-1s";r=9;t=1`),
			},
		},
		{
			name:  "ietf, most restrictive is the hour",
			style: HeadersIETF, p: p3,
			d:      Decision{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: 59*time.Minute + 30*time.Second, RefillAfter: 15 * time.Second, RetryAfter: 15 * time.Second},
			checks: []respCheck{p3Policy, hasRateLimit("default-1h", 0, 15), hasNoHeader("Retry-After")},
		},
		{
			name:  "draft-10: t is until the whole quota is back",
			style: HeadersDraft10, p: p3,
			d:      Decision{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: 59*time.Minute + 30*time.Second, RefillAfter: 15 * time.Second, RetryAfter: 15 * time.Second},
			checks: []respCheck{hasOnlyHeaders(ietfKeys...), p3Policy, hasRateLimit("default-1h", 0, 3570)},
		},
		{
			name:  "draft-11 wins over draft-10",
			style: HeadersIETF | HeadersDraft10, p: p3,
			d:      Decision{Allowed: false, Limit: 2, Remaining: 0, ResetAfter: 59*time.Minute + 30*time.Second, RefillAfter: 15 * time.Second, RetryAfter: 15 * time.Second},
			checks: []respCheck{hasOnlyHeaders(ietfKeys...), hasRateLimit("default-1h", 0, 15)},
		},
		{
			name:  "sub-second periods say what they admit in a second",
			style: HeadersIETF, p: subSecond,
			d: Decision{Allowed: true, Limit: 1, Remaining: 19, ResetAfter: 1500 * time.Millisecond, RefillAfter: 2500 * time.Millisecond},
			checks: []respCheck{
				hasPolicy(quotaPolicy{"sub-500ms", 20, 1}, quotaPolicy{"sub-2s", 20, 2}, quotaPolicy{"sub-1ms", 30000, 1}, quotaPolicy{"sub-300ms", 120, 1}),
				hasRateLimit("sub-2s", 19, 2),
			},
		},
		{
			name:  "token bucket advertises the burst",
			style: HeadersIETF | HeadersDraft06, p: bucket,
			d: Decision{Allowed: true, Limit: 0, Remaining: 24, ResetAfter: 100 * time.Millisecond, RefillAfter: 100 * time.Millisecond},
			checks: joinChecks(
				[]respCheck{hasPolicy(quotaPolicy{"tb-1s", 25, 1}, quotaPolicy{"tb-1m", 100, 60}), hasRateLimit("tb-1s", 24, 0)},
				hasLegacy("RateLimit-", 25, 24, 1),
			),
		},
		{
			name:  "token bucket with a burst below its rate advertises the rate",
			style: HeadersIETF, p: smallBurst,
			d:      Decision{Allowed: true, Limit: 0, Remaining: 4, ResetAfter: 50 * time.Millisecond, RefillAfter: 50 * time.Millisecond},
			checks: []respCheck{hasPolicy(quotaPolicy{"sb-1s", 20, 1}), hasRateLimit("sb-1s", 4, 0)},
		},
		{
			name:  "custom limit names",
			style: HeadersIETF, p: named,
			d:      Decision{Allowed: true, Limit: 1, Remaining: 998, ResetAfter: 23 * time.Hour, RefillAfter: 23 * time.Hour},
			checks: []respCheck{hasPolicy(quotaPolicy{"burst", 100, 60}, quotaPolicy{"daily", 1000, 86400}), hasRateLimit("daily", 998, 82800)},
		},
		{
			name:  "all styles together",
			style: allHeaderStyles, p: p3,
			d: Decision{Allowed: true, Limit: 1, Remaining: 57, ResetAfter: 42*time.Second + time.Nanosecond, RefillAfter: 3 * time.Second},
			checks: joinChecks(
				[]respCheck{hasOnlyHeaders(append(ietfKeys, legacyKeys...)...), p3Policy, hasRateLimit("default-1m", 57, 3)},
				hasLegacy("RateLimit-", 120, 57, 43),
				hasLegacy("X-RateLimit-", 120, 57, 43),
			),
		},
		{
			name:  "legacy X- style alone",
			style: HeadersXRateLimit, p: p3,
			d: Decision{Allowed: true, Limit: 0, Remaining: 3, ResetAfter: 700 * time.Millisecond},
			checks: joinChecks(
				[]respCheck{hasOnlyHeaders("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")},
				hasLegacy("X-RateLimit-", 10, 3, 1),
			),
		},
		{
			name:  "draft-06 style alone",
			style: HeadersDraft06, p: p3,
			d: Decision{Allowed: true, Limit: 2, Remaining: 200, ResetAfter: time.Hour},
			checks: joinChecks(
				[]respCheck{hasOnlyHeaders("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")},
				hasLegacy("RateLimit-", 240, 200, 3600),
			),
		},
		{
			name:  "reset rounds up: 1ns is 1s; t rounds down: 999ms is 0",
			style: HeadersIETF | HeadersDraft06, p: p3,
			d: Decision{Limit: 0, ResetAfter: time.Nanosecond, RefillAfter: 999 * time.Millisecond},
			checks: joinChecks(
				[]respCheck{hasRateLimit("default-1s", 0, 0)},
				hasLegacy("RateLimit-", 10, 0, 1),
			),
		},
		{
			name:  "t: exactly 2s is 2",
			style: HeadersIETF, p: p3,
			d:      Decision{Limit: 0, ResetAfter: 3 * time.Second, RefillAfter: 2 * time.Second},
			checks: []respCheck{hasRateLimit("default-1s", 0, 2)},
		},
		{
			name:  "t: 2.999999s is 2; draft-10's 2.000001s is 3",
			style: HeadersIETF, p: p3,
			d:      Decision{Limit: 0, ResetAfter: 3 * time.Second, RefillAfter: 3*time.Second - time.Microsecond},
			checks: []respCheck{hasRateLimit("default-1s", 0, 2)},
		},
		{
			name:  "draft-10: 2.000001s is 3",
			style: HeadersDraft10, p: p3,
			d:      Decision{Limit: 0, ResetAfter: 2*time.Second + time.Microsecond, RefillAfter: time.Second},
			checks: []respCheck{hasRateLimit("default-1s", 0, 3)},
		},
		{
			name:  "t: negative reset is 0, negative remaining is 0",
			style: HeadersIETF | HeadersXRateLimit, p: p3,
			d: Decision{Limit: 1, Remaining: -5, ResetAfter: -time.Second, RefillAfter: -time.Second},
			checks: joinChecks(
				[]respCheck{hasRateLimit("default-1m", 0, 0)},
				hasLegacy("X-RateLimit-", 120, 0, 0),
			),
		},
		{
			name:  "extreme values stay valid sf-integers",
			style: HeadersIETF | HeadersDraft06, p: p3,
			d: Decision{Limit: 2, Remaining: math.MaxInt64, ResetAfter: math.MaxInt64, RefillAfter: math.MaxInt64},
			checks: joinChecks(
				[]respCheck{hasRateLimit("default-1h", 999_999_999_999_999, 9_223_372_036)},
				hasLegacy("RateLimit-", 240, 999_999_999_999_999, 9_223_372_037),
			),
		},
		{
			name:  "zero Decision describes limit 0",
			style: allHeaderStyles, p: p3,
			checks: joinChecks(
				[]respCheck{p3Policy, hasRateLimit("default-1s", 0, 0)},
				hasLegacy("RateLimit-", 10, 0, 0),
				hasLegacy("X-RateLimit-", 10, 0, 0),
			),
		},
		{
			name:  "replaces previous values",
			style: allHeaderStyles, p: p3,
			d: Decision{Allowed: true, Limit: 0, Remaining: 4, ResetAfter: time.Second, RefillAfter: time.Second},
			before: http.Header{
				"Ratelimit":         {`"old";r=1;t=1`, `"older";r=2;t=2`},
				"Ratelimit-Policy":  {`"old";q=1;w=1`},
				"X-Ratelimit-Reset": {"1700000000"},
				"Retry-After":       {"7"},
			},
			checks: joinChecks(
				[]respCheck{p3Policy, hasRateLimit("default-1s", 4, 1), hasHeader("Retry-After", "7")},
				hasLegacy("X-RateLimit-", 10, 4, 1),
			),
		},
		{
			name:  "limit index past the end: policy only, stale values removed",
			style: allHeaderStyles, p: p3,
			d:      Decision{Limit: 3, Remaining: 1, ResetAfter: time.Second, Limits: []LimitStatus{{}}},
			before: http.Header{"Ratelimit": {"stale"}, "X-Ratelimit-Limit": {"stale"}, "Content-Type": {"text/plain"}},
			checks: []respCheck{hasOnlyHeaders("RateLimit-Policy", "Content-Type"), p3Policy},
		},
		{
			name:  "negative limit index",
			style: allHeaderStyles, p: p3,
			d:      Decision{Limit: -1},
			checks: []respCheck{hasOnlyHeaders("RateLimit-Policy"), p3Policy},
		},
		{
			name:  "huge limit index",
			style: HeadersIETF, p: p3,
			d:      Decision{Limit: math.MaxInt},
			checks: []respCheck{hasOnlyHeaders("RateLimit-Policy"), p3Policy},
		},
		{
			name:  "nil policy writes nothing and removes stale values",
			style: allHeaderStyles, p: nil,
			d:      Decision{Allowed: true, Remaining: 3},
			before: http.Header{"Ratelimit-Policy": {"stale"}, "Ratelimit-Reset": {"9"}, "Vary": {"Origin"}},
			checks: []respCheck{hasOnlyHeaders("Vary")},
		},
		{
			name:  "zero Policy value",
			style: allHeaderStyles, p: &Policy{},
			checks: []respCheck{hasOnlyHeaders()},
		},
		{
			name:  "HeadersNone writes nothing",
			style: HeadersNone, p: p3,
			d:      Decision{Allowed: true, Remaining: 9},
			before: http.Header{"Ratelimit": {"kept"}},
			checks: []respCheck{hasOnlyHeaders("RateLimit"), hasHeader("RateLimit", "kept")},
		},
		{
			name:  "unknown style bits are ignored",
			style: 1 << 7, p: p3,
			checks: []respCheck{hasOnlyHeaders()},
		},
		{
			name:  "styles not selected are left alone",
			style: HeadersDraft06, p: p3,
			d:      Decision{Limit: 0, Remaining: 2, ResetAfter: time.Second},
			before: http.Header{"Ratelimit": {`"other";r=1;t=1`}},
			checks: joinChecks(
				[]respCheck{hasHeader("RateLimit", `"other";r=1;t=1`)},
				hasLegacy("RateLimit-", 10, 2, 1),
			),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			for k, v := range tc.before {
				rec.Header()[k] = append([]string(nil), v...)
			}
			setStyleFields(rec.Header(), tc.style, tc.p, tc.d, nil) // Retry-After: TestSetHeadersRetryAfter
			rec.WriteHeader(http.StatusOK)
			for _, check := range tc.checks {
				check(t, rec)
			}
		})
	}
}

func TestSetHeadersNilHeader(t *testing.T) {
	SetHeaders(nil, allHeaderStyles, MustParsePolicy("1/s"), Decision{}) // must not panic
	setRetryAfter(nil, Decision{RetryAfter: time.Second})
}

// TestSetHeadersRetryAfter: SetHeaders writes Retry-After for a denial
// (as setRetryAfter, pinned below), in every style but HeadersNone, and
// none for an admission.
func TestSetHeadersRetryAfter(t *testing.T) {
	p := MustParsePolicy("10/s")
	for i, c := range []struct {
		style HeaderStyle
		d     Decision
		want  string
	}{
		{HeadersIETF, Decision{RetryAfter: 1500 * time.Millisecond}, "2"},
		{HeadersDraft06, Decision{RetryAfter: time.Second}, "1"},
		{HeadersXRateLimit | HeadersDraft10, Decision{RetryAfter: 3 * time.Second}, "3"},
		{HeadersIETF, Decision{Allowed: true, RetryAfter: time.Second}, ""},
		{HeadersIETF, Decision{RetryAfter: Never}, ""},
		{HeadersNone, Decision{RetryAfter: time.Second}, ""},
	} {
		h := http.Header{}
		SetHeaders(h, c.style, p, c.d)
		if got := h.Get("Retry-After"); got != c.want {
			t.Errorf("step %d: Retry-After %q, want %q", i, got, c.want)
		}
	}
}

// TestSetHeadersSharesNoSlices checks that the value slices handed to the
// map cannot be appended into each other.
func TestSetHeadersSharesNoSlices(t *testing.T) {
	h := http.Header{}
	SetHeaders(h, allHeaderStyles, MustParsePolicy("10/s, 120/m"), Decision{Remaining: 3, ResetAfter: time.Second})
	h.Add("RateLimit-Policy", "x")
	h.Add("RateLimit", "y")
	if got := h.Values("RateLimit"); len(got) != 2 || !strings.HasPrefix(got[0], `"default-1s"`) {
		t.Errorf("RateLimit = %q after appending to RateLimit-Policy", got)
	}
	if got := h.Get("RateLimit-Limit"); got != "10" {
		t.Errorf("RateLimit-Limit = %q, want 10", got)
	}
}

func TestHeaderSFStringEscapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"default-1s", "default-1s"},
		{`a"b\c`, `a"b\c`},
		{"tab\there\x7f\xff", "tab?here??"},
		{"", ""},
	} {
		enc := string(appendSFString(nil, tc.in))
		items, err := parseSFList(enc)
		if err != nil || len(items) != 1 || items[0].Value != tc.want {
			t.Errorf("appendSFString(%q) = %s, parses to %v (%v), want %q", tc.in, enc, items, err, tc.want)
		}
	}
}

func TestHeaderCeilSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{math.MinInt64, 0}, {-time.Second, 0}, {0, 0}, {1, 1}, {time.Second - 1, 1},
		{time.Second, 1}, {time.Second + 1, 2}, {2 * time.Second, 2},
		{2*time.Second + time.Microsecond, 3}, {math.MaxInt64, 9_223_372_037},
	} {
		if got := ceilSeconds(tc.d); got != tc.want {
			t.Errorf("ceilSeconds(%d) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestHeaderFloorSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{math.MinInt64, 0}, {-time.Second, 0}, {0, 0}, {1, 0}, {time.Second - 1, 0},
		{time.Second, 1}, {2*time.Second - time.Microsecond, 1}, {math.MaxInt64, 9_223_372_036},
	} {
		if got := floorSeconds(tc.d); got != tc.want {
			t.Errorf("floorSeconds(%d) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// FuzzSetHeaders checks that any decision and style give headers that parse
// back, in canonical keys, without panicking.
func FuzzSetHeaders(f *testing.F) {
	f.Add(uint8(allHeaderStyles), 0, int64(0), int64(0), false)
	f.Add(uint8(allHeaderStyles), 2, int64(-1), int64(-1), true)
	f.Add(uint8(HeadersIETF), -3, int64(math.MaxInt64), int64(math.MaxInt64), false)
	f.Add(uint8(0xff), 7, int64(math.MinInt64), int64(math.MinInt64), true)
	policies := []*Policy{
		MustParsePolicy("10/s, 120/m, 240/h"),
		MustParsePolicy("5/250ms, 1000000000/366d", WithAlgorithm(TokenBucket), WithBurst(MaxRate)), // the largest numbers a policy allows
		nil,
	}
	f.Fuzz(func(t *testing.T, style uint8, limit int, remaining, reset int64, tb bool) {
		for _, p := range policies {
			h := http.Header{}
			d := Decision{Limit: limit, Remaining: remaining, ResetAfter: time.Duration(reset), RefillAfter: time.Duration(reset / 2), RetryAfter: time.Duration(reset)}
			SetHeaders(h, HeaderStyle(style), p, d)
			for k, vals := range h {
				if k != http.CanonicalHeaderKey(k) {
					t.Errorf("key %q is not canonical", k)
				}
				if len(vals) != 1 {
					t.Errorf("%s has %d values", k, len(vals))
				}
				if k == "Retry-After" {
					if _, err := parseDelaySeconds(vals[0]); err != nil {
						t.Error(err)
					}
					continue
				}
				if _, err := parseSFList(vals[0]); err != nil {
					t.Error(err)
				}
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Retry-After
// ---------------------------------------------------------------------------

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		d      Decision
		before string // a previous Retry-After, if any
		checks []respCheck
	}{
		{"allowed: absent", Decision{Allowed: true}, "", []respCheck{hasNoHeader("Retry-After")}},
		{"allowed: previous value kept", Decision{Allowed: true, RetryAfter: time.Second}, "120", []respCheck{hasHeader("Retry-After", "120")}},
		{"never: absent", Decision{RetryAfter: Never}, "", []respCheck{hasNoHeader("Retry-After")}},
		{"never: previous value kept", Decision{RetryAfter: Never}, "5", []respCheck{hasHeader("Retry-After", "5")}},
		{"1ns is 1", Decision{RetryAfter: time.Nanosecond}, "", []respCheck{hasRetryAfter(1)}},
		{"500ms is 1", Decision{RetryAfter: 500 * time.Millisecond}, "", []respCheck{hasRetryAfter(1)}},
		{"exactly 2s is 2", Decision{RetryAfter: 2 * time.Second}, "", []respCheck{hasRetryAfter(2)}},
		{"2.000001s is 3", Decision{RetryAfter: 2*time.Second + time.Microsecond}, "", []respCheck{hasRetryAfter(3)}},
		{"an hour", Decision{RetryAfter: time.Hour}, "", []respCheck{hasRetryAfter(3600)}},
		{"denied with 0 is at least 1", Decision{}, "", []respCheck{hasRetryAfter(1)}},
		{"negative other than Never is at least 1", Decision{RetryAfter: -5 * time.Second}, "", []respCheck{hasRetryAfter(1)}},
		{"largest duration", Decision{RetryAfter: math.MaxInt64}, "", []respCheck{hasRetryAfter(9_223_372_037)}},
		{"replaces a previous value", Decision{RetryAfter: 3 * time.Second}, "60", []respCheck{hasRetryAfter(3)}},
		{"never before the effective window ends", Decision{RetryAfter: 2 * time.Second, RefillAfter: 5500 * time.Millisecond}, "", []respCheck{hasRetryAfter(5)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			if tc.before != "" {
				rec.Header().Set("Retry-After", tc.before)
			}
			setRetryAfter(rec.Header(), tc.d)
			rec.WriteHeader(http.StatusTooManyRequests)
			for _, check := range tc.checks {
				check(t, rec)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Benchmark
// ---------------------------------------------------------------------------

func BenchmarkSetHeaders(b *testing.B) {
	p := MustParsePolicy("10/s, 120/m, 240/h")
	d := Decision{Allowed: true, Limit: 1, Remaining: 57, ResetAfter: 42 * time.Second}
	for _, bc := range []struct {
		name  string
		style HeaderStyle
	}{
		{"ietf", HeadersIETF},
		{"all", allHeaderStyles},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := http.Header{}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				SetHeaders(h, bc.style, p, d)
			}
		})
	}
}
