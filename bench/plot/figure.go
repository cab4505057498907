package main

import (
	"fmt"
	"image/color"
	"math"
	"strings"
	"time"

	"github.com/ratelimitkit/ratelimit"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Colours of the figures.
var (
	colBurst   = color.RGBA{R: 0x1f, G: 0x4e, B: 0x9a, A: 0xff} // admitted, bursting client
	colPolite  = color.RGBA{R: 0x2e, G: 0x9e, B: 0x4f, A: 0xff} // admitted, client honouring Retry-After
	colDenied  = color.RGBA{R: 0xf2, G: 0xa5, B: 0x9a, A: 0xff} // denied (429)
	colCount   = color.RGBA{R: 0x1f, G: 0x4e, B: 0x9a, A: 0xff}
	colLimit   = color.RGBA{R: 0xc6, G: 0x28, B: 0x28, A: 0xff}
	colHeader  = color.RGBA{R: 0xc6, G: 0x28, B: 0x28, A: 0xff}
	colExact   = color.RGBA{R: 0x44, G: 0x44, B: 0x44, A: 0xff}
	colCompare = color.RGBA{R: 0xe0, G: 0x8a, B: 0x00, A: 0xff}
	colGrid    = color.Gray{Y: 0xdd}
)

// figure is a column of panels sharing one time axis, with a title.
type figure struct {
	Title  string
	Panels []*plot.Plot
	Width  vg.Length
	// PanelHeight is the height of each panel, axes included.
	PanelHeight vg.Length
}

// algorithmFigure is the figure of one scenario's run, and the data it
// draws (kept so that tests can check what is drawn).
type algorithmFigure struct {
	figure
	// Bars are the stacked bars of the top panel, in the order drawn:
	// admitted while bursting, admitted while honouring Retry-After,
	// denied.
	Bars *stackedBars
	// Counts are the trailing-window counts, one per limit of the policy.
	Counts [][]step
}

// seconds is d in seconds, for axes.
func seconds(d time.Duration) float64 { return d.Seconds() }

// durationLabel writes a bin width or period for an axis label: "100 ms",
// "1 s", "10 s", "1 min", "1 h".
func durationLabel(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return fmt.Sprintf("%d ms", d/time.Millisecond)
}

// newPanel returns a panel with the house style: a time axis in seconds
// over [0, end], a light vertical grid and the y label.
func newPanel(end time.Duration, ylabel string) *plot.Plot {
	p := plot.New()
	p.X.Min, p.X.Max = 0, seconds(end)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.X.Tick.Marker = niceTicks{}
	p.Y.Tick.Marker = niceTicks{Integer: true}
	g := plotter.NewGrid()
	g.Horizontal.Color = colGrid
	g.Vertical.Color = colGrid
	p.Add(g)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(6)
	p.Legend.YOffs = -vg.Points(2)
	p.Legend.ThumbnailWidth = vg.Points(18)
	p.Legend.Padding = vg.Points(2)
	return p
}

// buildAlgorithmFigure draws a run: requests per bin, the admitted count in
// the trailing window of each limit against that limit, and the
// Retry-After each 429 carried. compare, when not nil, is the same traffic
// through another policy, drawn in orange for reference.
func buildAlgorithmFigure(s scenario, r, compare *run, compareLabel string) (*algorithmFigure, error) {
	end := r.Traffic.End
	f := &algorithmFigure{}
	f.Width = 8 * vg.Inch
	f.PanelHeight = 2.2 * vg.Inch

	// Requests per bin.
	b := binEvents(r.Events, s.Bin, end)
	bars := &stackedBars{Width: seconds(b.Width), Layers: []barLayer{
		{Label: "admitted, bursting (ignores 429)", Color: colBurst, Values: b.Burst},
		{Label: "admitted, honouring Retry-After", Color: colPolite, Values: b.Polite},
		{Label: "denied: 429", Color: colDenied, Values: b.Denied},
	}}
	f.Bars = bars
	top := newPanel(end, "requests per "+durationLabel(s.Bin))
	top.Add(bars)
	for _, l := range bars.Layers {
		top.Legend.Add(l.Label, l)
	}
	top.Y.Max = headroom(float64(bars.maxTotal()), 1.8)
	f.Panels = append(f.Panels, top)

	// Trailing-window count per limit.
	admitted := r.admittedTimes()
	var compareAdmitted []time.Duration
	if compare != nil {
		compareAdmitted = compare.admittedTimes()
	}
	var over, overLimits []string
	for _, l := range r.Policy.Limits() {
		steps := trailing(admitted, l.Period, end)
		f.Counts = append(f.Counts, steps)
		m := maxCount(steps)
		if m > int(l.Rate) {
			over = append(over, fmt.Sprintf("%d in %s", m, durationLabel(l.Period)))
			overLimits = append(overLimits, fmt.Sprint(l.Rate))
		}
		p := newPanel(end, "admitted in last "+durationLabel(l.Period))
		limit, err := hline(0, seconds(end), float64(l.Rate))
		if err != nil {
			return nil, err
		}
		limit.Color = colLimit
		limit.Width = vg.Points(1.5)
		limit.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		ymax := float64(max(m, int(l.Rate)))
		if compare != nil {
			cs := trailing(compareAdmitted, l.Period, end)
			cl, err := stepLine(cs, end)
			if err != nil {
				return nil, err
			}
			cl.Color = colCompare
			cl.Width = vg.Points(1.5)
			cl.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(cl)
			p.Legend.Add(compareLabel, cl)
			ymax = max(ymax, float64(maxCount(cs)))
		}
		line, err := stepLine(steps, end)
		if err != nil {
			return nil, err
		}
		line.Color = colCount
		line.Width = vg.Points(1.5)
		// The limit goes on top, so that its dashes show where the count
		// runs along it.
		p.Add(line, limit)
		p.Legend.Add(fmt.Sprintf("admitted in the %s before t (most: %d)", durationLabel(l.Period), m), line)
		p.Legend.Add(fmt.Sprintf("limit: %d per %s", l.Rate, durationLabel(l.Period)), limit)
		p.Y.Max = headroom(ymax, 1.7)
		f.Panels = append(f.Panels, p)
	}

	// Retry-After of each 429.
	ra, err := retryAfterPanel(r, compare, compareLabel)
	if err != nil {
		return nil, err
	}
	f.Panels = append(f.Panels, ra)

	// Only the bottom panel keeps its time axis label.
	for _, p := range f.Panels[:len(f.Panels)-1] {
		p.X.Label.Text = ""
	}
	f.Title = fmt.Sprintf("%s, policy %q: ", s.Label, s.Spec)
	if form := counterForm(r.Policy); form != "" {
		f.Title += form + "; "
	}
	if len(over) == 0 {
		f.Title += "never over the limit in any window"
	} else {
		f.Title += "most admitted in a window: " + strings.Join(over, ", ")
		if len(overLimits) == 1 {
			f.Title += " (limit " + overLimits[0] + ")"
		} else {
			f.Title += " (limits " + strings.Join(overLimits, ", ") + ")"
		}
	}
	return f, nil
}

// counterForm says how a SlidingWindow policy counts its limits: "exact
// log", "10 sub-buckets", or which limits are counted which way.
func counterForm(p *ratelimit.Policy) string {
	if p.Algorithm() != ratelimit.SlidingWindow {
		return ""
	}
	var exact, buckets []string
	precision := 0
	for _, l := range p.Limits() {
		spec := limitSpec(l)
		if l.Precision == 0 { // Limits report Precision 0 for an exact log
			exact = append(exact, spec)
		} else {
			buckets = append(buckets, spec)
			precision = l.Precision
		}
	}
	switch {
	case len(buckets) == 0:
		return "exact log"
	case len(exact) == 0 && len(p.Limits()) == 1:
		return fmt.Sprintf("%d sub-buckets of %s", precision, durationLabel(p.Limits()[0].Period/time.Duration(precision)))
	case len(exact) == 0:
		return fmt.Sprintf("%d sub-buckets", precision)
	}
	return fmt.Sprintf("exact log for %s, %d sub-buckets for %s", joinAnd(exact), precision, joinAnd(buckets))
}

// limitSpec writes a limit as ParsePolicy reads it: "10/s", "100/10s".
func limitSpec(l ratelimit.Limit) string {
	p := ratelimit.FormatPeriod(l.Period)
	if len(p) > 1 && p[0] == '1' && (p[1] < '0' || p[1] > '9') {
		p = p[1:]
	}
	return fmt.Sprintf("%d/%s", l.Rate, p)
}

func joinAnd(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	out := s[0]
	for _, x := range s[1 : len(s)-1] {
		out += ", " + x
	}
	return out + " and " + s[len(s)-1]
}

// retryAfterPanel draws the Retry-After header of every 429 (whole
// seconds, as the client read it) and the Decision's exact RetryAfter it
// was rounded up from. A run over a long period uses a logarithmic axis.
func retryAfterPanel(r, compare *run, compareLabel string) (*plot.Plot, error) {
	end := r.Traffic.End
	p := newPanel(end, "Retry-After (s)")
	var hdr, exact plotter.XYs
	top := 1.0
	for _, e := range r.Events {
		if e.Admitted() {
			continue
		}
		hdr = append(hdr, plotter.XY{X: seconds(e.At), Y: float64(e.RetryAfter)})
		exact = append(exact, plotter.XY{X: seconds(e.At), Y: e.Exact.Seconds()})
		top = max(top, float64(e.RetryAfter))
	}
	logY := false
	for _, l := range r.Policy.Limits() {
		logY = logY || l.Period > time.Minute
	}
	if logY {
		// The exact wait can be microseconds: show it from 10 ms.
		for i := range exact {
			exact[i].Y = max(exact[i].Y, 0.01)
		}
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min = 0.01
		p.Y.Max = math.Pow(10, math.Ceil(math.Log10(top))+2)
	}
	// Many denials (a burst that ignores them) need smaller marks.
	radius := vg.Points(3)
	if len(hdr) > 100 {
		radius = vg.Points(2)
	}
	if compare != nil {
		var c plotter.XYs
		for _, e := range compare.Events {
			if !e.Admitted() {
				c = append(c, plotter.XY{X: seconds(e.At), Y: float64(e.RetryAfter)})
			}
		}
		if len(c) > 0 {
			sc, err := plotter.NewScatter(c)
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: colCompare, Radius: radius + vg.Points(1), Shape: draw.RingGlyph{}}
			p.Add(sc)
			p.Legend.Add(compareLabel+": Retry-After", sc)
		}
	}
	if len(hdr) > 0 {
		he, err := plotter.NewScatter(hdr)
		if err != nil {
			return nil, err
		}
		he.GlyphStyle = draw.GlyphStyle{Color: colHeader, Radius: radius, Shape: draw.CircleGlyph{}}
		ex, err := plotter.NewScatter(exact)
		if err != nil {
			return nil, err
		}
		ex.GlyphStyle = draw.GlyphStyle{Color: colExact, Radius: radius * 0.8, Shape: draw.CrossGlyph{}}
		p.Add(he, ex)
		p.Legend.Add("Retry-After header of each 429 (whole seconds)", he)
		p.Legend.Add("exact wait it was rounded up from", ex)
	}
	if !logY {
		p.Y.Max = headroom(top, 1.7)
	}
	return p, nil
}

// headroom is the axis maximum that leaves room above v for the legend.
func headroom(v, factor float64) float64 {
	return math.Max(1, math.Ceil(v*factor))
}

// hline is a horizontal line at y from x0 to x1.
func hline(x0, x1, y float64) (*plotter.Line, error) {
	return plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
}

// stepLine draws steps as a line that holds each count until the next step
// and the last one until end.
func stepLine(steps []step, end time.Duration) (*plotter.Line, error) {
	pts := make(plotter.XYs, 0, len(steps)+1)
	for _, s := range steps {
		pts = append(pts, plotter.XY{X: seconds(s.At), Y: float64(s.Count)})
	}
	pts = append(pts, plotter.XY{X: seconds(end), Y: float64(steps[len(steps)-1].Count)})
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.StepStyle = plotter.PostStep
	return l, nil
}
