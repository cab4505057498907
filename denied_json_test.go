package ratelimit

import (
	"bytes"
	"encoding/json"
	"testing"
)

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
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(pb); err != nil {
			t.Fatal(err)
		}
		if got := pb.appendJSON(nil); string(got) != want.String() {
			t.Fatalf("appendJSON:\n%q\njson.Encoder:\n%q", got, want.String())
		}
	})
}
