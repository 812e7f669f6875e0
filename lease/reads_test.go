package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// DayLeases reads every shard's leases of a day in one pipeline; a day not
// opened has none, and a record the scripts would never write is an error,
// not a zero.
func TestDayLeases(t *testing.T) {
	l, srv := newLedger(t)
	const day = "2026-11-21"
	if n, err := l.CountKeys(ctx); err != nil || n != 0 {
		t.Fatalf("CountKeys on an empty Redis = %d, %v", n, err)
	}
	mustOpen(t, l, campaign("c", 24_000_000, 3), day)
	now := t0.Add(3 * time.Hour)
	for i, id := range []string{"L0", "L2"} {
		k := lease.ShardKey{Campaign: "c", Day: day, Shard: 2 * i}
		if g, err := l.Grant(ctx, grantReq(id, k, 100_000*int64(i+1), now, ppb/8)); err != nil || g.Granted == 0 {
			t.Fatalf("grant %s = %+v, %v", id, g, err)
		}
	}
	got, err := l.DayLeases(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	want := []lease.LeaseRecord{
		{ID: "L0", Amount: 100_000, Holder: "h1", Expiry: now.Add(30 * time.Second)},
		{ID: "L2", Amount: 200_000, Holder: "h1", Expiry: now.Add(30 * time.Second)},
	}
	slices.SortFunc(got, cmpID)
	if len(got) != len(want) {
		t.Fatalf("DayLeases = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Amount != want[i].Amount || got[i].Holder != want[i].Holder || !got[i].Expiry.Equal(want[i].Expiry) {
			t.Errorf("lease %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if recs, err := l.DayLeases(ctx, "c", "2026-11-22"); err != nil || len(recs) != 0 {
		t.Fatalf("a day not opened: %+v, %v", recs, err)
	}
	if n, err := l.CountKeys(ctx); err != nil || n == 0 {
		t.Fatalf("CountKeys after a day opened = %d, %v", n, err)
	}
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 1}
	if err := srv.Client().HSet(ctx, k.RedisKeys()[1], "bad", "1|h").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DayLeases(ctx, "c", day); err == nil {
		t.Fatal("a malformed lease record was read without an error")
	}
}

func cmpID(a, b lease.LeaseRecord) int {
	switch {
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

func TestKeyCampaign(t *testing.T) {
	k := lease.ShardKey{Campaign: "c.1", Day: "2026-11-21", Shard: 3}
	for _, key := range append(k.RedisKeys(), lease.ShardKey{Campaign: "c.1"}.AuditKey()) {
		if got := lease.KeyCampaign(key); got != "c.1" {
			t.Errorf("KeyCampaign(%q) = %q, want c.1", key, got)
		}
	}
	for key, want := range map[string]string{
		"pacer:campaign:{c2}": "c2", "pacer:days:{c2}": "c2", "pacer:dayops:{c2}": "c2",
		"pacer:campaigns": "", "pacer:campaigns:changes": "", "pacer:idx:due": "",
		lease.DemandKey("c2", "2026-11-21"): "", "sim:lua:{c2}": "", "": "",
	} {
		if got := lease.KeyCampaign(key); got != want {
			t.Errorf("KeyCampaign(%q) = %q, want %q", key, got, want)
		}
	}
}
