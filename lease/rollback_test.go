package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// A shard rolled back to an older copy while daemons hold leases: every
// daemon that saw the lost writes learns it from its next reply, even after
// other writes took the shard's sequence past what it saw; the shard is
// frozen, the forgotten leases are re-asserted without changing the day's
// target, and the ledger balances throughout.
func TestRollbackIsDetectedAndLeasesReasserted(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	l := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 1_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	at := t0.Add(23 * time.Hour)
	expiry := at.Add(30 * time.Second)
	grant := func(id string, want int64, known lease.History) (lease.Grant, error) {
		r := grantReq(id, k, want, at, ppb)
		r.Known = known
		return l.Grant(ctx, r)
	}

	g1, err := grant("A-1", 300_000, lease.History{})
	if err != nil || g1.Granted != 300_000 {
		t.Fatalf("A-1 = %+v, %v", g1, err)
	}
	snap := srv.Snapshot(k.RedisKeys()...)
	g2, err := grant("A-2", 300_000, g1.Shard.History())
	if err != nil || g2.Granted != 300_000 {
		t.Fatalf("A-2 = %+v, %v", g2, err)
	}
	g3, err := grant("B-1", 200_000, lease.History{})
	if err != nil || g3.Granted != 200_000 {
		t.Fatalf("B-1 = %+v, %v", g3, err)
	}
	srv.Restore(snap, k.RedisKeys()...) // A-2 and B-1 are forgotten

	// A daemon that never saw the lost writes cannot tell: the lost state
	// lets it lease the same budget again. This is the bound of a rollback.
	g4, err := grant("C-1", 500_000, lease.History{})
	if err != nil || g4.Granted != 500_000 {
		t.Fatalf("C-1 = %+v, %v", g4, err)
	}
	if g4.Shard.Seq < g2.Shard.Seq {
		t.Fatalf("want the shard's sequence back at or past A's (%d), got %d", g2.Shard.Seq, g4.Shard.Seq)
	}
	// A, who saw seq g2.Shard.Seq, is told even though the sequence is back
	// there: the history at that seq is another one.
	if _, err := grant("A-3", 100_000, g2.Shard.History()); !errors.Is(err, lease.ErrLedgerDiverged) {
		t.Fatalf("A's next grant: %v; want ErrLedgerDiverged", err)
	}
	sh, err := l.ReleaseKnown(ctx, k, "A-2", 0, at, g2.Shard.History())
	if !errors.Is(err, lease.ErrUnknownLease) || !sh.Diverged {
		t.Fatalf("A's release of a forgotten lease = %+v, %v; want unknown and diverged", sh, err)
	}
	// A freezes the shard and re-asserts what it holds; so does B.
	if _, err := l.Freeze(ctx, k, at.Add(40*time.Second), at, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := grant("D-1", 1, lease.History{}); !errors.Is(err, lease.ErrShardFrozen) {
		t.Fatalf("grant on a frozen shard: %v", err)
	}
	for _, lr := range []lease.LeaseRecord{
		{ID: "A-1", Amount: 300_000, Holder: "A", Expiry: expiry},
		{ID: "A-2", Amount: 300_000, Holder: "A", Expiry: expiry},
		{ID: "B-1", Amount: 200_000, Holder: "B", Expiry: expiry},
	} {
		want := lease.Rerecorded
		if lr.ID == "A-1" {
			want = lease.StillKnown
		}
		for range 2 { // idempotent
			got, _, err := l.Reassert(ctx, k, lr, at)
			if err != nil || got != want {
				t.Fatalf("reassert %s = %v, %v; want %v", lr.ID, got, err, want)
			}
			want = lease.StillKnown
		}
	}
	tot := balanceAfterLoss(t, l, k)
	if tot.Target() != 1_000_000 || tot.Leased != 1_300_000 || tot.Owed != 300_000 {
		t.Fatalf("after re-asserting: %+v; want the target unchanged, 1,300,000 leased and 300,000 owed", tot)
	}
	// Leases come back unused: the debt is paid first, and the day's target
	// is what is left to grant.
	for _, id := range []string{"A-1", "A-2", "B-1", "C-1"} {
		if _, err := l.Release(ctx, k, id, map[string]int64{"A-1": 300_000, "A-2": 300_000, "B-1": 200_000, "C-1": 500_000}[id], at); err != nil {
			t.Fatal(err)
		}
	}
	tot = balanceAfterLoss(t, l, k)
	if tot.Owed != 0 || tot.Budget != 1_000_000 || tot.Remaining() != 1_000_000 {
		t.Fatalf("after every lease came back unused: %+v", tot)
	}
	// After the freeze, grants resume.
	if g, err := l.Grant(ctx, grantReq("D-2", k, 1_000, at.Add(41*time.Second), ppb)); err != nil || g.Granted != 1_000 {
		t.Fatalf("grant after the freeze = %+v, %v", g, err)
	}
}

// balanceAfterLoss checks conservation on a day whose shard k lost writes:
// the only problem reported is that loss, naming the shard.
func balanceAfterLoss(t *testing.T, l *lease.Ledger, k lease.ShardKey) lease.Shard {
	t.Helper()
	total, problems, err := l.CheckDay(ctx, k.Campaign, k.Day)
	if err != nil {
		t.Fatal(err)
	}
	var named bool
	for _, p := range problems {
		if p.Shard == k && strings.Contains(p.What, "lost acknowledged writes") {
			named = true
			continue
		}
		t.Errorf("conservation: %s", p)
	}
	if !named {
		t.Errorf("check does not name shard %s, which lost writes", k)
	}
	return total
}
