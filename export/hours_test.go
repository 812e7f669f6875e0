package export_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/lease"
)

// spend_hours counts each change in the hour of the campaign's own time
// zone: for Asia/Kolkata (+05:30), hours that start at half past, UTC.
func TestSpendHoursInTheCampaignsTimeZone(t *testing.T) {
	f := newFixture(t, lease.Config{})
	c := lease.Campaign{ID: "in", DailyMicros: 10_000_000, TZ: "Asia/Kolkata", Curve: "flat", Shards: 1, State: lease.StateActive}
	if _, err := f.ledger.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	loc := c.Location()
	start := time.Date(2026, 11, 21, 0, 0, 0, 0, loc)
	if _, err := f.ledger.OpenDay(ctx, c, day, start, start); err != nil {
		t.Fatal(err)
	}
	k := lease.ShardKey{Campaign: "in", Day: day, Shard: 0}
	at := time.Date(2026, 11, 21, 10, 45, 0, 0, time.UTC) // 16:15 in Kolkata
	if _, err := f.ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "h-b-1", Holder: "h", Want: 1_000_000,
		Expiry: at.Add(30 * time.Second), Now: at, Pace: lease.Pace{Now: ppb, Cap: ppb}, Grace: 5 * time.Second, DayStart: start}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.Release(ctx, k, "h-b-1", 0, at); err != nil {
		t.Fatal(err)
	}
	passes(t, f.exporter("x", export.Config{}))
	var hour time.Time
	var spent int64
	if err := f.db.QueryRow(ctx, `SELECT hour, spent FROM spend_hours WHERE campaign = 'in' AND spent > 0`).Scan(&hour, &spent); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC); !hour.Equal(want) || spent != 1_000_000 {
		t.Fatalf("spend_hours: hour %s, spent %d; want %s (16:00 in Kolkata), 1000000", hour.UTC(), spent, want)
	}
}
