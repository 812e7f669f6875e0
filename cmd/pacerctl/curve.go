package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/daemon"
)

// loadCurves reads --curves. If the directory itself cannot be read it
// returns that error as unreadable and no curves: pacerctl often runs away
// from the daemons' hosts, so callers warn rather than fail. A directory
// holding a bad curve file is err.
func (a *app) loadCurves() (curves map[string]*bucket.Curve, unreadable, err error) {
	if _, err := os.ReadDir(a.curvesDir); err != nil {
		return nil, err, nil // os errors name the directory; DirFS ones say "."
	}
	curves, err = config.LoadCurves(os.DirFS(a.curvesDir))
	return curves, nil, err
}

// curvesOrFlat is loadCurves for the curve commands: an unreadable
// directory leaves only the built-in flat, with a warning.
func (a *app) curvesOrFlat() (map[string]*bucket.Curve, error) {
	curves, unreadable, err := a.loadCurves()
	if unreadable != nil {
		a.warnf("cannot read the curves directory (%v); showing only the built-in %s.\n  Pass --curves DIR (or set PACER_CURVES; configs/curves in a source checkout)", unreadable, config.FlatCurve)
		return map[string]*bucket.Curve{config.FlatCurve: bucket.Flat(24)}, nil
	}
	return curves, err
}

// curveSummary is one line of curve list.
type curveSummary struct {
	Name         string `json:"name"`
	Slots        int    `json:"slots"`
	PeakSlot     int    `json:"peak_slot"`
	PeakStart    string `json:"peak_start"` // local wall clock on a 24-hour day, "19:00"
	PeakEnd      string `json:"peak_end"`
	PeakSharePPB int64  `json:"peak_share_ppb"`
	// Fitted: the built-in auto, a curve fitted per campaign-day (no
	// fixed peak: the peak fields are zero).
	Fitted bool `json:"fitted,omitempty"`
}

func shares(c *bucket.Curve) []int64 {
	cum := c.Cumulative()
	s := make([]int64, c.Slots())
	for i := range s {
		s[i] = cum[i+1] - cum[i]
	}
	return s
}

// slotClock is the wall-clock start of slot i of n on a 24-hour day.
func slotClock(i, n int) string {
	m := i * 24 * 60 / n
	return fmt.Sprintf("%02d:%02d", m/60, m%60)
}

func summarize(c *bucket.Curve) curveSummary {
	s := shares(c)
	peak := 0
	for i, v := range s {
		if v > s[peak] {
			peak = i // the earliest slot wins a tie
		}
	}
	return curveSummary{Name: c.Name(), Slots: c.Slots(), PeakSlot: peak,
		PeakStart: slotClock(peak, c.Slots()), PeakEnd: slotClock(peak+1, c.Slots()), PeakSharePPB: s[peak]}
}

func (a *app) curveList(ctx context.Context, args []string) error {
	if err := a.noArgs("curve list", args); err != nil {
		return err
	}
	curves, err := a.curvesOrFlat()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(curves))
	for n := range curves {
		names = append(names, n)
	}
	slices.Sort(names)
	list := make([]curveSummary, len(names))
	for i, n := range names {
		list[i] = summarize(curves[n])
	}
	if _, shadowed := curves[daemon.AutoCurve]; !shadowed {
		list = append(list, curveSummary{Name: daemon.AutoCurve, Slots: daemon.AutoCurveSlots, Fitted: true})
	}
	if a.json {
		return a.printJSON(list)
	}
	tw := a.table()
	fmt.Fprintln(tw, "NAME\tSLOTS\tPEAK SLOT\tPEAK SHARE")
	for _, s := range list {
		if s.Fitted {
			fmt.Fprintf(tw, "%s\t%d\tfitted daily per campaign\t(pacerctl curve show %s)\n", s.Name, s.Slots, s.Name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d (%s-%s)\t%s\n", s.Name, s.Slots, s.PeakSlot, s.PeakStart, s.PeakEnd, percentNearest(s.PeakSharePPB))
	}
	return tw.Flush()
}

// percent formats a PPB share as a percentage with two decimals, exactly
// rounded down.
func percent(ppb int64) string {
	bp := ppb / 100_000 // hundredths of a percent
	return fmt.Sprintf("%d.%02d%%", bp/100, bp%100)
}

// percentNearest formats a PPB share as a percentage rounded to the nearest
// hundredth: a curve's 1/24 reads 4.17%, not 4.16%.
func percentNearest(ppb int64) string {
	return percent(ppb + 50_000)
}

// sparkLevels draw a share relative to the largest; a zero share is drawn as
// a space, so "nothing released" stands out from "a little".
var sparkLevels = []rune("▁▂▃▄▅▆▇█")

// maxSparkWidth keeps a 1440-slot curve on one terminal line: slots are
// summed into at most this many columns (15 minutes each).
const maxSparkWidth = 96

// sparkline draws shares, summed into at most maxSparkWidth columns.
func sparkline(s []int64) string {
	per := (len(s) + maxSparkWidth - 1) / maxSparkWidth // 1440 slots -> 15
	for len(s)%per != 0 {
		per++
	}
	cols := make([]int64, len(s)/per)
	var top int64
	for i, v := range s {
		cols[i/per] += v
	}
	for _, v := range cols {
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range cols {
		if v == 0 || top == 0 {
			b.WriteRune(' ')
			continue
		}
		// ceil(v*8/top)-1: any positive share gets at least the lowest bar.
		lvl := (v*int64(len(sparkLevels))+top-1)/top - 1
		b.WriteRune(sparkLevels[lvl])
	}
	return b.String()
}

// hourAxis labels every third hour under a sparkline width columns wide.
func hourAxis(width int) string {
	line := []byte(strings.Repeat(" ", width+2))
	for h := 0; h < 24; h += 3 {
		copy(line[h*width/24:], fmt.Sprint(h))
	}
	return strings.TrimRight(string(line), " ")
}

// curveDetail is curve show's JSON.
type curveDetail struct {
	Name          string  `json:"name"`
	Slots         int     `json:"slots"`
	SharesPPB     []int64 `json:"shares_ppb"`
	CumulativePPB []int64 `json:"cumulative_ppb"`
}

func (a *app) curveShow(ctx context.Context, args []string) error {
	flags := newFlagSet("curve show")
	png := flags.String("png", "", "also draw the curve to this PNG file")
	size := flags.String("size", "1000x500", "the PNG's size in pixels, WIDTHxHEIGHT")
	pos, err := a.parseArgs(flags, args, "<name> [--png FILE] [--size WxH]")
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("curve show: want exactly one curve name, got %d arguments", len(pos))
	}
	width, height, err := parseSize(*size)
	if err != nil {
		return usagef("curve show: --%v", err)
	}
	curves, err := a.curvesOrFlat()
	if err != nil {
		return err
	}
	c, ok := curves[pos[0]]
	if !ok && pos[0] == daemon.AutoCurve {
		if *png != "" {
			return usagef("curve show: %s has no fixed shape to draw: it is fitted per campaign-day", daemon.AutoCurve)
		}
		return a.showAuto()
	}
	if !ok {
		return fmt.Errorf("unknown curve %q (see pacerctl curve list)", pos[0])
	}
	if *png != "" {
		data, err := curvePNG(c, width, height)
		if err != nil {
			return fmt.Errorf("draw %s: %w", *png, err)
		}
		if err := writeFileAtomic(*png, data); err != nil {
			return err
		}
	}
	if a.json {
		return a.printJSON(curveDetail{c.Name(), c.Slots(), shares(c), c.Cumulative()})
	}
	s := summarize(c)
	spark := sparkline(shares(c))
	fmt.Fprintf(a.stdout, "curve %s: %d slots, peak slot %d (%s-%s) with %s of the day\n\n",
		c.Name(), c.Slots(), s.PeakSlot, s.PeakStart, s.PeakEnd, percentNearest(s.PeakSharePPB))
	fmt.Fprintf(a.stdout, "  %s\n  %s\n\n", spark, hourAxis(len([]rune(spark))))
	fmt.Fprintln(a.stdout, "  by     cumulative  in these 3h")
	var prev int64
	for h := 3; h <= 24; h += 3 {
		cum := c.At(time.Duration(h)*time.Hour, 24*time.Hour)
		fmt.Fprintf(a.stdout, "  %02d:00  %10s  %11s\n", h, percentNearest(cum), percentNearest(cum-prev))
		prev = cum
	}
	fmt.Fprintln(a.stdout, "\n  (on a 23- or 25-hour DST day the slots stretch with the day)")
	if *png != "" {
		fmt.Fprintf(a.stdout, "\ndrew %s (%dx%d)\n", *png, width, height)
	}
	return nil
}

// autoDetail is curve show auto's JSON: the rule, with its constants.
type autoDetail struct {
	Name        string  `json:"name"`
	Slots       int     `json:"slots"`
	Fitted      bool    `json:"fitted"`
	Days        int     `json:"days"`
	MinRequests int64   `json:"min_requests"`
	MinShare    float64 `json:"min_share"` // times the mean share per slot
	MaxShare    float64 `json:"max_share"`
	Description string  `json:"description"`
}

// showAuto explains the built-in curve auto, which has no shape of its own.
func (a *app) showAuto() error {
	d := autoDetail{Name: daemon.AutoCurve, Slots: daemon.AutoCurveSlots, Fitted: true, Days: daemon.AutoCurveDays,
		MinRequests: daemon.AutoCurveMinRequests, MinShare: daemon.AutoCurveMin, MaxShare: daemon.AutoCurveMax}
	d.Description = fmt.Sprintf("A campaign with curve %s is paced, each local day, by a %d-slot curve fitted to the SPEND "+
		"requests its fleet recorded on the %d local days before (the method of pacerctl curve fit), every slot "+
		"bounded to %g..%g times the mean share. The first daemon to open the day decides the fit and records it "+
		"in the ledger; every other daemon reads it, so the whole fleet paces one curve. With fewer than %d "+
		"requests recorded the day is paced flat.", d.Name, d.Slots, d.Days, d.MinShare, d.MaxShare, d.MinRequests)
	if a.json {
		return a.printJSON(d)
	}
	fmt.Fprintf(a.stdout, "curve %s: built in, fitted per campaign-day (%d slots)\n\n", d.Name, d.Slots)
	for _, line := range wrap(d.Description, 78) {
		fmt.Fprintf(a.stdout, "  %s\n", line)
	}
	fmt.Fprintf(a.stdout, "\n  To see what it would fit for a campaign now: pacerctl curve fit <campaign> --days %d --slots %d\n",
		d.Days, d.Slots)
	return nil
}

// wrap breaks text into lines of at most width bytes at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}
