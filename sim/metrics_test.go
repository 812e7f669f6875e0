package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestUtilisationAndOverspend(t *testing.T) {
	for _, tc := range []struct {
		allowed, refunded, budget int64
		util                      float64
		over                      int64
	}{
		{1000, 0, 1000, 1, 0},
		{995, 0, 1000, 0.995, -5},
		{1100, 50, 1000, 1.1, 50}, // utilisation counts allowed; overspend nets refunds
		{0, 0, 0, 0, 0},
	} {
		if got := Utilisation(tc.allowed, tc.budget); !near(got, tc.util) {
			t.Errorf("Utilisation(%d, %d) = %v, want %v", tc.allowed, tc.budget, got, tc.util)
		}
		if got := Overspend(tc.allowed, tc.refunded, tc.budget); got != tc.over {
			t.Errorf("Overspend(%d, %d, %d) = %d, want %d", tc.allowed, tc.refunded, tc.budget, got, tc.over)
		}
	}
}

func TestTrackingError(t *testing.T) {
	for _, tc := range []struct {
		name             string
		actual, target   []float64
		wantMax, wantRMS float64
	}{
		{"empty", nil, nil, 0, 0},
		{"exact", []float64{0, 0.5, 1}, []float64{0, 0.5, 1}, 0, 0},
		// errors 0, 0.1, 0.2: max 0.2, rms sqrt((0+0.01+0.04)/3)
		{"lagging", []float64{0, 0.4, 0.8}, []float64{0, 0.5, 1}, 0.2, math.Sqrt(0.05 / 3)},
		// absolute value: ahead counts as much as behind
		{"ahead", []float64{0.3, 1}, []float64{0, 1}, 0.3, math.Sqrt(0.09 / 2)},
		{"uneven lengths use the shorter", []float64{0.1, 0.2, 0.9}, []float64{0, 0.2}, 0.1, math.Sqrt(0.01 / 2)},
	} {
		m, r := TrackingError(tc.actual, tc.target)
		if !near(m, tc.wantMax) || !near(r, tc.wantRMS) {
			t.Errorf("%s: TrackingError = %v, %v; want %v, %v", tc.name, m, r, tc.wantMax, tc.wantRMS)
		}
	}
}

func TestSmoothness(t *testing.T) {
	for _, tc := range []struct {
		name           string
		spent, planned []int64
		want           float64
	}{
		{"on plan", []int64{10, 20, 30}, []int64{10, 20, 30}, 0},
		{"proportional", []int64{5, 10, 15}, []int64{10, 20, 30}, 0},
		// ratios 0.5, 1.5: mean 1, population sd 0.5
		{"uneven", []int64{5, 30}, []int64{10, 20}, 0.5},
		// the zero-plan slot is skipped; ratios 1, 3: mean 2, sd 1
		{"zero plan skipped", []int64{10, 99, 30}, []int64{10, 0, 10}, 0.5},
		{"nothing planned", []int64{1}, []int64{0}, 0},
		{"nothing spent", []int64{0, 0}, []int64{1, 1}, 0},
	} {
		if got := Smoothness(tc.spent, tc.planned); !near(got, tc.want) {
			t.Errorf("%s: Smoothness = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSlotDeltas(t *testing.T) {
	got := SlotDeltas([]int64{0, 10, 25, 25, 40})
	want := []int64{10, 15, 0, 15}
	if len(got) != len(want) {
		t.Fatalf("SlotDeltas = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("SlotDeltas = %v, want %v", got, want)
		}
	}
	if SlotDeltas([]int64{5}) != nil {
		t.Fatal("one edge has no slots")
	}
}

func TestPercentiles(t *testing.T) {
	var s []time.Duration
	for i := 1000; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i))
	}
	got := Percentiles(s, 0.5, 0.99, 0.999, 1)
	want := []time.Duration{500, 990, 999, 1000}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Percentiles = %v, want %v", got, want)
		}
	}
	if p := Percentiles(nil, 0.5); p[0] != 0 {
		t.Fatalf("empty = %v", p)
	}
}

func TestShapesHaveMeanOne(t *testing.T) {
	for _, spec := range []string{"flat", "cosine", "cosine@3.5"} {
		sh, err := parseShape(spec, nil, ".")
		if err != nil {
			t.Fatal(err)
		}
		var sum, lo, hi float64
		lo = math.Inf(1)
		const n = 24 * 60
		for i := range n {
			v := sh.at(float64(i) / n)
			sum += v
			lo, hi = min(lo, v), max(hi, v)
		}
		if math.Abs(sum/n-1) > 1e-6 {
			t.Errorf("%s: mean %v, want 1", spec, sum/n)
		}
		if spec != "flat" && math.Abs(hi/lo-4) > 0.01 {
			t.Errorf("%s: peak/trough %v, want 4", spec, hi/lo)
		}
	}
}

// The curve oracle allows SPENDs while the total stays within the curve's
// target plus a bid, and behind the curve recovers at most 3x its pace (1.25x
// in the last hour).
func TestCurveOracle(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	const budget = 86_400_000 // 1,000 micros a second on a flat curve
	c := &campaignRT{day: day, curve: bucket.Flat(24), budget: budget, maxBid: 1_000}
	spendEvery := func(from, to time.Time, every time.Duration, amount int64) {
		for at := from; at.Before(to); at = at.Add(every) {
			oracleSpendAll(c, new(curveMemo).at(c, at), []int64{amount}, at)
		}
	}
	// Two bids a second for the first hour, against a pace of one: it
	// follows the curve (one an hour's pace), never above it by more than a
	// bid.
	spendEvery(day.Start, day.Start.Add(time.Hour), 500*time.Millisecond, 1_000)
	if hour := int64(3_600_000); c.oracleSpent < hour-2_000 || c.oracleSpent > hour+1_000 {
		t.Fatalf("oracle spent %d in the first hour at 2x the pace; want about the hour's %d", c.oracleSpent, hour)
	}
	// No SPENDs for the next three hours, then an hour at 10x the pace: it
	// spends 3x the pace all hour (still behind at its end), plus the
	// allowance of a minute at 3x that it held when the SPENDs resumed.
	before := c.oracleSpent
	spendEvery(day.Start.Add(4*time.Hour), day.Start.Add(5*time.Hour), 100*time.Millisecond, 1_000)
	if got, want := c.oracleSpent-before, int64(3*3_600_000); got < want || got > want+180_000+1_000 {
		t.Fatalf("oracle spent %d in an hour of catch-up; want 3x the pace, about %d", got, want)
	}
	// Far behind in the last hour, it spends 1.25x the pace (plus at most a
	// minute of that held).
	before = c.oracleSpent
	spendEvery(day.End.Add(-time.Hour), day.End, 100*time.Millisecond, 1_000)
	if got, want := c.oracleSpent-before, int64(4_500_000); got < want-1_000 || got > want+75_000+1_000 {
		t.Fatalf("oracle spent %d in the last hour, far behind; want 1.25x the pace, about %d", got, want)
	}
}

// The oracle's allowance grows with the curve, not with the order its
// arrivals come in: the simulator's hosts hand them in out of order by up
// to a step, and each step back and forth again counted as pace.
func TestCurveOracleArrivalsOutOfOrder(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	const budget = 86_400_000 // 1,000 micros a second on a flat curve
	c := &campaignRT{day: day, curve: bucket.Flat(24), budget: budget, maxBid: 1_000}
	// Far behind in the last hour, SPENDs every 100 ms at 10x the pace, each
	// pair handed in later one first, a second apart.
	from := day.End.Add(-time.Hour)
	for at := from; at.Before(day.End.Add(-time.Second)); at = at.Add(200 * time.Millisecond) {
		oracleSpendAll(c, new(curveMemo).at(c, at.Add(time.Second)), []int64{1_000}, at.Add(time.Second))
		oracleSpendAll(c, new(curveMemo).at(c, at), []int64{1_000}, at)
	}
	if got, want := c.oracleSpent, int64(4_500_000); got < want-2_000 || got > want+75_000+1_000 {
		t.Fatalf("oracle spent %d in the last hour, arrivals out of order; want 1.25x the pace, about %d", got, want)
	}
}

// A host's curve memo gives the curve's positions at its arrival tick and a
// minute later, as the curve does, and reads them again when the tick moves
// on (on a curve that is not flat, so a stale position would show).
func TestCurveMemo(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	hourly := make([]float64, 24)
	for i := range hourly {
		hourly[i] = float64(i + 1)
	}
	curve, err := bucket.NewCurve("ramp", hourly)
	if err != nil {
		t.Fatal(err)
	}
	c := &campaignRT{day: day, curve: curve}
	var m curveMemo
	for _, at := range []time.Time{day.Start, day.Start.Add(90 * time.Minute), day.Start.Add(90 * time.Minute),
		day.Start.Add(13*time.Hour + 100*time.Millisecond), day.End.Add(-30 * time.Second), day.Start.Add(time.Hour)} {
		got := m.at(c, at)
		if want, wantAhead := curve.AtTime(at, day), curve.AtTime(at.Add(time.Minute), day); got.pos != want || got.posAhead != wantAhead {
			t.Fatalf("memo at %s: %d, a minute on %d; the curve says %d, %d", at.Format(time.TimeOnly), got.pos, got.posAhead, want, wantAhead)
		}
	}
}

// The ahead invariant names each spell a campaign ran more than two mean
// bids (or 2% of its budget) ahead of its curve, where it began and how far
// it went; a campaign on its curve, or behind it, breaks nothing.
func TestAheadOfTheCurve(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	const budget = 8_640_000 // 100 micros a second on a flat curve
	c := &campaignRT{spec: Spec{ID: "c"}, loc: time.UTC, day: day, curve: bucket.Flat(24), budget: budget, meanBid: 100_000}
	if got, want := c.aheadBound(), 200_000.0; got != want {
		t.Fatalf("bound %v, want two mean bids, %v (more than 2%% of the budget)", got, want)
	}
	onCurve := func(at time.Time) int64 { return int64(at.Sub(day.Start).Seconds() * 100) }
	for at := day.Start; !at.After(day.End); at = at.Add(CatchUpWindow) {
		cum := onCurve(at)
		switch {
		case at.Hour() == 1 && at.Minute() < 10: // 2.5 bids ahead for ten minutes
			cum += 250_000
		case at.Hour() == 5 && at.Minute() < 10: // 2 bids ahead: within
			cum += 200_000
		case at.Hour() == 9: // far behind: not this invariant's
			cum -= 1_000_000
		case at.Hour() == 20 && at.Minute() == 30 && at.Second() == 0: // one sample just over
			cum += 200_001
		}
		c.tens = append(c.tens, tenSample{t: at, cum: cum})
	}
	v := aheadViolations(c)
	if len(v) != 2 {
		t.Fatalf("%d violations, want 2: %v", len(v), v)
	}
	if v[0].Invariant != "ahead" || v[0].Campaign != "c" || v[0].At != "01:00:00" || !strings.Contains(v[0].Detail, "250000 micros ahead") {
		t.Errorf("first: %v; want ahead at 01:00:00, 250000 micros", v[0])
	}
	if v[1].At != "20:30:00" || !strings.Contains(v[1].Detail, "200001 micros ahead") {
		t.Errorf("second: %v; want ahead at 20:30:00, 200001 micros", v[1])
	}
	c.budget = 100 * budget // 2% of it is more than two bids
	if got, want := c.aheadBound(), 0.02*100*budget; got != want {
		t.Errorf("bound %v, want 2%% of the budget, %v", got, want)
	}
}

// The invariants judge runs by the daemons' defaults: they must be the
// daemon's.
func TestInvariantsUseTheDaemonsDefaults(t *testing.T) {
	c, err := daemon.DefaultConfig().WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.CatchUp != defaultCatchUp || c.CapWindow != defaultCapWindow || c.LeaseWindow != leaseWindow {
		t.Errorf("the invariants assume catch-up %dx, cap window %s, lease window %s; the daemon's defaults are %dx, %s, %s",
			defaultCatchUp, defaultCapWindow, leaseWindow, c.CatchUp, c.CapWindow, c.LeaseWindow)
	}
}

// The behind invariant names each spell a campaign fell more than two mean
// bids (or 2% of its budget) below the less of its curve and what its
// demand offered (the curve oracle's spend): a campaign whose demand fell
// short, or that ran ahead of its curve, breaks nothing.
func TestBehindTheCurve(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	const budget = 8_640_000 // 100 micros a second on a flat curve
	c := &campaignRT{spec: Spec{ID: "c"}, loc: time.UTC, day: day, curve: bucket.Flat(24), budget: budget, meanBid: 100_000}
	onCurve := func(at time.Time) int64 { return int64(at.Sub(day.Start).Seconds() * 100) }
	for at := day.Start; !at.After(day.End); at = at.Add(CatchUpWindow) {
		cum, oracle := onCurve(at), onCurve(at)
		switch {
		case at.Hour() == 3: // demand fell short: the oracle is behind too
			cum, oracle = cum-1_000_000, oracle-900_000
		case at.Hour() == 9 && at.Minute() < 10: // 2.5 bids behind for ten minutes
			cum -= 250_000
		case at.Hour() == 12: // ahead of the curve: not this invariant's
			cum += 1_000_000
		case at.Hour() == 14 && at.Minute() < 10: // the oracle a bid ahead; 1.9 bids behind the curve: within
			cum, oracle = cum-190_000, oracle+100_000
		case at.Hour() == 20 && at.Minute() == 30 && at.Second() == 0: // one sample just over
			cum -= 200_001
		}
		c.tens = append(c.tens, tenSample{t: at, cum: cum, oracle: oracle})
	}
	v := behindViolations(c)
	if len(v) != 2 {
		t.Fatalf("%d violations, want 2: %v", len(v), v)
	}
	if v[0].Invariant != "behind" || v[0].Campaign != "c" || v[0].At != "09:00:00" || !strings.Contains(v[0].Detail, "250000 micros behind") {
		t.Errorf("first: %v; want behind at 09:00:00, 250000 micros", v[0])
	}
	if v[1].At != "20:30:00" || !strings.Contains(v[1].Detail, "200001 micros behind") {
		t.Errorf("second: %v; want behind at 20:30:00, 200001 micros", v[1])
	}
	if got := c.behindMax(); got != 250_000 {
		t.Errorf("behindMax %v, want 250000", got)
	}
}

// The cold-start ratio measures a fresh fleet's window from 2 s to 12 s
// after its start against the less of the curve's plan for it and what
// the oracle spent in it, where that is at least 50 mean bids; a ratio
// under 0.8 there is a violation, named at the window's start.
func TestColdStartRatio(t *testing.T) {
	if ColdStartWithin != 2*time.Second || ColdStartShare != 0.8 || ColdStartBids != 50 || CatchUpWindow != 10*time.Second {
		t.Fatalf("docs/PACING.md quotes the cold start as 80%% over 10 s from 2 s on, where it could take 50 mean bids; the constants say %.0f%% over %s from %s, %d bids",
			100*ColdStartShare, CatchUpWindow, ColdStartWithin, ColdStartBids)
	}
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	const budget = 8_640_000_000 // 100,000 micros a second on a flat curve: 1,000,000 in 10 s
	from, to := day.Start.Add(ColdStartWithin), day.Start.Add(ColdStartWithin+CatchUpWindow)
	for _, tc := range []struct {
		name          string
		meanBid       float64
		spent, oracle int64 // over the window
		want          float64
	}{
		{"the plan, demand offered more", 10_000, 790_000, 1_100_000, 0.79},
		{"demand offered less than the plan", 10_000, 500_000, 625_000, 0.8},
		{"fewer than 50 mean bids: not measured", 30_000, 0, 1_100_000, 0},
	} {
		c := &campaignRT{spec: Spec{ID: "c"}, loc: time.UTC, day: day, curve: bucket.Flat(24), budget: budget, meanBid: tc.meanBid,
			cold: []tenSample{{t: from, cum: 5_000, oracle: 200_000}, {t: to, cum: 5_000 + tc.spent, oracle: 200_000 + tc.oracle}}}
		if got := c.coldStartRatio(); math.Abs(got-tc.want) > 1e-4 { // the curve's plan is rounded to parts per billion
			t.Errorf("%s: ratio %v, want %v", tc.name, got, tc.want)
		}
		v := violations(c, 3)
		switch broken := tc.want > 0 && tc.want < ColdStartShare; {
		case broken && (len(v) != 1 || v[0].Invariant != "cold start" || v[0].Campaign != "c" || v[0].At != "00:00:02"):
			t.Errorf("%s: violations %v; want one cold start of c at 00:00:02", tc.name, v)
		case !broken && len(v) > 0:
			t.Errorf("%s: violations %v; want none", tc.name, v)
		}
	}
	if got := (&campaignRT{curve: bucket.Flat(24), budget: budget, meanBid: 1}).coldStartRatio(); got != 0 {
		t.Errorf("a fleet that was not fresh (no cold samples): ratio %v, want 0", got)
	}
}

// A campaign's declared bounds (expect) judge its day: each spell its
// tracking error spent above tracking_max is named at the minute it began,
// and a day below the less of utilisation and the curve oracle's less
// below_ideal at its end.
func TestExpectedBounds(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	const budget = 8_640_000 // 100 micros a second on a flat curve
	c := &campaignRT{spec: Spec{ID: "c"}, loc: time.UTC, day: day, curve: bucket.Flat(24), budget: budget}
	for at := day.Start; !at.After(day.End); at = at.Add(time.Minute) {
		cum := int64(at.Sub(day.Start).Seconds() * 100)
		switch {
		case at.Hour() == 2 && at.Minute() >= 10 && at.Minute() < 20: // 1.5% behind, then 1.2%
			cum -= int64(budget * 0.015)
			if at.Minute() >= 15 {
				cum += int64(budget * 0.003)
			}
		case at.Hour() == 7: // 1% ahead: within
			cum += budget / 100
		case at.Hour() == 20 && at.Minute() == 31: // one minute 1.1% ahead
			cum += budget * 11 / 1000
		}
		var s sample
		s.t, s.cum[sPacer] = at, cum
		c.samples = append(c.samples, s)
	}
	if v := expectViolations(c, budget); v != nil {
		t.Fatalf("no bounds declared: %v", v)
	}
	c.spec.Expect = &Expect{TrackingMax: 0.01}
	v := expectViolations(c, budget)
	if len(v) != 2 {
		t.Fatalf("%d violations, want 2: %v", len(v), v)
	}
	if v[0].Invariant != "tracking" || v[0].Campaign != "c" || v[0].At != "02:10:00" || !strings.Contains(v[0].Detail, "1.50% of its budget behind") {
		t.Errorf("first: %v; want tracking at 02:10:00, 1.50%% behind", v[0])
	}
	if v[1].At != "20:31:00" || !strings.Contains(v[1].Detail, "1.10% of its budget ahead of") {
		t.Errorf("second: %v; want tracking at 20:31:00, 1.10%% ahead", v[1])
	}

	c.spec.Expect = &Expect{Utilisation: 0.995, BelowIdeal: 0.002}
	for _, tc := range []struct {
		oracle, spent int64
		broken        bool
	}{
		{budget, budget * 995 / 1000, false},            // at 99.5%
		{budget, budget*995/1000 - 1, true},             // a micro under it
		{budget * 99 / 100, budget * 988 / 1000, false}, // the oracle's 99% less 0.2 pt
		{budget * 99 / 100, budget*988/1000 - 1, true},
	} {
		c.oracleSpent = tc.oracle
		v := expectViolations(c, tc.spent)
		if got := len(v) == 1 && v[0].Invariant == "utilisation" && v[0].At == "24:00:00"; got != tc.broken || len(v) > 1 {
			t.Errorf("oracle %d, spent %d of %d: %v; want broken %v", tc.oracle, tc.spent, budget, v, tc.broken)
		}
	}
}

// The hour invariants add the bid the ledger's hour bound adds (pace's
// condition 7: the campaign's recorded bid, which its hosts keep at their
// largest recent SPEND): the 95th-percentile bid, or the largest SPEND
// asked by the hour's end if more, and not one asked after the hour.
func TestHourBoundAddsTheLargestBidAsked(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	const budget, share, p95 = 24_000, 1_000, 500 // a flat curve: 1,000 micros an hour
	// On the curve until noon, then 3,500 in hour 12 (2x the share and
	// 1,500), then on the curve again: only hour 12 is over 2x and a bid.
	run := func(largest func(at time.Time) int64) []Violation {
		c := &campaignRT{spec: Spec{ID: "c"}, loc: time.UTC, day: day, curve: bucket.Flat(24), budget: budget, maxBid: p95}
		cum := int64(0)
		for at := day.Start; !at.After(day.End); at = at.Add(30 * time.Minute) {
			c.samples = append(c.samples, sample{t: at, cum: [nStrategies]int64{sPacer: cum}, largest: largest(at)})
			switch {
			case at.Hour() == 12:
				cum += 3 * share / 2
				if at.Minute() == 30 {
					cum += share / 2
				}
			default:
				cum += share / 2
			}
		}
		return hourViolations(c)
	}
	for _, tc := range []struct {
		name    string
		largest func(at time.Time) int64
		want    string // the violation's At, "" for none
	}{
		{"no SPEND above the 95th percentile", func(time.Time) int64 { return p95 }, "12:00:00"},
		{"a SPEND of 1,500 asked within the hour", func(at time.Time) int64 {
			if at.Before(day.Start.Add(12*time.Hour + 30*time.Minute)) {
				return p95
			}
			return 1_500
		}, ""},
		{"a SPEND of 1,499 asked within the hour", func(at time.Time) int64 {
			if at.Before(day.Start.Add(12*time.Hour + 30*time.Minute)) {
				return p95
			}
			return 1_499
		}, "12:00:00"},
		{"a SPEND of 1,500 asked after the hour", func(at time.Time) int64 {
			if at.Before(day.Start.Add(13*time.Hour + 30*time.Minute)) {
				return p95
			}
			return 1_500
		}, "12:00:00"},
	} {
		v := run(tc.largest)
		switch {
		case tc.want == "" && len(v) > 0:
			t.Errorf("%s: %v; want no violation", tc.name, v)
		case tc.want != "" && (len(v) != 1 || v[0].Invariant != "hour" || v[0].At != tc.want):
			t.Errorf("%s: %v; want one hour violation at %s", tc.name, v, tc.want)
		}
	}
}
