package daemon_test

import (
	"math"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// A campaign whose curve is "auto" is paced each day by a curve fitted to the
// demand its fleet recorded the days before: decided once, by the first
// daemon to open the day, and read by every other. With no demand recorded,
// the day is flat.
func TestAutoCurveIsFittedOnceFromRecordedDemand(t *testing.T) {
	f := newFixture(t)
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "a", DailyMicros: 86_400_000_000, TZ: "UTC", Curve: daemon.AutoCurve, Shards: 2, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	// Two days before: nine in ten SPENDs in the evening (18:00-24:00).
	for back := 1; back <= 2; back++ {
		prev := midnight.Add(-time.Duration(back) * 24 * time.Hour)
		for slot := range lease.DemandSlots {
			n := int64(100)
			if slot >= 72 {
				n = 2700
			}
			if _, err := f.Ledger.AddDemand(ctx, "a", prev.Format("2006-01-02"), prev, lease.Recent{}, lease.Demand{Slot: slot, Requests: n, Allowed: n, MicrosAsked: n * 1000}); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Clock.Set(midnight.Add(time.Hour))
	a, b := f.daemon(t, "a"), f.daemon(t, "b")
	for _, d := range []*daemon.Daemon{a, b} {
		if _, err := d.Spend("a", 1000, ""); err != nil {
			t.Fatal(err)
		}
		d.Step(ctx)
	}
	w, ok, err := f.Ledger.DayCurve(ctx, "a", day)
	if err != nil || !ok {
		t.Fatalf("no curve decided for %s: %v", day, err)
	}
	var evening, total float64
	for i, v := range w {
		total += v
		if i >= len(w)*3/4 {
			evening += v
		}
	}
	// 90% of the recorded demand; the fit's bounds and smoothing shave a
	// little off.
	if share := evening / total; share < 0.8 {
		t.Fatalf("the fitted curve gives the evening %.0f%% of the day; the demand recorded was 90%% there", 100*share)
	}
	// Decided once: a later decision does not replace it.
	again, err := f.Ledger.DecideDayCurve(ctx, "a", day, []float64{1})
	if err != nil || len(again) != len(w) {
		t.Fatalf("second decision: %v, %v; want the first (%d weights) kept", again, err, len(w))
	}
	// Paced by it: by 01:00 a flat curve has released 1/24 of the day
	// (3,600,000,000 micros); the fitted one, about 0.6%.
	tot := f.Check(t, "a")
	if released, flatHour := tot.Budget-tot.Locked, int64(86_400_000_000/24); released > flatHour/2 {
		t.Fatalf("the ledger released %d micros by 01:00: paced flat (%d), not by the fitted curve", released, flatHour)
	}

	// A few hundred SPENDs, nine in ten in the evening: fitted (the bound of
	// 0.2x the mean share keeps 15% for the day's first 18 hours). Fewer than
	// AutoCurveMinRequests: flat.
	for _, tc := range []struct {
		id       string
		requests int64
		fitted   bool
	}{{"few", 300, true}, {"fewer", daemon.AutoCurveMinRequests - 10, false}} {
		if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: tc.id, DailyMicros: 86_400_000, TZ: "UTC", Curve: daemon.AutoCurve, Shards: 1, State: lease.StateActive}); err != nil {
			t.Fatal(err)
		}
		prev := midnight.Add(-24 * time.Hour)
		evening := tc.requests * 9 / 10
		for i := range tc.requests {
			slot := int(i % 72) // the day's first 18 hours, spread
			if i < evening {
				slot = 72 + int(i%24)
			}
			if _, err := f.Ledger.AddDemand(ctx, tc.id, prev.Format("2006-01-02"), prev, lease.Recent{}, lease.Demand{Slot: slot, Requests: 1, Allowed: 1, MicrosAsked: 1000}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Spend(pacer.CampaignID(tc.id), 1000, ""); err != nil {
			t.Fatal(err)
		}
		a.Step(ctx)
		w, ok, err := f.Ledger.DayCurve(ctx, tc.id, day)
		if err != nil || !ok {
			t.Fatalf("%s: no curve decided: %v", tc.id, err)
		}
		var evening6, total float64
		for i, v := range w {
			total += v
			if i >= len(w)*3/4 {
				evening6 += v
			}
		}
		share := evening6 / total
		t.Logf("%s (%d SPENDs): %d weights, %.0f%% of the day after 18:00", tc.id, tc.requests, len(w), 100*share)
		if tc.fitted && share < 0.75 || !tc.fitted && (len(w) != 24 || w[0] != w[23]) {
			t.Errorf("%s (%d SPENDs recorded): %d weights, %.0f%% of the day after 18:00; want fitted: %v", tc.id, tc.requests, len(w), 100*share, tc.fitted)
		}
	}

	// No demand recorded: flat.
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "new", DailyMicros: 86_400_000, TZ: "UTC", Curve: daemon.AutoCurve, Shards: 1, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Spend("new", 1000, ""); err != nil {
		t.Fatal(err)
	}
	a.Step(ctx)
	w, ok, err = f.Ledger.DayCurve(ctx, "new", day)
	if err != nil || !ok || len(w) != 24 || w[0] != w[23] {
		t.Fatalf("curve of a campaign without recorded demand = %v, %v, %v; want flat", w, ok, err)
	}
}

// The fit's moving average narrows as the recorded SPENDs grow: at least
// AutoCurveSlotRequests in a window, never wider than the default. With
// counts that large, a step in the traffic (a first hour at 5.75x the rest,
// midnight-peak.yaml's shape) stays a step: the slot after it gets its own
// demand's share, where the default width gave it 2.6 times that.
func TestAutoCurveSmoothNarrowsWithTheData(t *testing.T) {
	for _, c := range []struct {
		total int64
		want  int
	}{
		{200, 2}, {96 * 42, 2}, {96 * 86, 2}, {96 * 128, 1}, {96 * 238, 1}, {96 * 256, 0}, {96 * 270, 0}, {10_000_000, 0},
	} {
		if got := daemon.AutoCurveSmooth(c.total, 96); got != c.want {
			t.Errorf("AutoCurveSmooth(%d, 96) = %d; want %d", c.total, got, c.want)
		}
	}
	demand := make([]float64, 96)
	for i := range demand {
		demand[i] = 270
		if i < 4 {
			demand[i] *= 5.75
		}
	}
	var total float64
	for _, d := range demand {
		total += d
	}
	share := func(smooth int) float64 {
		_, w, err := bucket.FitCurve("auto", demand, bucket.FitOptions{Slots: 96, Smooth: smooth, Min: daemon.AutoCurveMin, Max: daemon.AutoCurveMax})
		if err != nil {
			t.Fatal(err)
		}
		return w[4]
	}
	want := demand[4] / total
	if got := share(daemon.AutoCurveSmooth(int64(total), 96)); math.Abs(got-want) > 1e-9 {
		t.Errorf("01:00's share %.5f; its demand's %.5f", got, want)
	}
	if got := share(bucket.DefaultSmooth(96)); got < 2*want {
		t.Errorf("at the default width 01:00's share %.5f, its demand's %.5f: the test no longer shows the spread", got, want)
	}
}
