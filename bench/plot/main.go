// Command plot draws what each rate-limiting algorithm of
// github.com/ratelimitkit/ratelimit does to the same traffic, from the
// library's own code: a Limiter's Handler over the memory store, on a
// simulated clock (nothing sleeps, no wall time is read), answered as a
// client sees it (status codes and Retry-After).
//
// Run from this directory:
//
//	go run .
//
// It writes docs/algorithms/NAME.png for every scenario, and, when
// docs/fleet.csv exists, docs/fleet.svg and docs/fleet.png from it: the
// figures the documents show (docs/fleet.md links the fleet's SVG too).
// The output is byte-for-byte the same on every run (on one architecture:
// CI compares on linux/amd64 with the gonum version pinned in go.mod).
package main

import (
	"errors"
	"flag"
	"fmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"image/color"
	"io/fs"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", "../../docs/algorithms", "directory for the algorithm figures")
	fleet := flag.String("fleet", "../../docs/fleet.csv", "CSV of the fleet soak run; drawn when the file exists")
	fleetOut := flag.String("fleet-out", "../../docs/fleet", "path of the fleet figure, without extension")
	flag.Parse()
	if err := generate(*out, *fleet, *fleetOut); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func generate(out, fleetCSV, fleetOut string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, s := range scenarios() {
		f, r, err := s.figure()
		if err != nil {
			return err
		}
		if err := write(filepath.Join(out, s.File), &f.figure, false); err != nil {
			return err
		}
		fmt.Printf("%s.png: %d requests, %d admitted; most admitted in any window:", filepath.Join(out, s.File), len(r.Events), len(r.admittedTimes()))
		for i, c := range f.Counts {
			l := r.Policy.Limits()[i]
			fmt.Printf(" %d per %s (limit %d)", maxCount(c), durationLabel(l.Period), l.Rate)
		}
		fmt.Println()
	}
	return drawFleet(fleetCSV, fleetOut)
}

// drawFleet draws the fleet soak run's CSV, if there is one: its first
// column is the time in seconds, every other column a rate per second.
func drawFleet(csvPath, out string) error {
	fh, err := os.Open(csvPath)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Printf("%s: not found, fleet figure not drawn\n", csvPath)
		return nil
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	cols, err := readColumns(fh)
	if err != nil {
		return fmt.Errorf("%s: %w", csvPath, err)
	}
	if len(cols) < 2 {
		return fmt.Errorf("%s: want a time column and at least one rate column, got %d column(s)", csvPath, len(cols))
	}
	f, err := fleetFigure(cols)
	if err != nil {
		return fmt.Errorf("%s: %w", csvPath, err)
	}
	if err := write(out, f, true); err != nil {
		return err
	}
	fmt.Printf("%s.{svg,png}: from %s, %d rows\n", out, csvPath, len(cols[0].Values))
	return nil
}

// fleetFigure draws the fleet run (docs/fleet.md names the columns): what
// Redis admitted across the fleet and what failed open, per second, against
// the policy's rate, with the seconds Redis was down shaded. Without those
// columns it draws every column against the first.
func fleetFigure(cols []Column) (*figure, error) {
	by := map[string]Column{}
	for _, c := range cols[1:] {
		by[c.Name] = c
	}
	x := cols[0]
	admitted, ok1 := by["admitted"]
	failed, ok2 := by["failed_open"]
	rate, ok3 := by["policy_rate"]
	down, ok4 := by["redis_down_ms"]
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return buildSeriesFigure(seriesSpec{
			Title:  "The fleet run, per second",
			XLabel: x.Name + " (s)",
			YLabel: "per second",
		}, x, cols[1:])
	}
	p := plot.New()
	p.X.Label.Text = "time since the load started (s)"
	p.Y.Label.Text = "requests per second"
	g := plotter.NewGrid()
	g.Horizontal.Color, g.Vertical.Color = colGrid, colGrid
	p.Add(g)
	top := 0.0
	for i := range x.Values {
		top = max(top, admitted.Values[i], failed.Values[i], rate.Values[i])
	}
	top = headroom(top, 1.6) // room for the legend above the lines
	// Shade each second Redis was down (even in part).
	shaded := false
	for i, ms := range down.Values {
		if ms <= 0 {
			continue
		}
		x0, x1 := x.Values[i], x.Values[i]+1
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: top}, {X: x0, Y: top}})
		if err != nil {
			return nil, err
		}
		poly.Color = color.Gray{Y: 0xe6}
		poly.LineStyle.Width = 0
		p.Add(poly)
		if !shaded {
			p.Legend.Add("Redis down (killed, then restarted empty)", poly)
			shaded = true
		}
	}
	line := func(c Column, col color.Color, label string, dashes []vg.Length) error {
		pts := make(plotter.XYs, len(x.Values))
		for i := range pts {
			pts[i] = plotter.XY{X: x.Values[i] + 0.5, Y: c.Values[i]}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width, l.Dashes = col, vg.Points(1.5), dashes
		p.Add(l)
		p.Legend.Add(label, l)
		return nil
	}
	if err := line(admitted, colCount, "admitted by Redis, across 4 servers", nil); err != nil {
		return nil, err
	}
	if err := line(failed, colCompare, "served uncounted: Redis unreachable (FailOpen)", nil); err != nil {
		return nil, err
	}
	if err := line(rate, colLimit, "the policy's rate for the fleet (10 identities × 10/s)", []vg.Length{vg.Points(6), vg.Points(3)}); err != nil {
		return nil, err
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.ThumbnailWidth = vg.Points(18)
	p.Y.Min, p.Y.Max = 0, top
	p.X.Min, p.X.Max = x.Values[0], x.Values[len(x.Values)-1]+1
	return &figure{Title: "Four servers sharing one Redis: admitted per second, with a Redis restart",
		Panels: []*plot.Plot{p}, Width: 8 * vg.Inch, PanelHeight: 3.5 * vg.Inch}, nil
}

// write renders f to base.png and, with svg, to base.svg.
func write(base string, f *figure, svg bool) error {
	png, err := renderPNG(f)
	if err != nil {
		return err
	}
	if svg {
		s, err := renderSVG(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(base+".svg", s, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(base+".png", png, 0o644)
}
