package main

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// niceTicks marks an axis every 1, 2 or 5 times a power of ten, four to
// eight labelled marks over the range, with unlabelled marks between them.
// Integer axes (counts) never get marks between whole numbers.
type niceTicks struct {
	Integer bool
}

// Ticks implements plot.Ticker.
func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return []plot.Tick{{Value: lo, Label: label(lo)}}
	}
	step := niceStep((hi - lo) / 8)
	if t.Integer {
		step = math.Max(step, 1)
	}
	minor := step / 5
	if t.Integer && minor < 1 {
		minor = step / 2
		if minor < 1 {
			minor = 0
		}
	}
	var ticks []plot.Tick
	if minor > 0 {
		for i := math.Ceil(lo/minor - 1e-9); i*minor <= hi+1e-9*minor; i++ {
			v := i * minor
			if math.Abs(math.Remainder(v, step)) > minor/2 {
				ticks = append(ticks, plot.Tick{Value: v})
			}
		}
	}
	for i := math.Ceil(lo/step - 1e-9); i*step <= hi+1e-9*step; i++ {
		v := i * step
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label(v)})
	}
	return ticks
}

// niceStep is the smallest of 1, 2 or 5 times a power of ten that is at
// least x.
func niceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// label writes v with as few digits as it needs ("0.5", "10").
func label(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}
