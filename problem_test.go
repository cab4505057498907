package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// hasProblem decodes the body as a JSON object and checks that its members
// are exactly want (numbers as float64, as encoding/json decodes them into
// any). It also checks that the body decodes into Problem without unknown
// members.
func hasProblem(want map[string]any) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		body := rec.Body.Bytes()
		if !json.Valid(body) {
			t.Errorf("body is not valid JSON: %s", body)
			return
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("body %s: %v", body, err)
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("body = %s\nmembers %v\nwant    %v", body, got, want)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var pb Problem
		if err := dec.Decode(&pb); err != nil {
			t.Errorf("decode into Problem: %v", err)
		}
	}
}

// bodyLacks checks that the body does not contain s.
func bodyLacks(s string) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if strings.Contains(rec.Body.String(), s) {
			t.Errorf("body %s contains %q", rec.Body.String(), s)
		}
	}
}

// problem builds the expected members: the fixed ones plus extra.
func wantProblem(detail string, extra map[string]any) map[string]any {
	m := map[string]any{
		"type":   ProblemType,
		"title":  "Too Many Requests",
		"status": float64(429),
		"detail": detail,
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestDefaultDeniedHandler(t *testing.T) {
	p3 := MustParsePolicy("10/s, 120/m, 240/h")
	bucket := policyOf(t, "tb", TokenBucket, Limit{Rate: 10, Period: time.Second, Burst: 25})
	sub := MustParsePolicy("3/500ms", Named("sub"))
	login := MustParsePolicy("5/15m, 100/h", Named("login"), BlockFor(time.Hour))
	common := []respCheck{
		hasStatus(http.StatusTooManyRequests),
		hasHeader("Content-Type", "application/problem+json"),
		hasHeader("Cache-Control", "no-store"),
		hasHeader("X-Content-Type-Options", "nosniff"),
		hasNoHeader("Retry-After"),
		hasNoHeader("RateLimit"),
		hasNoHeader("RateLimit-Policy"),
	}

	tests := []struct {
		name   string
		res    *Result // nil: no Result in the context
		checks []respCheck
	}{
		{
			name:   "no Result",
			checks: []respCheck{hasProblem(wantProblem("Rate limit exceeded.", nil))},
		},
		{
			name:   "zero Result",
			res:    &Result{},
			checks: []respCheck{hasProblem(wantProblem("Rate limit exceeded. Retry in 1 second.", map[string]any{"retry_after": float64(1)}))},
		},
		{
			name: "per-second limit, sub-second wait",
			res: &Result{Policy: p3, Keys: []string{"ip:203.0.113.7"}, Cost: 1, Decision: Decision{
				Limit: 0, RetryAfter: 300 * time.Millisecond, ResetAfter: time.Second,
			}},
			checks: []respCheck{hasProblem(wantProblem(`Rate limit "default-1s" (10 per 1s) exceeded. Retry in 1 second.`, map[string]any{
				"limit": "default-1s", "violated-policies": []any{"default-1s"}, "quota": float64(10), "window": float64(1), "retry_after": float64(1), "identifier": "ip",
			}))},
		},
		{
			name: "minute limit, wait rounds up",
			res: &Result{Policy: p3, Keys: []string{"user:42"}, Cost: 1, Decision: Decision{
				Limit: 1, Key: 0, RetryAfter: 42*time.Second + time.Microsecond, ResetAfter: time.Minute,
			}},
			checks: []respCheck{hasProblem(wantProblem(`Rate limit "default-1m" (120 per 1m) exceeded. Retry in 43 seconds.`, map[string]any{
				"limit": "default-1m", "violated-policies": []any{"default-1m"}, "quota": float64(120), "window": float64(60), "retry_after": float64(43), "identifier": "user",
			}))},
		},
		{
			name: "cost can never be admitted",
			res: &Result{Policy: p3, Keys: []string{"ip:192.0.2.1"}, Cost: 11, Decision: Decision{
				Limit: 0, RetryAfter: Never,
			}},
			checks: []respCheck{hasProblem(wantProblem(`This request's cost (11) exceeds the limit "default-1s" (10 per 1s) and can never be admitted.`, map[string]any{
				"limit": "default-1s", "violated-policies": []any{"default-1s"}, "quota": float64(10), "window": float64(1), "identifier": "ip",
			}))},
		},
		{
			name:   "never, without a policy or cost",
			res:    &Result{Decision: Decision{RetryAfter: Never}},
			checks: []respCheck{hasProblem(wantProblem(`This request's cost exceeds a rate limit and can never be admitted.`, nil))},
		},
		{
			name: "token bucket: quota is the burst",
			res:  &Result{Policy: bucket, Cost: 1, Decision: Decision{RetryAfter: 100 * time.Millisecond}},
			checks: []respCheck{hasProblem(wantProblem(`Rate limit "tb-1s" (10 per 1s, burst 25) exceeded. Retry in 1 second.`, map[string]any{
				"limit": "tb-1s", "violated-policies": []any{"tb-1s"}, "quota": float64(25), "window": float64(1), "retry_after": float64(1),
			}))},
		},
		{
			name: "sub-second period: what it admits in a second",
			res:  &Result{Policy: sub, Cost: 1, Decision: Decision{RetryAfter: 1200 * time.Millisecond}},
			checks: []respCheck{hasProblem(wantProblem(`Rate limit "sub-500ms" (3 per 500ms) exceeded. Retry in 2 seconds.`, map[string]any{
				"limit": "sub-500ms", "violated-policies": []any{"sub-500ms"}, "quota": float64(6), "window": float64(1), "retry_after": float64(2),
			}))},
		},
		{
			name: "a penalty says the client is blocked; every denying limit is named",
			res: &Result{Policy: login, Keys: []string{"ip:192.0.2.1"}, Cost: 1, Decision: Decision{
				Limit: 1, RetryAfter: time.Hour, Limits: []LimitStatus{{RetryAfter: time.Minute}, {RetryAfter: time.Hour}},
			}},
			checks: []respCheck{hasProblem(wantProblem(`Rate limit "login-1h" (100 per 1h) exceeded, so this client is blocked for 1h. Retry in 3600 seconds.`, map[string]any{
				"limit": "login-1h", "violated-policies": []any{"login-1h", "login-15m"}, "quota": float64(100), "window": float64(3600),
				"retry_after": float64(3600), "identifier": "ip",
			}))},
		},
		{
			name:   "limit index out of range",
			res:    &Result{Policy: p3, Decision: Decision{Limit: 7, RetryAfter: 3 * time.Second}},
			checks: []respCheck{hasProblem(wantProblem("Rate limit exceeded. Retry in 3 seconds.", map[string]any{"retry_after": float64(3)}))},
		},
		{
			name:   "nil policy",
			res:    &Result{Decision: Decision{Limit: -1, RetryAfter: 2 * time.Second}},
			checks: []respCheck{hasProblem(wantProblem("Rate limit exceeded. Retry in 2 seconds.", map[string]any{"retry_after": float64(2)}))},
		},
		{
			name: "store error text is never sent",
			res: &Result{Policy: p3, Err: errors.New("dial tcp 10.1.2.3:6379: i/o timeout <secret>"), Decision: Decision{
				Limit: 0, RetryAfter: time.Second,
			}},
			checks: []respCheck{
				hasProblem(wantProblem(`Rate limit "default-1s" (10 per 1s) exceeded. Retry in 1 second.`, map[string]any{
					"limit": "default-1s", "violated-policies": []any{"default-1s"}, "quota": float64(10), "window": float64(1), "retry_after": float64(1),
				})),
				bodyLacks("10.1.2.3"), bodyLacks("timeout"), bodyLacks("secret"),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/things", nil)
			if tc.res != nil {
				req = req.WithContext(NewContext(req.Context(), *tc.res))
			}
			rec := httptest.NewRecorder()
			DefaultDeniedHandler().ServeHTTP(rec, req)
			for _, check := range append(common, tc.checks...) {
				check(t, rec)
			}
		})
	}
}

func TestProblemAllowedDecision(t *testing.T) {
	// A denied handler called for an allowed decision (a custom stack, say)
	// still answers a 429 document, without a retry hint.
	pb := NewProblem(Result{Policy: MustParsePolicy("10/s"), Decision: Decision{Allowed: true, RetryAfter: time.Second}})
	want := Problem{
		Type: ProblemType, Title: "Too Many Requests", Status: 429,
		Detail:           `Rate limit "default-1s" (10 per 1s) exceeded.`,
		ViolatedPolicies: []string{"default-1s"},
		Limit:            "default-1s", Quota: 10, Window: 1,
	}
	if !reflect.DeepEqual(pb, want) {
		t.Errorf("NewProblem = %+v, want %+v", pb, want)
	}
}

func TestDeniedContext(t *testing.T) {
	if res, ok := FromContext(context.Background()); ok || !reflect.DeepEqual(res, Result{}) {
		t.Errorf("FromContext(Background) = %+v, %v; want zero, false", res, ok)
	}
	var nilCtx context.Context
	if _, ok := FromContext(nilCtx); ok {
		t.Error("FromContext(nil) = _, true; want false")
	}

	p := MustParsePolicy("10/s")
	want := Result{Policy: p, Keys: []string{"ip:203.0.113.7"}, Cost: 2, Decision: Decision{Allowed: true, Remaining: 8}, DryRun: true}
	ctx := NewContext(context.Background(), want)
	got, ok := FromContext(ctx)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("FromContext = %+v, %v; want %+v, true", got, ok, want)
	}

	// An inner Limiter's Result shadows the outer one.
	inner := Result{Policy: p, Cost: 1}
	if got, _ := FromContext(NewContext(ctx, inner)); !reflect.DeepEqual(got, inner) {
		t.Errorf("nested FromContext = %+v, want %+v", got, inner)
	}

	// Another package's value under a look-alike key is not a Result.
	type otherKey struct{}
	if _, ok := FromContext(context.WithValue(context.Background(), otherKey{}, want)); ok {
		t.Error("FromContext found a Result under another key")
	}
}

// The 429 body is one JSON document followed by a newline, as
// json.Encoder writes it, with or without a Result in the context.
func TestDeniedBodyEndsWithNewline(t *testing.T) {
	withResult := httptest.NewRequest(http.MethodGet, "/", nil)
	withResult = withResult.WithContext(NewContext(withResult.Context(), Result{
		Policy: MustParsePolicy("10/s"), Keys: []string{"ip:203.0.113.7"}, Cost: 1,
		Decision: Decision{RetryAfter: 300 * time.Millisecond, ResetAfter: time.Second},
	}))
	for name, req := range map[string]*http.Request{
		"with result":    withResult,
		"without result": httptest.NewRequest(http.MethodGet, "/", nil),
	} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			DefaultDeniedHandler().ServeHTTP(rec, req)
			body := rec.Body.Bytes()
			if !bytes.HasSuffix(body, []byte("}\n")) || bytes.Count(body, []byte("\n")) != 1 {
				t.Fatalf("body %q: want one JSON object and a single final newline", body)
			}
			var pb Problem
			if err := json.Unmarshal(body, &pb); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(pb); err != nil {
				t.Fatal(err)
			}
			if want.String() != string(body) {
				t.Errorf("body\n%q\nre-encoded by json.Encoder\n%q", body, want.String())
			}
		})
	}
}

// FuzzProblemJSON: the hand-written encoder of the 429 body writes exactly
// what an encoding/json.Encoder writes, final newline included, for any
// strings and numbers.
func FuzzProblemJSON(f *testing.F) {
	f.Add("api-1s", `Rate limit "api-1s" (10 per 1s) exceeded.`, int64(10), int64(1), int64(2))
	f.Add("", "", int64(0), int64(0), int64(0))
	f.Add("<a&b>", "\x00\x1f\t\n\r\\\"\u2028\u2029é\xff\xfe", int64(-1), int64(1<<62), int64(7))
	f.Fuzz(func(t *testing.T, limit, detail string, quota, window, retry int64) {
		pb := Problem{Type: ProblemType, Title: "Too Many Requests", Status: 429, Detail: detail,
			Limit: limit, Quota: quota, Window: window, RetryAfter: retry}
		if limit != "" {
			pb.ViolatedPolicies = []string{limit, detail}
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(pb); err != nil {
			t.Fatal(err)
		}
		if got := pb.appendJSON(nil); string(got) != want.String() {
			t.Fatalf("appendJSON:\n%q\njson.Encoder:\n%q", got, want.String())
		}
	})
}
