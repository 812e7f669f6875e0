package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteJSON writes the results as indented JSON.
func (res *Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

var strategyTitle = map[string]string{
	StrategyPacer:    "pacer",
	StrategyLua:      "(a) Lua check-and-decrement per SPEND",
	StrategyBatch:    "(b) 8 sharded keys, 100 ms write batching",
	StrategyNoPacing: "(c) no pacing, stop at budget",
}

func pct(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }

// WriteMarkdown writes the side-by-side table, the per-campaign table for
// pacer and the run's notes. imgDir, when set, is where the plots are linked
// from.
func (res *Results) WriteMarkdown(w io.Writer, imgDir string) error {
	var b strings.Builder
	hot := 0
	for _, c := range res.Campaigns {
		if c.Hot {
			hot++
		}
	}
	writeRun(&b, res, hot)
	writeStrategies(&b, res, hot)
	writePacerCampaigns(&b, res)
	writeBaselineCampaigns(&b, res)
	writeWorst(&b, res)
	writeNotes(&b, res)
	if imgDir != "" {
		b.WriteString("\n")
		for _, p := range plotFiles {
			fmt.Fprintf(&b, "![%s](%s)\n", p.title, filepath.ToSlash(filepath.Join(imgDir, p.name)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeRun writes the heading and the paragraph saying what ran.
func writeRun(b *strings.Builder, res *Results, hot int) {
	fmt.Fprintf(b, "## Simulation: %s\n\n", res.Scenario)
	var killed []string
	for _, h := range res.Hosts {
		if h.Killed {
			killed = append(killed, h.Name)
		}
	}
	fmt.Fprintf(b, "%d hosts, %d campaigns (%d at >= %d SPENDs/s), local date %s, %.1f simulated hours in %.1f s wall; seed %d. ",
		len(res.Hosts), len(res.Campaigns), hot, hotRate, res.Date, res.SimulatedHours, res.WallSeconds, res.Seed)
	if res.WarmupHours > 0 {
		fmt.Fprintf(b, "After a warm-up of %.1f simulated hours (the day before, pacer only, not counted). ", res.WarmupHours)
	}
	fmt.Fprintf(b, "%d pacer SPENDs (every one a real `Daemon.Spend`). Lease window %s, step %s, arrivals every %s. ",
		res.Summary[StrategyPacer].Spends, res.Daemon.LeaseWindow, res.Daemon.Step, res.Daemon.ArrivalTick)
	if res.BaselineThin > 1 {
		fmt.Fprintf(b, "Baselines (a) and (b) ran on every %d-th arrival of each host and campaign with the budget divided by %d (measured, real Redis commands, at 1/%d of the rate); (c) saw every arrival. ",
			res.BaselineThin, res.BaselineThin, res.BaselineThin)
	}
	if len(killed) > 0 {
		fmt.Fprintf(b, "Killed: %s. ", strings.Join(killed, ", "))
	}
	fmt.Fprintf(b, "Ledger conservation at the end (`CheckDay`): %s.\n\n", map[bool]string{true: "balanced on every campaign-day", false: "PROBLEMS, see below"}[res.ConservationOK])
}

// writeStrategies writes the side-by-side table: a row per strategy.
func writeStrategies(b *strings.Builder, res *Results, hot int) {
	b.WriteString("| strategy | overspend (campaigns; worst % of budget) | utilisation min / mean | tracking error max / mean RMS | smoothness (CV) | Redis cmds per 1,000 SPENDs (all; hot) | SPEND latency p50 / p99 / p999 |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, name := range res.Strategies {
		s := res.Summary[name]
		over := fmt.Sprintf("0 of %d", s.Campaigns)
		if s.OverspendCampaigns > 0 {
			over = fmt.Sprintf("%d of %d; %s", s.OverspendCampaigns, s.Campaigns, pct(s.OverspendMaxShare))
		}
		hotCmds := "–"
		if s.CmdsPer1000Hot > 0 || hot > 0 {
			hotCmds = fmt.Sprintf("%.3f", s.CmdsPer1000Hot)
		}
		fmt.Fprintf(b, "| %s | %s | %s / %s | %s / %s | %.3f | %.3f; %s | %.2f / %.2f / %.2f µs |\n",
			strategyTitle[name], over, pct(s.UtilisationMin), pct(s.UtilisationMean),
			pct(s.TrackingMax), pct(s.TrackingRMSMean), s.SmoothnessMean, s.CmdsPer1000, hotCmds,
			s.LatencyP50, s.LatencyP99, s.LatencyP999)
	}
}

// writePacerCampaigns writes pacer's row per campaign.
func writePacerCampaigns(b *strings.Builder, res *Results) {
	b.WriteString("\nPer campaign, pacer (tracking error and overspend as shares of the daily budget):\n\n")
	b.WriteString("| campaign | curve | tz | traffic | SPENDs/s | demand (asked) | overspend | utilisation | tracking max / RMS | smoothness | last hour (x curve) | max hour x curve (less a bid) | host share gap | cmds/1,000 | cmds/hour | leased at midnight | lost (settled) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range res.Campaigns {
		q := c.Results[StrategyPacer]
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %.2fx (%.2fx) | %d | %s | %s / %s | %.3f | %s (%.2fx) | %.2fx (%.2fx) | %.1f pts | %.3f | %.0f | %s | %s |\n",
			c.ID, c.Curve, c.TZ, c.Traffic, rate(c.Rate), c.Demand, q.DemandAsked, max(q.OverspendMicros, 0), pct(q.Utilisation),
			pct(q.TrackingMax), pct(q.TrackingRMS), q.Smoothness, pct(q.LastHourShare), q.LastHourRatio,
			q.MaxHourRatio, q.MaxHourRatioBid, q.HostShareMaxDev, q.CmdsPer1000, q.CmdsPerHour,
			pct(float64(c.Ledger.LeasedAtDayEnd)/float64(q.BudgetMicros)), pct(float64(c.Ledger.Lost)/float64(q.BudgetMicros)))
	}
}

// writeBaselineCampaigns writes the baselines' row per campaign, if any ran.
func writeBaselineCampaigns(b *strings.Builder, res *Results) {
	if len(res.Strategies) <= 1 {
		return
	}
	b.WriteString("\nPer campaign, baselines (overspend as share of budget / utilisation / tracking max):\n\n")
	b.WriteString("| campaign |")
	for _, name := range res.Strategies[1:] {
		b.WriteString(" " + name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(res.Strategies)-1) + "\n")
	for _, c := range res.Campaigns {
		b.WriteString("| " + c.ID + " |")
		for _, name := range res.Strategies[1:] {
			q, ok := c.Results[name]
			if !ok {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(b, " %s / %s / %s |", pct(float64(max(q.OverspendMicros, 0))/float64(max(q.BudgetMicros, 1))), pct(q.Utilisation), pct(q.TrackingMax))
		}
		b.WriteString("\n")
	}
}

// writeNotes writes the run's Redis command counts, faults, conservation
// problems and notes.
func writeNotes(b *strings.Builder, res *Results) {
	fmt.Fprintf(b, "\nRedis commands over the run: pacer daemons %d, reconciler %d, Lua baseline %d, batching baseline %d", res.Redis.Pacer, res.Redis.Reconciler, res.Redis.Lua, res.Redis.Batch)
	if res.Redis.FailedWhilePaused > 0 {
		fmt.Fprintf(b, "; %d refused while Redis was paused", res.Redis.FailedWhilePaused)
	}
	b.WriteString(".\n")
	if len(res.Faults) > 0 {
		b.WriteString("\nFaults:\n\n")
		for _, f := range res.Faults {
			fmt.Fprintf(b, "- at +%s (%s UTC): %s\n", f.Offset, f.At.UTC().Format("15:04:05"), f.What)
		}
	}
	for _, c := range res.Campaigns {
		for _, p := range c.Ledger.Problems {
			fmt.Fprintf(b, "- conservation problem: %s\n", p)
		}
	}
	if len(res.Notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range res.Notes {
			fmt.Fprintf(b, "- %s\n", n)
		}
	}
}

// WriteFiles writes results.json, results.md and the plots into dir.
func (res *Results) WriteFiles(dir, imgPrefix string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, f func(io.Writer) error) error {
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		return fh.Close()
	}
	if err := write("results.json", res.WriteJSON); err != nil {
		return err
	}
	if err := write("results.md", func(w io.Writer) error { return res.WriteMarkdown(w, imgPrefix) }); err != nil {
		return err
	}
	return res.WritePlots(dir)
}

// rate prints SPENDs per second, with SPENDs per day for sparse campaigns.
func rate(perSecond float64) string {
	if perSecond >= 1 {
		return fmt.Sprintf("%.0f", perSecond)
	}
	return fmt.Sprintf("%.0f/day", perSecond*86400)
}

// worst is one delivery goal's worst case over the campaigns it applies to.
type worst struct {
	goal, scope string
	val         float64
	id          string
	n           int
	better      func(a, b float64) bool // a is worse than b
	format      func(float64) string
	meets       func(float64) bool // the goal holds for this value; nil: a figure to report
	met         int
}

// see counts campaign id's value v of the goal's metric.
func (w *worst) see(id string, v float64) {
	w.n++
	if w.meets != nil && w.meets(v) {
		w.met++
	}
	if w.n == 1 || w.better(v, w.val) {
		w.val, w.id = v, id
	}
}

// worstGoals are the delivery goals writeWorst reports, in its order; the
// values worstValues gives a campaign follow the same order.
func worstGoals() []*worst {
	lower := func(a, b float64) bool { return a < b }
	higher := func(a, b float64) bool { return a > b }
	pctF := func(v float64) string { return pct(v) }
	ratio := func(v float64) string { return fmt.Sprintf("%.2fx", v) }
	pts := func(v float64) string { return fmt.Sprintf("%.1f pts", v) }
	num := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	atMost := func(limit float64) func(float64) bool { return func(v float64) bool { return v <= limit } }
	atLeast := func(limit float64) func(float64) bool { return func(v float64) bool { return v >= limit } }
	return []*worst{
		{goal: "overspend (micros) = 0", scope: "every campaign", better: higher, format: num, meets: atMost(0)},
		{goal: "utilisation >= 99.5%", scope: "demand >= 1.05x, traffic reaches the curve", better: lower, format: pctF, meets: atLeast(0.995)},
		{goal: "utilisation >= 99.5%", scope: "demand >= 1.05x, the day's SPENDs reach the curve (the curve oracle spends >= 99.5%)", better: lower, format: pctF, meets: atLeast(0.995)},
		{goal: "utilisation >= 97%", scope: "20 to 10,000 bids, demand >= 1.5x, traffic reaches the curve", better: lower, format: pctF, meets: atLeast(0.97)},
		{goal: "utilisation >= 97%", scope: "20 to 10,000 bids, demand >= 1.5x, traffic reaches the curve, the day's SPENDs asked >= 1.5x the budget", better: lower, format: pctF, meets: atLeast(0.97)},
		{goal: "no hour > 2x the curve's share", scope: "20 to 10,000 bids, demand >= 1.5x, traffic reaches the curve (less one bid per hour)", better: higher, format: ratio, meets: atMost(2)},
		{goal: "last hour <= 1.5x the curve's", scope: "demand >= 1.05x", better: higher, format: ratio, meets: atMost(1.5)},
		{goal: "host share within 3 pts of demand share", scope: "demand >= 1.05x (demand share: the host's weight)", better: higher, format: pts, meets: atMost(3)},
		{goal: "host share within 3 pts of demand share", scope: "demand >= 1.05x, sampling error <= 1 pt (demand share: the SPENDs the host was asked)", better: higher, format: pts, meets: atMost(3)},
		{goal: "Redis cmds per 1,000 SPENDs <= 1", scope: "busy (>= 100 SPENDs/s)", better: higher, format: func(v float64) string { return fmt.Sprintf("%.2f", v) }, meets: atMost(1)},
		{goal: "Redis cmds per campaign-hour (report)", scope: "sparse (< 1 SPEND/s)", better: higher, format: num},
	}
}

// goalValue is a campaign's value for one goal, and whether the goal
// applies to it.
type goalValue struct {
	ok bool
	v  float64
}

// worstValues is campaign c's value for each of worstGoals, in order.
func worstValues(c *CampaignResult, q *Quality) []goalValue {
	small := c.Bids >= 20 && c.Bids <= 10_000
	return []goalValue{
		{true, float64(q.OverspendMicros)},
		{c.Demand >= 1.05 && c.Reachable, q.Utilisation},
		{c.Demand >= 1.05 && c.OracleUtilisation >= 0.995, q.Utilisation},
		{small && c.Demand >= 1.5 && c.Reachable, q.Utilisation},
		{small && c.Demand >= 1.5 && c.Reachable && q.DemandAsked >= 1.5, q.Utilisation},
		{small && c.Demand >= 1.5 && c.Reachable, q.MaxHourRatioBid},
		{c.Demand >= 1.05, q.LastHourRatio},
		{c.Demand >= 1.05, q.HostShareMaxDev},
		{c.Demand >= 1.05 && q.HostShareNoise > 0 && q.HostShareNoise <= 1, q.HostShareAskedDev},
		{c.Rate >= 100, q.CmdsPer1000},
		{c.Rate < 1, q.CmdsPerHour},
	}
}

// writeWorst writes pacer's worst case per metric over the campaigns each
// delivery goal applies to, with the campaign that set it.
func writeWorst(b *strings.Builder, res *Results) {
	ws := worstGoals()
	for _, c := range res.Campaigns {
		q := c.Results[StrategyPacer]
		if q == nil {
			continue
		}
		for i, v := range worstValues(c, q) {
			if v.ok {
				ws[i].see(c.ID, v.v)
			}
		}
	}
	b.WriteString("\nWorst case per metric, pacer (issue 10's goals):\n\n| goal | over | campaigns | meeting it | worst | campaign |\n|---|---|---|---|---|---|\n")
	for _, w := range ws {
		met := "–"
		if w.meets != nil {
			met = fmt.Sprint(w.met)
		}
		if w.n == 0 {
			fmt.Fprintf(b, "| %s | %s | 0 | – | – | – |\n", w.goal, w.scope)
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s |\n", w.goal, w.scope, w.n, met, w.format(w.val), w.id)
	}
}
