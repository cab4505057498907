package main

import (
	"bytes"
	"fmt"
	"image/color"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// pngDPI is the resolution of the PNG figures: an 8-inch figure is 800
// pixels wide, about the width of a README column.
const pngDPI = 100

func init() {
	// Liberation Sans (shipped inside gonum, metrically compatible with
	// Arial) for every text of every figure.
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
}

// Title and subtitle sizes, and the space they take above the panels.
const (
	titleSize    = 13
	subtitleSize = 11
)

// size is the figure's width and height.
func (f *figure) size() (w, h vg.Length) {
	return f.Width, f.titleHeight() + f.PanelHeight*vg.Length(len(f.Panels))
}

func (f *figure) titleHeight() vg.Length { return vg.Points(2.6*titleSize + 8) }

// draw draws the title and the panels, one under the other, with their
// data areas aligned so that they share the time axis.
func (f *figure) draw(dc draw.Canvas) error {
	if len(f.Panels) == 0 {
		return fmt.Errorf("figure %q has no panels", f.Title)
	}
	title, subtitle := splitTitle(f.Title)
	th := f.titleHeight()
	sty := text.Style{
		Color:   color.Black,
		Font:    font.From(font.Font{Typeface: "Liberation", Variant: "Sans", Weight: xfont.WeightBold}, titleSize),
		XAlign:  draw.XCenter,
		YAlign:  draw.YTop,
		Handler: plot.DefaultTextHandler,
	}
	mid := (dc.Min.X + dc.Max.X) / 2
	dc.FillText(sty, vg.Point{X: mid, Y: dc.Max.Y - vg.Points(6)}, title)
	if subtitle != "" {
		sty.Font = font.From(plot.DefaultFont, subtitleSize)
		dc.FillText(sty, vg.Point{X: mid, Y: dc.Max.Y - vg.Points(6+1.4*titleSize)}, subtitle)
	}
	rows := make([][]*plot.Plot, len(f.Panels))
	for i, p := range f.Panels {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{
		Rows: len(f.Panels), Cols: 1,
		PadTop: th, PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(14),
		PadY: vg.Points(8),
	}
	cs := plot.Align(rows, tiles, dc)
	for i, p := range f.Panels {
		p.Draw(cs[i][0])
	}
	return nil
}

// splitTitle splits "title: subtitle" at its first ": ".
func splitTitle(s string) (string, string) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == ':' && s[i+1] == ' ' {
			return s[:i], s[i+2:]
		}
	}
	return s, ""
}

// renderSVG returns the figure as SVG. gonum writes no timestamp, random
// ID or map-ordered content into SVG; fonts are not embedded (that would
// add hundreds of kilobytes per figure), so the text names Liberation Sans
// and, after it, the fonts a viewer is likely to have with the same
// metrics (Arial), then any sans-serif.
func renderSVG(f *figure) ([]byte, error) {
	w, h := f.size()
	c := vgsvg.New(w, h)
	if err := f.draw(draw.New(c)); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("svg %q: %w", f.Title, err)
	}
	return withFontFallbacks(buf.Bytes()), nil
}

// withFontFallbacks adds fallbacks to the font-family gonum writes.
func withFontFallbacks(svg []byte) []byte {
	return bytes.ReplaceAll(svg, []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
}

// renderPNG returns the figure as PNG at pngDPI. gonum rasterises with
// its own code and the fonts it ships, and encodes with image/png: the
// bytes depend only on the figure, the gonum version and Go's compressor
// (on one architecture: floating point may round differently on another,
// which is why CI compares on linux/amd64). A Go release that compresses
// differently changes the PNGs; CI then asks for them to be redrawn.
func renderPNG(f *figure) ([]byte, error) {
	w, h := f.size()
	c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(pngDPI))
	if err := f.draw(draw.New(c)); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("png %q: %w", f.Title, err)
	}
	return buf.Bytes(), nil
}
