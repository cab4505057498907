package client

import "time"

// clock is the transport's time: the real one, or a test's.
type clock interface {
	Now() time.Time
	// TimerAt returns a channel that receives once the clock reaches at,
	// and a function that stops the timer. (An absolute time, so that a
	// timer set just as the clock moves still fires when it should.)
	TimerAt(at time.Time) (<-chan time.Time, func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) TimerAt(at time.Time) (<-chan time.Time, func() bool) {
	t := time.NewTimer(time.Until(at))
	return t.C, t.Stop
}
