package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The second kind of figure: columns of measured data (a CSV file) drawn as
// lines against their first column, such as the admitted rate per second
// of a fleet of Limiters sharing one Redis (docs/fleet.csv, written by a
// real-time soak run, not by this program).

// Column is one named column of numbers.
type Column struct {
	Name   string
	Values []float64
}

// readColumns reads CSV with a header row of column names and a number in
// every other cell. Errors name the line and column of the bad cell.
func readColumns(r io.Reader) ([]Column, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("csv: empty: want a header row of column names")
	}
	if err != nil {
		return nil, fmt.Errorf("csv: %w", err)
	}
	cols := make([]Column, len(header))
	for i, name := range header {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("csv: column %d has no name", i+1)
		}
		cols[i].Name = name
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		for i, cell := range rec {
			v, err := strconv.ParseFloat(strings.TrimSpace(cell), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("csv: line %d, column %q: %q is not a finite number", line, cols[i].Name, cell)
			}
			cols[i].Values = append(cols[i].Values, v)
		}
	}
	if len(cols[0].Values) == 0 {
		return nil, errors.New("csv: no rows after the header")
	}
	return cols, nil
}

// seriesSpec labels a figure of columns.
type seriesSpec struct {
	Title  string // "title: subtitle", as for every figure
	XLabel string // with its unit, e.g. "time (s)"
	YLabel string // with its unit, e.g. "admitted per second"
}

// buildSeriesFigure draws each column of ys against x, as lines in one
// panel with a legend of the columns' names.
func buildSeriesFigure(spec seriesSpec, x Column, ys []Column) (*figure, error) {
	if len(ys) == 0 {
		return nil, fmt.Errorf("series %q: no column to draw against %q", spec.Title, x.Name)
	}
	if len(x.Values) == 0 {
		return nil, fmt.Errorf("series %q: column %q is empty", spec.Title, x.Name)
	}
	p := plot.New()
	p.X.Label.Text = spec.XLabel
	p.Y.Label.Text = spec.YLabel
	g := plotter.NewGrid()
	g.Horizontal.Color, g.Vertical.Color = colGrid, colGrid
	p.Add(g)
	p.Legend.Top = true
	p.Legend.ThumbnailWidth = vg.Points(18)
	top := 0.0
	for i, y := range ys {
		if len(y.Values) != len(x.Values) {
			return nil, fmt.Errorf("series %q: column %q has %d values, %q has %d", spec.Title, y.Name, len(y.Values), x.Name, len(x.Values))
		}
		pts := make(plotter.XYs, len(x.Values))
		for j := range pts {
			pts[j] = plotter.XY{X: x.Values[j], Y: y.Values[j]}
			top = max(top, y.Values[j])
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("series %q: column %q: %w", spec.Title, y.Name, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(y.Name, l)
	}
	p.Y.Min = math.Min(p.Y.Min, 0)
	p.Y.Max = headroom(top, 1.3)
	return &figure{Title: spec.Title, Panels: []*plot.Plot{p}, Width: 8 * vg.Inch, PanelHeight: 3.5 * vg.Inch}, nil
}
