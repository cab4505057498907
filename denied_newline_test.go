package ratelimit

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

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
