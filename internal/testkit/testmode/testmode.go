// Package testmode is the one switch between the quick test suite that a
// newcomer's go test ./... runs and the full suite that CI runs: the
// environment variable RATELIMIT_FULL. With RATELIMIT_FULL=1 every test
// runs at full strength (the conformance suite's trace counts, the long
// scenario runs, every failure mode of the real-server tests); without
// it, the same tests run with smaller counts, and the few cases that have
// no smaller form skip, saying how to run them.
package testmode

import (
	"os"
	"testing"
)

// Env is the environment variable that turns the full suites on when set
// to "1".
const Env = "RATELIMIT_FULL"

// SkipMessage is what a test left out of the quick suite skips with.
const SkipMessage = "left out of the quick suite: set " + Env + "=1 to run"

// Full reports whether the full suites run: RATELIMIT_FULL is "1", as CI
// sets it.
func Full() bool { return os.Getenv(Env) == "1" }

// Scale returns full when Full reports true, quick otherwise: a count
// (traces, rounds, identities) or a duration of a test that keeps its
// meaning at the smaller figure.
func Scale[N ~int | ~int64](full, quick N) N {
	if Full() {
		return full
	}
	return quick
}

// SkipUnlessFull skips t with SkipMessage unless Full reports true: for a
// test or a case with no smaller form (prefer Scale).
func SkipUnlessFull(t testing.TB) {
	t.Helper()
	if !Full() {
		t.Skip(SkipMessage)
	}
}
