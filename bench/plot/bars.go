package main

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// barLayer is one layer of stacked bars: one value per bin.
type barLayer struct {
	Label  string
	Color  color.Color
	Values []int
}

// Thumbnail draws the layer's legend entry.
func (l barLayer) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y},
		{X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y},
	}
	c.FillPolygon(l.Color, c.ClipPolygonY(pts))
}

// stackedBars draws bins of Width (in x units) from x = 0, each bar the
// layers stacked bottom up. gonum's BarChart places bars at unit spacing,
// which does not suit a time axis, hence this plotter.
type stackedBars struct {
	Width  float64
	Layers []barLayer
}

// Plot implements plot.Plotter.
func (b *stackedBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	gap := vg.Points(0.5)
	for i := range b.bins() {
		x0, x1 := trX(float64(i)*b.Width)+gap, trX(float64(i+1)*b.Width)-gap
		base := 0
		for _, l := range b.Layers {
			if i >= len(l.Values) || l.Values[i] <= 0 {
				continue
			}
			v := l.Values[i]
			y0, y1 := trY(float64(base)), trY(float64(base+v))
			base += v
			pts := []vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}
			c.FillPolygon(l.Color, c.ClipPolygonXY(pts))
		}
	}
}

// DataRange implements plot.DataRanger.
func (b *stackedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, float64(b.bins()) * b.Width, 0, float64(b.maxTotal())
}

func (b *stackedBars) bins() int {
	n := 0
	for _, l := range b.Layers {
		n = max(n, len(l.Values))
	}
	return n
}

// total is the height of bin i: the sum of its layers.
func (b *stackedBars) total(i int) int {
	t := 0
	for _, l := range b.Layers {
		if i < len(l.Values) {
			t += l.Values[i]
		}
	}
	return t
}

func (b *stackedBars) maxTotal() int {
	m := 0
	for i := range b.bins() {
		m = max(m, b.total(i))
	}
	return m
}
