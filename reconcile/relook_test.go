package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// A day's report is saved after its shards are closed and a cut's debt is
// paid from a sibling; then Redis comes back with the day's shards as they
// were before that pass, and the report still there (on a Cluster the
// report is in another slot than the shards, so a restored master can lose
// the one and keep the other; model seed 2319). The pass that finds the
// loss marks the day for a relook: once its freeze has ended, the reconciler
// closes its shards again and pays the debt again, although the day is
// reported. Without the relook the restored shards keep the debt, and the
// day's budget stays above what the operator's cut and the spend allow.
func TestRestoreOfAReportedDayPaysItsCutsDebtAgain(t *testing.T) {
	f := newFixture(t)
	const cut = 200_000
	f.campaign(t, "c", 400_000, 2)
	f.clock.Set(midnight.Add(lateInDay))
	pub := &events{}
	rc := reconcile.New(f.ledger, reconcile.Config{Holder: "r1", Clock: f.clock, Publisher: pub,
		Watermarks: &memWatermarks{}, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
	pass := func() {
		t.Helper()
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	pass() // opens the day: 200,000 a shard
	shard := func(i int) lease.ShardKey { return lease.ShardKey{Campaign: "c", Day: day, Shard: i} }
	now := f.clock.Now()
	for i, id := range []string{"A", "B"} {
		want := []int64{150_000, 100_000}[i]
		g, err := f.ledger.Grant(ctx, lease.GrantRequest{Shard: shard(i), LeaseID: id, Holder: "h", Want: want,
			Expiry: now.Add(30 * time.Second), Now: now, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
			Grace: 5 * time.Second, DayStart: midnight})
		if err != nil || g.Granted != want {
			t.Fatalf("grant %s: %+v, %v", id, g, err)
		}
	}
	// A cut below what is leased (250,000): both shards owe part of it. A's lease is
	// spent whole, so shard 0 cannot pay; B's comes back unused, and shard 1
	// keeps more than its part.
	if _, err := f.ledger.AdjustDay(ctx, "c", day, cut, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.Release(ctx, shard(0), "A", 0, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.Release(ctx, shard(1), "B", 100_000, now); err != nil {
		t.Fatal(err)
	}
	unpaid := f.checkDay(t, "c", day)
	if unpaid.Owed == 0 {
		t.Fatalf("the cut left no debt: %+v", unpaid)
	}

	// Past midnight: the copy is taken, then the pass closes the day, pays
	// the debt and saves the report.
	f.clock.Set(midnight.Add(24*time.Hour + time.Minute))
	keys, err := f.redis.Client().Keys(ctx, "pacer:{c/"+day+"/*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = append(keys, "pacer:days:{c}", "pacer:dayops:{c}", "pacer:watermark")
	backup := f.redis.Snapshot(keys...)
	pass()
	paid := f.checkDay(t, "c", day)
	if saved, err := f.ledger.HasReport(ctx, "c", day); err != nil || !saved {
		t.Fatalf("report saved: %v, %v", saved, err)
	}
	if paid.Owed != 0 || paid.Budget != cut || unpaid.Budget <= cut {
		t.Fatalf("after the close: %+v (before it %+v); want the debt paid: budget %d, nothing owed", paid, unpaid, cut)
	}

	// The day's shards, its days record and the watermark go back to the
	// copy; the report stays.
	f.redis.Restore(backup, keys...)
	for range 3 { // finds the loss and freezes; then the freeze runs out
		f.clock.Add(20 * time.Second)
		pass()
	}
	if got := pub.lostWrites(); len(got) != 1 || got[0] != "c/"+day {
		t.Fatalf("lost-writes broadcasts %v; want one for c/%s", got, day)
	}
	total, problems, err := f.ledger.CheckDay(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if !strings.Contains(p.What, "lost acknowledged writes") {
			t.Errorf("conservation: %s", p)
		}
	}
	t.Logf("the day's budget: %d before the close, %d after it, %d after the restore and the passes (owed %d)",
		unpaid.Budget, paid.Budget, total.Budget, total.Owed)
	if total.Budget != paid.Budget || total.Owed != 0 {
		t.Fatalf("after the restore and the passes: budget %d, owed %d; want %d, 0: the debt paid again", total.Budget, total.Owed, paid.Budget)
	}
	if until, err := f.ledger.Relook(ctx, "c", day); err != nil || !until.IsZero() {
		t.Errorf("the day's relook mark after the relook: %v, %v; want none", until, err)
	}
	for i := range 2 {
		sh, err := f.ledger.ReadShard(ctx, shard(i))
		if err != nil {
			t.Fatal(err)
		}
		if !sh.Closed {
			t.Errorf("shard %d open again after the restore: %+v", i, sh)
		}
	}
}
