package client

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

var testNow = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestReadAnswer pins what each form of the rate-limit fields says, and
// that malformed fields and members are ignored.
func TestReadAnswer(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name string
		h    http.Header
		want answer
	}{
		{"no fields", hdr("Content-Type", "text/plain"), answer{}},
		{
			"draft-11 as this project writes it",
			hdr("RateLimit-Policy", `"hello-1s";q=10;w=1, "hello-1m";q=120;w=60, "hello-1h";q=240;w=3600`,
				"RateLimit", `"hello-1s";r=9;t=0`),
			answer{form: formIETF,
				policies: []policyInfo{
					{key: "hello-1s", name: "hello-1s", quota: 10, window: sec},
					{key: "hello-1m", name: "hello-1m", quota: 120, window: 60 * sec},
					{key: "hello-1h", name: "hello-1h", quota: 240, window: 3600 * sec},
				},
				limits: []limitInfo{{key: "hello-1s", name: "hello-1s", remaining: 9, wait: sec}}},
		},
		{
			"draft-10: same syntax, t until the whole quota is back; waiting t+1 is safe",
			hdr("RateLimit-Policy", `"default-1h";q=240;w=3600`, "RateLimit", `"default-1h";r=0;t=3570`),
			answer{form: formIETF,
				policies: []policyInfo{{key: "default-1h", name: "default-1h", quota: 240, window: 3600 * sec}},
				limits:   []limitInfo{{key: "default-1h", name: "default-1h", remaining: 0, wait: 3571 * sec, least: 3570 * sec}}},
		},
		{
			"concurrent limit: no window, no t",
			hdr("RateLimit-Policy", `"jobs";q=5;qu="concurrent-requests"`, "RateLimit", `"jobs";r=2`),
			answer{form: formIETF,
				policies: []policyInfo{{key: "jobs", name: "jobs", quota: 5, concurrent: true}},
				limits:   []limitInfo{{key: "jobs", name: "jobs", remaining: 2, wait: DefaultPause}}},
		},
		{
			"token names and a partition key keep quotas apart",
			hdr("RateLimit", `burst;r=1;t=2;pk=:YWJj:, "burst";r=5;t=1`),
			answer{form: formIETF, limits: []limitInfo{
				{key: "burst\x00abc", name: "burst", remaining: 1, wait: 3 * sec, least: 2 * sec},
				{key: "burst", name: "burst", remaining: 5, wait: 2 * sec, least: sec},
			}},
		},
		{
			"several field lines are one list",
			http.Header{"Ratelimit": {`"a";r=1;t=1`, `"b";r=2;t=2`}},
			answer{form: formIETF, limits: []limitInfo{
				{key: "a", name: "a", remaining: 1, wait: 2 * sec, least: sec},
				{key: "b", name: "b", remaining: 2, wait: 3 * sec, least: 2 * sec},
			}},
		},
		{
			"a repeated member keeps the least remaining and the longest wait",
			hdr("RateLimit", `"a";r=5;t=1, "a";r=2;t=0`),
			answer{form: formIETF, limits: []limitInfo{{key: "a", name: "a", remaining: 2, wait: 2 * sec, least: sec}}},
		},
		{
			"a repeated parameter: the last value wins",
			hdr("RateLimit", `"a";r=5;r=0;t=3`),
			answer{form: formIETF, limits: []limitInfo{{key: "a", name: "a", remaining: 0, wait: 4 * sec, least: 3 * sec}}},
		},
		{
			"members with a negative, missing or non-integer r or t are skipped",
			hdr("RateLimit", `"neg";r=-1;t=1, "none";t=1, "dec";r=1.5, "str";r="1", "badt";r=1;t=-2, 7;r=1, ("in");r=1, "ok";r=1`),
			answer{form: formIETF, limits: []limitInfo{{key: "ok", name: "ok", remaining: 1, wait: DefaultPause}}},
		},
		{
			"policy members without a valid quota are skipped; a bad window is not said",
			hdr("RateLimit-Policy", `"noq";w=1, "negq";q=-1;w=1, "badw";q=5;w=0, "decw";q=5;w=1.5, "ok";q=3;w=2, "ok";q=9;w=9`),
			answer{policies: []policyInfo{
				{key: "badw", name: "badw", quota: 5},
				{key: "decw", name: "decw", quota: 5},
				{key: "ok", name: "ok", quota: 3, window: 2 * sec},
			}},
		},
		{
			"a malformed RateLimit is ignored whole, and the legacy fields are read",
			hdr("RateLimit", `"a";r=1;t=1,`, "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "7", "X-RateLimit-Limit", "10"),
			answer{form: formXRateLimit,
				policies: []policyInfo{{quota: 10}},
				limits:   []limitInfo{{remaining: 4, wait: 7 * sec, least: 6 * sec}}},
		},
		{
			"huge sf-integers make the field malformed",
			hdr("RateLimit", `"a";r=1234567890123456;t=1`),
			answer{},
		},
		{
			"largest sf-integers are clamped to about 31 years",
			hdr("RateLimit", `"a";r=999999999999999;t=999999999999999`),
			answer{form: formIETF, limits: []limitInfo{{key: "a", name: "a", remaining: maxSeconds, wait: (maxSeconds + 1) * sec, least: maxSeconds * sec}}},
		},
		{
			"draft-06 as this project writes it",
			hdr("RateLimit-Limit", "10", "RateLimit-Remaining", "3", "RateLimit-Reset", "1"),
			answer{form: formDraft06,
				policies: []policyInfo{{quota: 10}},
				limits:   []limitInfo{{remaining: 3, wait: sec}}},
		},
		{
			"draft-03 RateLimit-Limit with quota policies",
			hdr("RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "0", "RateLimit-Reset", "0"),
			answer{form: formDraft06,
				policies: []policyInfo{{quota: 10}},
				limits:   []limitInfo{{remaining: 0, wait: 0}}},
		},
		{
			"draft-06 with a window and no reset",
			hdr("RateLimit-Limit", "10;w=2", "RateLimit-Remaining", "0"),
			answer{form: formDraft06,
				policies: []policyInfo{{quota: 10, window: 2 * sec}},
				limits:   []limitInfo{{remaining: 0, wait: DefaultPause}}},
		},
		{
			"draft-06 with a malformed reset and limit: only the remaining",
			hdr("RateLimit-Limit", "ten", "RateLimit-Remaining", "2", "RateLimit-Reset", "-1"),
			answer{form: formDraft06, limits: []limitInfo{{remaining: 2, wait: DefaultPause}}},
		},
		{
			"draft-06 wins over X-RateLimit",
			hdr("RateLimit-Remaining", "2", "RateLimit-Reset", "3", "X-RateLimit-Remaining", "9", "X-RateLimit-Reset", "9"),
			answer{form: formDraft06, limits: []limitInfo{{remaining: 2, wait: 3 * sec, least: 2 * sec}}},
		},
		{
			"IETF wins over the legacy fields",
			hdr("RateLimit", `"a";r=1;t=0`, "RateLimit-Remaining", "2", "X-RateLimit-Remaining", "9"),
			answer{form: formIETF, limits: []limitInfo{{key: "a", name: "a", remaining: 1, wait: sec}}},
		},
		{
			"X-RateLimit-Reset as a Unix time, from the response's Date",
			hdr("Date", "Sat, 01 Mar 2025 11:59:00 GMT", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset", "1740830370"), // 11:59:30
			answer{form: formXRateLimit, limits: []limitInfo{{remaining: 0, wait: 30 * sec, least: 29 * sec}}},
		},
		{
			"X-RateLimit-Reset as a Unix time in the past is now",
			hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1000000000"),
			answer{form: formXRateLimit, limits: []limitInfo{{remaining: 0, wait: 0}}},
		},
		{
			"X-RateLimit with huge, negative and garbage values",
			hdr("X-RateLimit-Remaining", "99999999999999999999999", "X-RateLimit-Reset", "-5", "X-RateLimit-Limit", "1e3"),
			answer{form: formXRateLimit, limits: []limitInfo{{remaining: maxSeconds, wait: DefaultPause}}},
		},
		{
			"X-RateLimit-Remaining negative: no answer",
			hdr("X-RateLimit-Remaining", "-1", "X-RateLimit-Reset", "5"),
			answer{},
		},
		{
			"Retry-After in seconds",
			hdr("Retry-After", "120"),
			answer{retryAfter: 120 * sec, hasRetryAfter: true},
		},
		{
			"Retry-After as an HTTP-date, from the response's Date",
			hdr("Date", "Sat, 01 Mar 2025 11:00:00 GMT", "Retry-After", "Sat, 01 Mar 2025 11:00:05 GMT"),
			answer{retryAfter: 5 * sec, hasRetryAfter: true},
		},
		{
			"Retry-After as an HTTP-date, from now without a Date",
			hdr("Retry-After", "Sat, 01 Mar 2025 12:00:42 GMT"),
			answer{retryAfter: 42 * sec, hasRetryAfter: true},
		},
		{
			"Retry-After as an obsolete RFC 850 date",
			hdr("Retry-After", "Saturday, 01-Mar-25 12:00:07 GMT"),
			answer{retryAfter: 7 * sec, hasRetryAfter: true},
		},
		{
			"Retry-After in the past is 0",
			hdr("Retry-After", "Sat, 01 Mar 2025 11:00:00 GMT"),
			answer{retryAfter: 0, hasRetryAfter: true},
		},
		{
			"Retry-After huge is clamped",
			hdr("Retry-After", "99999999999999999999999999"),
			answer{retryAfter: maxSeconds * sec, hasRetryAfter: true},
		},
		{"Retry-After negative is ignored", hdr("Retry-After", "-5"), answer{}},
		{"Retry-After decimal is ignored", hdr("Retry-After", "1.5"), answer{}},
		{"Retry-After garbage is ignored", hdr("Retry-After", "soon"), answer{}},
		{
			"garbage everywhere",
			hdr("RateLimit-Policy", "\x00\xff", "RateLimit", "}{", "RateLimit-Remaining", "x", "X-RateLimit-Remaining", "",
				"Retry-After", "Mon, 99 Foo"),
			answer{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := readAnswer(tc.h, testNow)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("readAnswer =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// FuzzReadAnswer checks that no header makes reading panic or produce a
// negative count or wait.
func FuzzReadAnswer(f *testing.F) {
	f.Add(`"a";q=10;w=1`, `"a";r=0;t=1`, "5", "1", "120")
	f.Add("garbage", "((", "-1", "99999999999999999999", "Sun, 06 Nov 1994 08:49:37 GMT")
	f.Fuzz(func(t *testing.T, policy, rl, rem, reset, retry string) {
		h := http.Header{"Ratelimit-Policy": {policy}, "Ratelimit": {rl}, "Ratelimit-Remaining": {rem},
			"Ratelimit-Reset": {reset}, "X-Ratelimit-Remaining": {rem}, "X-Ratelimit-Reset": {reset}, "Retry-After": {retry}}
		a := readAnswer(h, testNow)
		for _, l := range a.limits {
			if l.remaining < 0 || l.wait < 0 {
				t.Errorf("limit %+v", l)
			}
		}
		for _, p := range a.policies {
			if p.quota < -1 || p.window < 0 {
				t.Errorf("policy %+v", p)
			}
		}
		if a.retryAfter < 0 {
			t.Errorf("Retry-After %s", a.retryAfter)
		}
	})
}
