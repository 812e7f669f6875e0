package main

import (
	"bytes"
	"fmt"
	"image/color"
	"strconv"
	"strings"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// pngDPI is the resolution PNGs are drawn at: sizes are given in pixels.
const pngDPI = 96

// parseSize reads "WxH" in pixels.
func parseSize(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if !ok || err1 != nil || err2 != nil || w < 200 || h < 200 || w > 8000 || h > 8000 {
		return 0, 0, fmt.Errorf("size %q: want WIDTHxHEIGHT in pixels, each 200 to 8000, such as 1000x500", s)
	}
	return w, h, nil
}

// hourTicks marks every third hour of the day.
type hourTicks struct{}

func (hourTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for h := 0; h <= 24; h++ {
		if h%3 == 0 {
			t = append(t, plot.Tick{Value: float64(h), Label: fmt.Sprintf("%02d:00", h)})
		} else {
			t = append(t, plot.Tick{Value: float64(h)})
		}
	}
	return t
}

// curvePNG draws c: on top, each slot's share of the day's budget as steps
// (per hour, so curves of any slot count compare, with flat's as a dashed
// line); below, the cumulative share as a line, with flat's diagonal.
func curvePNG(c *bucket.Curve, width, height int) ([]byte, error) {
	n := c.Slots()
	cum := c.Cumulative()
	slotHours := 24 / float64(n)
	steps := make(plotter.XYs, n+1)
	cumLine := make(plotter.XYs, n+1)
	for i := 0; i <= n; i++ {
		x := float64(i) * slotHours
		j := min(i, n-1) // the last step's height carries to 24:00
		share := float64(cum[j+1]-cum[j]) / float64(bucket.PPB)
		steps[i] = plotter.XY{X: x, Y: 100 * share / slotHours}
		cumLine[i] = plotter.XY{X: x, Y: 100 * float64(cum[i]) / float64(bucket.PPB)}
	}
	top, err := sharesPlot(c.Name(), n, steps)
	if err != nil {
		return nil, err
	}
	bottom, err := cumulativePlot(c.Name(), cumLine)
	if err != nil {
		return nil, err
	}
	px := func(p int) vg.Length { return vg.Length(p) * vg.Inch / pngDPI }
	canvas := vgimg.NewWith(vgimg.UseWH(px(width), px(height)), vgimg.UseDPI(pngDPI))
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(8)}
	plots := [][]*plot.Plot{{top}, {bottom}}
	cells := plot.Align(plots, tiles, dc)
	top.Draw(cells[0][0])
	bottom.Draw(cells[1][0])
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: canvas}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

var (
	plotBlue = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	plotGrey = color.Gray{Y: 128}
)

// flatLine is flat's curve in a plot, dashed grey, from a to b.
func flatLine(a, b plotter.XY) (*plotter.Line, error) {
	l, err := plotter.NewLine(plotter.XYs{a, b})
	if err != nil {
		return nil, err
	}
	l.Color, l.Dashes = plotGrey, []vg.Length{vg.Points(4), vg.Points(3)}
	return l, nil
}

// sharesPlot is curvePNG's top half: the share of the day per hour of each
// slot, as steps, beside flat's. Drawing flat against itself would say
// "flat" twice in the legend.
func sharesPlot(name string, n int, steps plotter.XYs) (*plot.Plot, error) {
	top := plot.New()
	top.Title.Text = fmt.Sprintf("Pacing curve %s (%d slots): share of the day's budget", name, n)
	top.Y.Label.Text = "% of the day per hour"
	top.Y.Min = 0
	for _, p := range steps {
		top.Y.Max = max(top.Y.Max, p.Y*1.3) // headroom for the legend
	}
	top.X.Min, top.X.Max = 0, 24
	top.X.Tick.Marker = hourTicks{}
	top.Add(plotter.NewGrid())
	l, err := plotter.NewLine(steps)
	if err != nil {
		return nil, err
	}
	l.StepStyle = plotter.PostStep
	l.Color = plotBlue
	l.Width = vg.Points(1.5)
	l.FillColor = color.NRGBA{R: 31, G: 119, B: 180, A: 70}
	top.Add(l)
	top.Legend.Add(name, l)
	if name != config.FlatCurve {
		flat, err := flatLine(plotter.XY{X: 0, Y: 100.0 / 24}, plotter.XY{X: 24, Y: 100.0 / 24})
		if err != nil {
			return nil, err
		}
		top.Add(flat)
		top.Legend.Add("flat", flat)
	}
	top.Legend.Top = true
	return top, nil
}

// cumulativePlot is curvePNG's bottom half: the cumulative share of the day,
// beside flat's diagonal.
func cumulativePlot(name string, cumLine plotter.XYs) (*plot.Plot, error) {
	bottom := plot.New()
	bottom.Title.Text = "Cumulative share of the day's budget"
	bottom.X.Label.Text = "local time (slots stretch or shrink on 23- and 25-hour DST days)"
	bottom.Y.Label.Text = "% of the day"
	bottom.X.Min, bottom.X.Max = 0, 24
	bottom.Y.Min, bottom.Y.Max = 0, 100
	bottom.X.Tick.Marker = hourTicks{}
	bottom.Add(plotter.NewGrid())
	cl, err := plotter.NewLine(cumLine)
	if err != nil {
		return nil, err
	}
	cl.Color, cl.Width = plotBlue, vg.Points(1.5)
	bottom.Add(cl)
	bottom.Legend.Add(name, cl)
	if name != config.FlatCurve {
		diag, err := flatLine(plotter.XY{X: 0, Y: 0}, plotter.XY{X: 24, Y: 100})
		if err != nil {
			return nil, err
		}
		bottom.Add(diag)
		bottom.Legend.Add("flat", diag)
	}
	bottom.Legend.Top, bottom.Legend.Left = true, true
	return bottom, nil
}
