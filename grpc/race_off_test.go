//go:build !race

package ratelimitgrpc_test

// raceDetector reports that the tests run under -race.
const raceDetector = false
