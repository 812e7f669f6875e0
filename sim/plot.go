package sim

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var plotFiles = []struct{ name, title string }{
	{"sim-cumulative.png", "Cumulative spend vs. the pacing curve's target, pacer"},
	{"sim-strategies.png", "Cumulative spend vs. target, pacer and the baselines"},
	{"sim-slots.png", "Spend per slot over plan, pacer"},
	{"sim-hosts.png", "Per-host share of pacer's spend"},
}

// plotCampaigns picks up to n campaigns to draw: hot ones first, then one
// per distinct curve and zone.
func (res *Results) plotCampaigns(n int) []*CampaignResult {
	var out []*CampaignResult
	seen := map[string]bool{}
	add := func(c *CampaignResult) {
		if len(out) < n && !seen[c.ID] {
			seen[c.ID] = true
			out = append(out, c)
		}
	}
	for _, c := range res.Campaigns {
		if c.Hot {
			add(c)
		}
	}
	kinds := map[string]bool{}
	for _, c := range res.Campaigns {
		k := c.Curve + "/" + c.TZ
		if !kinds[k] {
			kinds[k] = true
			add(c)
		}
	}
	return out
}

func hoursInto(c *campaignRT, t time.Time) float64 { return t.Sub(c.day.Start).Hours() }

// WritePlots writes the PNG plots into dir.
func (res *Results) WritePlots(dir string) error {
	for i, f := range []func() (*plot.Plot, error){res.plotCumulative, res.plotStrategies, res.plotSlots, res.plotHosts} {
		p, err := f()
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		if err := p.Save(8*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, plotFiles[i].name)); err != nil {
			return fmt.Errorf("plot %s: %w", plotFiles[i].name, err)
		}
	}
	return nil
}

// hourTicks marks the hours of a day every two hours, labelled every four.
type hourTicks struct{}

func (hourTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for h := 0; h <= 24; h += 2 {
		if float64(h) < lo || float64(h) > hi {
			continue
		}
		t := plot.Tick{Value: float64(h)}
		if h%4 == 0 {
			t.Label = fmt.Sprintf("%02d:00", h)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

func line(pts plotter.XYs, c color.Color, dashed bool) (*plotter.Line, error) {
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.Color = c
	l.Width = vg.Points(1.2)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Width = vg.Points(0.8)
	}
	return l, nil
}

func (res *Results) plotCumulative() (*plot.Plot, error) {
	p := newPlot("pacer: cumulative spend (solid) vs. curve target (dashed)", "hours into the campaign's local day", "share of daily budget")
	for i, cr := range res.plotCampaigns(6) {
		c := cr.rt
		budget := cr.Results[StrategyPacer].BudgetMicros
		actual, target := shares(c, sPacer, budget)
		var a, t plotter.XYs
		for k, s := range c.samples {
			x := hoursInto(c, s.t)
			a = append(a, plotter.XY{X: x, Y: actual[k]})
			t = append(t, plotter.XY{X: x, Y: target[k]})
		}
		col := plotutil.Color(i)
		la, err := line(a, col, false)
		if err != nil {
			return nil, err
		}
		lt, err := line(t, col, true)
		if err != nil {
			return nil, err
		}
		p.Add(la, lt) // the dashed target on top: a campaign on its curve hides it otherwise
		p.Legend.Add(fmt.Sprintf("%s (%s, %s)", cr.ID, cr.Curve, cr.TZ), la)
		if i == 0 {
			p.Legend.Add("curve target (dashed)", lt)
		}
	}
	p.X.Min, p.X.Max = 0, 24
	p.X.Tick.Marker = hourTicks{}
	return p, nil
}

func (res *Results) plotStrategies() (*plot.Plot, error) {
	var cr *CampaignResult
	for _, c := range res.plotCampaigns(len(res.Campaigns)) {
		if c.Baselines {
			cr = c
			break
		}
	}
	if cr == nil {
		return nil, nil
	}
	c := cr.rt
	p := newPlot(fmt.Sprintf("%s (%s curve, demand %.1fx): cumulative spend by strategy", cr.ID, cr.Curve, cr.Demand),
		"hours into the campaign's local day", "share of daily budget")
	var t plotter.XYs
	for _, s := range c.samples {
		t = append(t, plotter.XY{X: hoursInto(c, s.t), Y: float64(c.curve.AtTime(s.t, c.day)) / float64(bucket.PPB)})
	}
	lt, err := line(t, color.Black, true)
	if err != nil {
		return nil, err
	}
	var names []string
	var series []plotter.XYs
	for si, name := range strategies {
		q, ok := cr.Results[name]
		if !ok {
			continue
		}
		actual, _ := shares(c, si, q.BudgetMicros)
		var a plotter.XYs
		for k, s := range c.samples {
			a = append(a, plotter.XY{X: hoursInto(c, s.t), Y: actual[k]})
		}
		names, series = append(names, name), append(series, a)
	}
	lines, labels, err := strategyLines(names, series)
	if err != nil {
		return nil, err
	}
	for i, l := range lines {
		p.Add(l)
		p.Legend.Add(labels[i], l)
	}
	p.Add(lt) // the dashed target on top of them all
	p.Legend.Add("curve target (dashed)", lt)
	// Bottom right: spend lines climb from the bottom left, and the
	// baselines' early spend fills the top left.
	p.Legend.Top, p.Legend.Left = false, false
	p.X.Min, p.X.Max = 0, 24
	p.X.Tick.Marker = hourTicks{}
	return p, nil
}

// strategyLines returns each strategy's cumulative spend line and legend
// label, in drawing order: the baselines first, widest first and each
// narrower than the one before, so that baselines that spend alike (with
// enough demand they all spend as the traffic comes and stop at the budget)
// show as stripes of their colours rather than one line hiding the others;
// pacer last, on top. A strategy whose line is the same as an earlier
// one's says so in its label.
func strategyLines(names []string, series []plotter.XYs) ([]*plotter.Line, []string, error) {
	order := make([]int, 0, len(names))
	for i, name := range names {
		if name != StrategyPacer {
			order = append(order, i)
		}
	}
	baselines := len(order)
	if i := slices.Index(names, StrategyPacer); i >= 0 {
		order = append(order, i)
	}
	var lines []*plotter.Line
	var labels []string
	for k, i := range order {
		l, err := line(series[i], plotutil.Color(slices.Index(strategies, names[i])), false)
		if err != nil {
			return nil, nil, err
		}
		l.Width = vg.Points(1.6)
		if k < baselines {
			l.Width = vg.Points(1.2 + 1.8*float64(baselines-1-k))
		}
		label := strategyTitle[names[i]]
		if j := sameAs(series, i); j >= 0 {
			label += ", the same line as " + strings.SplitN(strategyTitle[names[j]], " ", 2)[0]
		}
		lines, labels = append(lines, l), append(labels, label)
	}
	return lines, labels, nil
}

// sameAs returns the first series before i that has the same points as
// series i (within a millionth of the budget), or -1.
func sameAs(series []plotter.XYs, i int) int {
	for j := range i {
		if len(series[j]) != len(series[i]) {
			continue
		}
		same := true
		for k := range series[i] {
			if math.Abs(series[j][k].Y-series[i][k].Y) > 1e-6 {
				same = false
				break
			}
		}
		if same {
			return j
		}
	}
	return -1
}

func (res *Results) plotSlots() (*plot.Plot, error) {
	p := newPlot("pacer: spend per slot / planned per slot", "slot start, hours into the local day", "spent / planned")
	for i, cr := range res.plotCampaigns(6) {
		c := cr.rt
		budget := cr.Results[StrategyPacer].BudgetMicros
		deltas := SlotDeltas(slotEdges(c, sPacer))
		cum := c.curve.Cumulative()
		n := c.curve.Slots()
		var pts plotter.XYs
		for k, d := range deltas {
			planned := float64(budget) * float64(cum[k+1]-cum[k]) / float64(bucket.PPB)
			if planned <= 0 {
				continue
			}
			pts = append(pts, plotter.XY{X: 24 * float64(k) / float64(n), Y: float64(d) / planned})
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		sc.Shape = draw.CircleGlyph{}
		sc.Radius = vg.Points(2)
		p.Add(l, sc)
		p.Legend.Add(cr.ID, l)
	}
	p.X.Min, p.X.Max = 0, 24
	p.X.Tick.Marker = hourTicks{}
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = false, true
	return p, nil
}

// plotHosts draws each host's share of pacer's allowed spend per hour of the
// run (all campaigns), beside its traffic weight.
func (res *Results) plotHosts() (*plot.Plot, error) {
	if len(res.Campaigns) == 0 || len(res.Hosts) == 0 {
		return nil, nil
	}
	p := newPlot("pacer: each host's share of allowed spend per hour (dashed: its traffic weight)", "hours since the run's start (UTC "+res.Start.UTC().Format("15:04")+")", "share of the fleet's spend")
	hours := int(res.End.Sub(res.Start).Hours() + 0.999)
	per := make([][]float64, len(res.Hosts)) // host -> hour -> micros
	for i := range per {
		per[i] = make([]float64, hours+1)
	}
	for _, cr := range res.Campaigns {
		c := cr.rt
		var prev []int64
		for k, s := range c.samples {
			if k%60 != 0 && k != len(c.samples)-1 {
				continue
			}
			if prev != nil {
				hr := int(s.t.Sub(res.Start).Hours() - 1e-9)
				for h := range s.hosts {
					per[h][min(max(hr, 0), hours)] += float64(s.hosts[h] - prev[h])
				}
			}
			prev = s.hosts
		}
	}
	var wsum float64
	for _, h := range res.Hosts {
		wsum += h.Weight
	}
	for h, hr := range res.Hosts {
		var pts plotter.XYs
		for k := range hours {
			var tot float64
			for j := range per {
				tot += per[j][k]
			}
			if tot > 0 {
				pts = append(pts, plotter.XY{X: float64(k) + 0.5, Y: per[h][k] / tot})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, err := line(pts, plotutil.Color(h), false)
		if err != nil {
			return nil, err
		}
		w, err := line(plotter.XYs{{X: 0, Y: hr.Weight / wsum}, {X: float64(hours), Y: hr.Weight / wsum}}, plotutil.Color(h), true)
		if err != nil {
			return nil, err
		}
		p.Add(l, w)
		name := hr.Name
		if hr.Killed {
			name += " (killed)"
		}
		p.Legend.Add(name, l)
	}
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}
