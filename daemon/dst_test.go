package daemon_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// Campaign-days open at local midnight in the campaign's zone; DST days are
// 23 or 25 hours long and the curve stretches with them; each day allows at
// most its budget and delivers nearly all of it.
func TestCampaignDaysAcrossTimeZonesAndDST(t *testing.T) {
	cases := []struct {
		tz   string
		day  string // the local day to check
		hour int    // its length
	}{
		{"America/New_York", "2026-03-08", 23},
		{"America/New_York", "2026-11-01", 25},
		{"Asia/Kolkata", "2026-11-21", 24},
	}
	for _, tc := range cases {
		t.Run(tc.tz+"/"+tc.day, func(t *testing.T) {
			f := newFixture(t)
			loc, err := time.LoadLocation(tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			d, err := bucket.ParseDayKey(tc.day, loc)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Length(); got != time.Duration(tc.hour)*time.Hour {
				t.Fatalf("%s in %s is %v long, want %dh", tc.day, tc.tz, got, tc.hour)
			}
			const budget = 86_400_000
			if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: tc.tz, Curve: "flat", Shards: 4, State: lease.StateActive}); err != nil {
				t.Fatal(err)
			}
			// The test's bidder spends in bursts every 5 s; a bucket that holds
			// 10 s of drip keeps those bursts from clipping the drip.
			dm, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, LeaseTiming: daemon.LeaseTiming{BurstWindow: 10 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			defer dm.Close(ctx)
			// From the evening before to the morning after, unbounded demand.
			perDay := map[string]int64{}
			var atNoon int64 = -1
			noon := time.Date(d.Start.Year(), d.Start.Month(), d.Start.Day(), 12, 0, 0, 0, loc)
			for now := d.Start.Add(-2 * time.Hour); now.Before(d.End.Add(2 * time.Hour)); now = now.Add(5 * time.Second) {
				f.Clock.Set(now)
				dm.Step(ctx)
				// Demand at 3x the pace: 30 bids of 500 per 5 s.
				n := spendAttempts(t, dm, "c", 500, 30)
				perDay[bucket.DayOf(now, loc).Key] += n
				if atNoon < 0 && !now.Before(noon) {
					atNoon = perDay[tc.day]
				}
			}
			got := perDay[tc.day]
			if got > budget {
				t.Fatalf("%s allowed %d > budget %d", tc.day, got, budget)
			}
			if got < budget*98/100 {
				t.Fatalf("%s allowed only %d of %d", tc.day, got, budget)
			}
			// The day really started at local midnight: the ledger has it.
			if n, err := f.Ledger.DayShards(ctx, "c", tc.day); err != nil || n != 4 {
				t.Fatalf("day %s not opened in the ledger: %d, %v", tc.day, n, err)
			}
			// The flat curve stretches over the local day: at local noon,
			// elapsed/length of it is due (11/23, 12/24 or 13/25), not 1/2.
			want := float64(noon.Sub(d.Start)) / float64(d.Length())
			share := float64(atNoon) / budget
			if share < want-0.01 || share > want+0.01 {
				t.Fatalf("at local noon %.4f of the budget was spent; the local curve says %.4f", share, want)
			}
			f.CheckDay(t, "c", tc.day)
		})
	}
}

// spendAttempts makes n SPEND calls and returns the micros allowed.
func spendAttempts(t *testing.T, d *daemon.Daemon, id string, amount int64, n int) int64 {
	t.Helper()
	var allowed int64
	for range n {
		dec, err := d.Spend(pacer.CampaignID(id), pacer.Micros(amount), "")
		if err != nil {
			t.Fatal(err)
		}
		if dec == pacer.Allowed {
			allowed += amount
		}
	}
	return allowed
}
