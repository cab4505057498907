package main

import (
	"fmt"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// scenario is one figure of the algorithm kind: a policy, the traffic sent
// to it, and the width of the bars.
type scenario struct {
	// File is the figure's base name, without extension.
	File string
	// Label names the algorithm (and its form) in the figure's title.
	Label   string
	Spec    string // the policy, in ParsePolicy syntax
	Alg     ratelimit.Algorithm
	Traffic traffic
	Bin     time.Duration
	// Compare, when set, runs the same traffic through the same limits
	// counted by another algorithm, drawn in orange as CompareLabel.
	Compare      *ratelimit.Algorithm
	CompareLabel string
}

// algorithm is one algorithm of the figures and its label.
type algorithm struct {
	alg   ratelimit.Algorithm
	label string
}

// algorithms lists every algorithm, in the order the README shows them.
var algorithms = []algorithm{
	{ratelimit.SlidingWindow, "Sliding window (default)"},
	{ratelimit.FixedWindow, "Fixed window"},
	{ratelimit.TokenBucket, "Token bucket (GCRA)"},
	{ratelimit.SlidingLog, "Sliding log"},
	{ratelimit.SlidingWindowApprox, "Sliding window, approximate"},
}

var slidingLog = ratelimit.SlidingLog

// drawnRate is the per-second rate of the figures: 10, the README's, for
// every algorithm that New accepts at that rate; MinApproxRate for the
// approximation, which New refuses below it.
const drawnRate = 10

// rate is the per-second rate the algorithm's figures are drawn at.
func (a algorithm) rate() int64 {
	if a.alg == ratelimit.SlidingWindowApprox {
		return ratelimit.MinApproxRate
	}
	return drawnRate
}

// multiLimitAt is the three-limit policy the README uses throughout,
// "10/s, 120/m, 240/h", scaled to rate per second.
func multiLimitAt(rate int64) string {
	return fmt.Sprintf("%d/s, %d/m, %d/h", rate, 12*rate, 24*rate)
}

// scenarios returns every figure of the algorithm kind: per algorithm, the
// policy "10/s" over three seconds and the three-limit policy over 150
// seconds (enough for the minute limit to deny, and then the hour limit);
// and the sliding window above ExactRateMax ("100/10s"), where it counts in
// sub-buckets.
func scenarios() []scenario {
	var out []scenario
	for _, a := range algorithms {
		rate := a.rate()
		out = append(out, scenario{
			File: a.alg.String(), Label: a.label, Spec: fmt.Sprintf("%d/s", rate), Alg: a.alg,
			Traffic: standardTraffic(rate, time.Second, 3*time.Second),
			Bin:     100 * time.Millisecond,
		})
	}
	out = append(out, scenario{
		File: "sliding-window-100-per-10s", Label: "Sliding window, sub-buckets", Spec: "100/10s",
		Alg:          ratelimit.SlidingWindow,
		Traffic:      standardTraffic(100, 10*time.Second, 30*time.Second),
		Bin:          time.Second,
		Compare:      &slidingLog,
		CompareLabel: "exact log (SlidingLog), same traffic",
	})
	for _, a := range algorithms {
		rate := a.rate()
		out = append(out, scenario{
			File: a.alg.String() + "-3-limits", Label: a.label, Spec: multiLimitAt(rate), Alg: a.alg,
			Traffic: standardTraffic(rate, time.Second, 150*time.Second),
			Bin:     time.Second,
		})
	}
	return out
}

// policy builds the scenario's policy, named "api".
func (s scenario) policy() (*ratelimit.Policy, error) {
	p, err := ratelimit.ParsePolicy(s.Spec, ratelimit.Named("api"), ratelimit.WithAlgorithm(s.Alg))
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", s.File, err)
	}
	return p, nil
}

// simulate runs the scenario's traffic through a Limiter of its policy,
// and through one of the comparison's policy if it has one (else compare
// is nil).
func (s scenario) simulate() (r, compare *run, err error) {
	p, err := s.policy()
	if err != nil {
		return nil, nil, err
	}
	if r, err = simulate(p, s.Traffic); err != nil {
		return nil, nil, err
	}
	if s.Compare != nil {
		c := s
		c.Alg, c.Compare = *s.Compare, nil
		if compare, _, err = c.simulate(); err != nil {
			return nil, nil, err
		}
	}
	return r, compare, nil
}

// figure simulates the scenario and builds its figure.
func (s scenario) figure() (*algorithmFigure, *run, error) {
	r, compare, err := s.simulate()
	if err != nil {
		return nil, nil, err
	}
	f, err := buildAlgorithmFigure(s, r, compare, s.CompareLabel)
	if err != nil {
		return nil, nil, fmt.Errorf("scenario %s: %w", s.File, err)
	}
	return f, r, nil
}
