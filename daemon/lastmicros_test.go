package daemon_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// morningCampaign puts a campaign whose pacing curve ends at noon, so that
// from 13:00 all of its budget can be leased at once.
func morningCampaign(t *testing.T, f *fixture, id string, daily int64, shards int) daemon.Config {
	t.Helper()
	w := make([]float64, 24)
	for i := range 12 {
		w[i] = 1
	}
	curve, err := bucket.NewCurve("morning", w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: id, DailyMicros: daily, TZ: "UTC", Curve: "morning", Shards: shards, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	return daemon.Config{Curves: map[string]*bucket.Curve{"morning": curve}}
}

// Issue 9, item 9: a campaign-day's last micros are spendable, even when its
// last lease is no larger than one SPEND.
func TestLastMicrosAreSpendable(t *testing.T) {
	for _, tc := range []struct {
		name          string
		budget, spend int64
	}{
		{"last lease is one SPEND", 1_000, 1_000},
		{"last lease is three SPENDs", 3_000, 1_000},
		{"last lease is smaller than a SPEND of another size", 2_500, 2_500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			cfg := morningCampaign(t, f, "c", tc.budget, 1)
			f.Clock.Set(midnight.Add(13 * time.Hour))
			cfg.Holder, cfg.Clock = "h", f.Clock
			d, err := daemon.New(f.Ledger, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close(ctx)
			var allowed int64
			for range 120 {
				n, _ := spendUntilDenied(t, d, "c", tc.spend)
				allowed += n
				f.Clock.Add(time.Second)
				d.Step(ctx)
			}
			if allowed != tc.budget {
				t.Fatalf("allowed %d of a %d budget in two minutes of SPENDs of %d", allowed, tc.budget, tc.spend)
			}
			if dec, _ := d.Spend("c", pacer.Micros(tc.spend), ""); dec != pacer.Exhausted {
				t.Fatalf("SPEND after the whole budget = %v, want exhausted", dec)
			}
			if sh := f.Check(t, "c"); sh.Spent+sh.Leased < allowed {
				t.Fatalf("allowed %d > ledger spent %d + leased %d", allowed, sh.Spent, sh.Leased)
			}
		})
	}
}
