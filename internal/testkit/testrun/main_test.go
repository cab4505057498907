package main

import (
	"bytes"
	"strings"
	"testing"
)

// A go test -json stream: a package with a passing test, a skipped test
// and a skipped subtest; another with a failing test; a build failure.
const stream = `{"Action":"start","Package":"github.com/ratelimitkit/ratelimit/store"}
{"Action":"run","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestA"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestA","Output":"    a_test.go:9: noise of a passing test\n"}
{"Action":"pass","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestA"}
{"Action":"run","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestRealB"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestRealB","Output":"=== RUN   TestRealB\n"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestRealB","Output":"    redistest.go:70: redis-server not found in PATH: skipping\n"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestRealB","Output":"--- SKIP: TestRealB (0.00s)\n"}
{"Action":"skip","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestRealB"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestC/real","Output":"    redistest.go:70: redis-server not found in PATH: skipping\n"}
{"Action":"skip","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestC/real"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestD","Output":"    d_test.go:3: needs a network\n"}
{"Action":"skip","Package":"github.com/ratelimitkit/ratelimit/store","Test":"TestD"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Output":"PASS\n"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit/store","Output":"ok  \tgithub.com/ratelimitkit/ratelimit/store\t0.1s\n"}
{"Action":"pass","Package":"github.com/ratelimitkit/ratelimit/store"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit","Test":"TestE","Output":"=== RUN   TestE\n"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit","Test":"TestE","Output":"    e_test.go:5: got 1, want 2\n"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit","Test":"TestE","Output":"--- FAIL: TestE (0.00s)\n"}
{"Action":"fail","Package":"github.com/ratelimitkit/ratelimit","Test":"TestE"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit","Output":"FAIL\n"}
{"Action":"output","Package":"github.com/ratelimitkit/ratelimit","Output":"FAIL\tgithub.com/ratelimitkit/ratelimit\t0.2s\n"}
{"Action":"fail","Package":"github.com/ratelimitkit/ratelimit"}
{"ImportPath":"github.com/ratelimitkit/ratelimit/lua","Action":"build-output","Output":"lua/x.go:1:1: expected 'package'\n"}
not json at all
`

func TestReport(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	r.summary()
	got := out.String()
	want := "ok  \tgithub.com/ratelimitkit/ratelimit/store\t0.1s\n" +
		"    e_test.go:5: got 1, want 2\n" +
		"--- FAIL: TestE (0.00s)\n" +
		"FAIL\n" +
		"FAIL\tgithub.com/ratelimitkit/ratelimit\t0.2s\n" +
		"lua/x.go:1:1: expected 'package'\n" +
		"not json at all\n" +
		"testrun: 3 tests skipped (subtests counted); they did not run:\n" +
		"    2  redis-server not found in PATH: skipping\n" +
		"       (store TestC/real, store TestRealB)\n" +
		"    1  needs a network\n" +
		"       (store TestD)\n"
	if got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestSummaryNoSkip(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	r.summary()
	if got := out.String(); got != "testrun: no test skipped\n" {
		t.Errorf("summary = %q", got)
	}
}

func TestSummaryListsAFew(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	for _, name := range []string{"T1", "T2", "T3", "T4", "T5", "T6"} {
		r.event(event{Action: "skip", Package: "github.com/ratelimitkit/ratelimit", Test: name})
	}
	r.summary()
	if got := out.String(); !strings.Contains(got, "6  (no reason given)") ||
		!strings.Contains(got, "(ratelimit T1, ratelimit T2, ratelimit T3, ratelimit T4, and 2 more)") {
		t.Errorf("summary:\n%s", got)
	}
}

func TestHasPackage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-race"}, false},
		{[]string{"-run", "Real", "-count=1"}, false},
		{[]string{"-run", "Real", "./store"}, true},
		{[]string{"./..."}, true},
		{[]string{"-timeout=5m", "-v", "."}, true},
	} {
		if got := hasPackage(tc.args); got != tc.want {
			t.Errorf("hasPackage(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
	if !verbose([]string{"-race", "-v"}) || verbose([]string{"-run", "v"}) {
		t.Error("verbose: wrong answer")
	}
}
