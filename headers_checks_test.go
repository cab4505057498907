package ratelimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// ---------------------------------------------------------------------------
// Response checkers, shared with denied_test.go.
// ---------------------------------------------------------------------------

// respCheck checks one aspect of a recorded response.
type respCheck func(t *testing.T, rec *httptest.ResponseRecorder)

func hasStatus(want int) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if rec.Code != want {
			t.Errorf("status = %d, want %d", rec.Code, want)
		}
	}
}

// hasHeader checks that key has exactly one value, want.
func hasHeader(key, want string) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if got := rec.Header().Values(key); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", key, got, want)
		}
	}
}

func hasNoHeader(key string) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if got, ok := rec.Header()[http.CanonicalHeaderKey(key)]; ok {
			t.Errorf("%s = %q, want no such header", key, got)
		}
	}
}

// hasOnlyHeaders checks that the header keys are exactly keys, each
// stored under its canonical spelling.
func hasOnlyHeaders(keys ...string) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		want := map[string]bool{}
		for _, k := range keys {
			want[http.CanonicalHeaderKey(k)] = true
		}
		got := map[string]bool{}
		for k := range rec.Header() {
			got[k] = true
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("header keys = %v, want %v", sortedHeaderKeys(got), sortedHeaderKeys(want))
		}
	}
}

func sortedHeaderKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out { // tiny insertion sort, keeps imports small
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// quotaPolicy is one expected member of RateLimit-Policy.
type quotaPolicy struct {
	name string
	q, w int64
}

// parseSingle parses the one value of key as an sf-list.
func parseSingle(rec *httptest.ResponseRecorder, key string) ([]sfItem, error) {
	vals := rec.Header().Values(key)
	if len(vals) != 1 {
		return nil, fmt.Errorf("%s has %d values %q, want 1", key, len(vals), vals)
	}
	items, err := parseSFList(vals[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return items, nil
}

// intParams checks that it is an sf-string named name whose parameters are
// exactly keys, in order, all sf-integers; it returns their values.
func intParams(it sfItem, name string, keys ...string) ([]int64, error) {
	if it.Value != name {
		return nil, fmt.Errorf("member %#v, want sf-string %q", it.Value, name)
	}
	if len(it.Params) != len(keys) {
		return nil, fmt.Errorf("member %q has parameters %v, want %v", name, it.Params, keys)
	}
	out := make([]int64, len(keys))
	for i, k := range keys {
		v, ok := it.Params[i].Value.(int64)
		if it.Params[i].Key != k || !ok {
			return nil, fmt.Errorf("member %q parameter %d = %v, want %s=<integer>", name, i, it.Params[i], k)
		}
		out[i] = v
	}
	return out, nil
}

// hasPolicy parses RateLimit-Policy and checks its members.
func hasPolicy(want ...quotaPolicy) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		items, err := parseSingle(rec, "RateLimit-Policy")
		if err != nil {
			t.Error(err)
			return
		}
		var got []quotaPolicy
		for _, it := range items {
			name, _ := it.Value.(string)
			v, err := intParams(it, name, "q", "w")
			if err != nil {
				t.Errorf("RateLimit-Policy: %v", err)
				return
			}
			got = append(got, quotaPolicy{name, v[0], v[1]})
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("RateLimit-Policy = %+v, want %+v", got, want)
		}
	}
}

// hasRateLimit parses RateLimit and checks its one member.
func hasRateLimit(name string, r, tSecs int64) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		items, err := parseSingle(rec, "RateLimit")
		if err == nil && len(items) != 1 {
			err = fmt.Errorf("RateLimit has %d members, want 1", len(items))
		}
		if err != nil {
			t.Error(err)
			return
		}
		v, err := intParams(items[0], name, "r", "t")
		if err != nil {
			t.Errorf("RateLimit: %v", err)
			return
		}
		if v[0] != r || v[1] != tSecs {
			t.Errorf("RateLimit: r=%d t=%d, want r=%d t=%d", v[0], v[1], r, tSecs)
		}
	}
}

// hasInt parses key as an sf-integer item without parameters (the legacy
// headers' syntax) and checks it.
func hasInt(key string, want int64) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		items, err := parseSingle(rec, key)
		if err != nil {
			t.Error(err)
			return
		}
		if len(items) != 1 || len(items[0].Params) != 0 {
			t.Errorf("%s = %q, want one integer without parameters", key, rec.Header().Get(key))
			return
		}
		if got, ok := items[0].Value.(int64); !ok || got != want {
			t.Errorf("%s = %#v, want %d", key, items[0].Value, want)
		}
	}
}

// hasLegacy checks the three integers of a legacy style; prefix is
// "RateLimit-" or "X-RateLimit-".
func hasLegacy(prefix string, limit, remaining, reset int64) []respCheck {
	return []respCheck{hasInt(prefix+"Limit", limit), hasInt(prefix+"Remaining", remaining), hasInt(prefix+"Reset", reset)}
}

// parseDelaySeconds parses an RFC 9110 delay-seconds: 1*DIGIT.
func parseDelaySeconds(s string) (int64, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not delay-seconds", s)
	}
	return strconv.ParseInt(s, 10, 64)
}

func hasRetryAfter(want int64) respCheck {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		vals := rec.Header().Values("Retry-After")
		if len(vals) != 1 {
			t.Errorf("Retry-After = %q, want one value", vals)
			return
		}
		got, err := parseDelaySeconds(vals[0])
		if err != nil || got != want {
			t.Errorf("Retry-After = %q (%v), want %d", vals[0], err, want)
		}
	}
}

func joinChecks(groups ...[]respCheck) []respCheck {
	var out []respCheck
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
