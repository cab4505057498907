//go:build !race

package memory

// raceDetector reports whether the tests run under -race, where memory
// operations cost several times more: flood tests send fewer identities.
const raceDetector = false
