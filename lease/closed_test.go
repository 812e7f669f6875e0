package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A lease id is in its shard's leases or in its done records, never both
// (prelude.lua, release_lease), so the release of an open lease looks no
// done record up: one HGET, of its lease record. A retry, of a lease no
// longer open, finds the done record and is answered as the first call was,
// crediting nothing twice; the release of a settled lease is too late; and
// no id of the shard's leases has a done record.
func TestReleasingAnOpenLeaseLooksNoDoneRecordUp(t *testing.T) {
	l, srv := newLedger(t)
	rdb := srv.Client()
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := shardKey("c", day, 0)
	now := t0.Add(12 * time.Hour)
	for _, id := range []string{"L1", "L2", "L3"} {
		if g, err := l.Grant(ctx, grantReq(id, k, 100_000, now, ppb/2)); err != nil || g.Granted != 100_000 {
			t.Fatalf("grant %s: %+v, %v", id, g, err)
		}
	}
	hgets := func() int64 { return commandCalls(rdb.Info(ctx, "commandstats").Val(), "hget") }
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := l.Release(ctx, k, "L1", 40_000, now)
	if err != nil {
		t.Fatal(err)
	}
	if n := hgets(); n != 1 {
		t.Errorf("the release of an open lease ran %d HGETs, want 1 (its lease record)", n)
	}
	retry, err := l.Release(ctx, k, "L1", 40_000, now)
	if err != nil || retry.Available != first.Available || retry.Spent != first.Spent {
		t.Fatalf("the retry: %+v, %v; the first release left %+v", retry, err, first)
	}
	if _, err := l.Settle(ctx, k, now.Add(time.Hour), 5*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(ctx, k, "L2", 0, now.Add(time.Hour)); !errors.Is(err, lease.ErrLeaseSettled) {
		t.Fatalf("the release of a settled lease: %v, want %v", err, lease.ErrLeaseSettled)
	}
	if _, err := l.Grant(ctx, grantReq("L4", k, 100_000, now.Add(time.Hour), ppb/2)); err != nil {
		t.Fatal(err)
	}
	keys := k.RedisKeys()
	open := rdb.HKeys(ctx, keys[1]).Val()
	if len(open) != 1 || open[0] != "L4" {
		t.Fatalf("open leases %v, want [L4]", open)
	}
	for _, id := range append(open, "L1", "L2", "L3") {
		inDone := rdb.HExists(ctx, keys[3], id).Val()
		if inDone == (id == "L4") {
			t.Errorf("lease %s: a done record %v, open %v", id, inDone, id == "L4")
		}
	}
}
