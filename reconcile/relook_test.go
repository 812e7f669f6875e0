package reconcile_test

import (
	"strconv"
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
	f.Campaign(t, "c", 400_000, 2)
	f.Clock.Set(midnight.Add(lateInDay))
	pub := &events{}
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, Publisher: pub,
		Watermarks: &memWatermarks{}, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
	pass := func() {
		t.Helper()
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	pass() // opens the day: 200,000 a shard
	shard := func(i int) lease.ShardKey { return lease.ShardKey{Campaign: "c", Day: day, Shard: i} }
	now := f.Clock.Now()
	for i, id := range []string{"A", "B"} {
		want := []int64{150_000, 100_000}[i]
		g, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: shard(i), LeaseID: id, Holder: "h", Want: want,
			Expiry: now.Add(30 * time.Second), Now: now, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
			Grace: 5 * time.Second, DayStart: midnight})
		if err != nil || g.Granted != want {
			t.Fatalf("grant %s: %+v, %v", id, g, err)
		}
	}
	// A cut below what is leased (250,000): both shards owe part of it. A's lease is
	// spent whole, so shard 0 cannot pay; B's comes back unused, and shard 1
	// keeps more than its part.
	if _, err := f.Ledger.AdjustDay(ctx, "c", day, cut, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.Release(ctx, shard(0), "A", 0, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.Release(ctx, shard(1), "B", 100_000, now); err != nil {
		t.Fatal(err)
	}
	unpaid := f.CheckDay(t, "c", day)
	if unpaid.Owed == 0 {
		t.Fatalf("the cut left no debt: %+v", unpaid)
	}

	// Past midnight: the copy is taken, then the pass closes the day, pays
	// the debt and saves the report.
	f.Clock.Set(midnight.Add(24*time.Hour + time.Minute))
	keys, err := f.Redis.Client().Keys(ctx, "pacer:{c/"+day+"/*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = append(keys, "pacer:days:{c}", "pacer:dayops:{c}", "pacer:watermark")
	backup := f.Redis.Snapshot(keys...)
	pass()
	paid := f.CheckDay(t, "c", day)
	if saved, err := f.Ledger.HasReport(ctx, "c", day); err != nil || !saved {
		t.Fatalf("report saved: %v, %v", saved, err)
	}
	if paid.Owed != 0 || paid.Budget != cut || unpaid.Budget <= cut {
		t.Fatalf("after the close: %+v (before it %+v); want the debt paid: budget %d, nothing owed", paid, unpaid, cut)
	}

	// The day's shards, its days record and the watermark go back to the
	// copy; the report stays.
	f.Redis.Restore(backup, keys...)
	for range 3 { // finds the loss and freezes; then the freeze runs out
		f.Clock.Add(20 * time.Second)
		pass()
	}
	if got := pub.lostWrites(); len(got) != 1 || got[0] != "c/"+day {
		t.Fatalf("lost-writes broadcasts %v; want one for c/%s", got, day)
	}
	total := checkDayAfterLoss(t, f, day)
	t.Logf("the day's budget: %d before the close, %d after it, %d after the restore and the passes (owed %d)",
		unpaid.Budget, paid.Budget, total.Budget, total.Owed)
	if total.Budget != paid.Budget || total.Owed != 0 {
		t.Fatalf("after the restore and the passes: budget %d, owed %d; want %d, 0: the debt paid again", total.Budget, total.Owed, paid.Budget)
	}
	if until, err := f.Ledger.Relook(ctx, "c", day); err != nil || !until.IsZero() {
		t.Errorf("the day's relook mark after the relook: %v, %v; want none", until, err)
	}
	for i := range 2 {
		sh, err := f.Ledger.ReadShard(ctx, shard(i))
		if err != nil {
			t.Fatal(err)
		}
		if !sh.Closed {
			t.Errorf("shard %d open again after the restore: %+v", i, sh)
		}
	}
}

// A move between two shards of a day, then Redis comes back with one of the
// two as it was before the move and the other as it is (on a Cluster each
// master is restored from its own backup). The pass that finds the loss
// makes the move whole on both shards: taken from the source again if the
// source forgot it while the target kept the credit (else the micros are on
// both shards, and the day can grant them twice), credited again if the
// target forgot it. A source that has leased out what it held since the
// restore owes what it can no longer give.
func TestRestoreOfOneShardOfAMoveMakesTheMoveWhole(t *testing.T) {
	for _, tc := range []struct {
		name     string
		restored int   // the shard that lost the move's half
		leased   int64 // leased from it after the restore, before the pass
		owed     int64 // what it then owes (the pass's rebalance may pay it)
	}{{"source", 1, 0, 0}, {"source leased since", 1, 190_000, 40_000}, {"target", 0, 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.Campaign(t, "c", 400_000, 2)
			f.Clock.Set(midnight.Add(time.Hour))
			pub := &events{}
			rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, Publisher: pub,
				Watermarks: &memWatermarks{}, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
			if err := rc.Pass(ctx, 1); err != nil {
				t.Fatal(err)
			}
			// The restored shard's keys, those made since the copy included
			// (its moves record): a restore deletes them.
			keys := append(lease.ShardKey{Campaign: "c", Day: day, Shard: tc.restored}.RedisKeys(), "pacer:watermark")
			backup := f.Redis.Snapshot(keys...)
			if moved, err := f.Ledger.Move(ctx, "c", day, 1, 0, 50_000, "m1", 1, f.Clock.Now()); err != nil || moved != 50_000 {
				t.Fatalf("move: %d, %v", moved, err)
			}
			f.Clock.Add(time.Second)
			if err := rc.Pass(ctx, 1); err != nil { // the watermark recorded after the move
				t.Fatal(err)
			}
			f.Redis.Restore(backup, keys...)
			if tc.leased > 0 {
				now := f.Clock.Now()
				g, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: lease.ShardKey{Campaign: "c", Day: day, Shard: tc.restored},
					LeaseID: "L", Holder: "h", Want: tc.leased, Expiry: now.Add(30 * time.Second), Now: now,
					Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000}, Grace: 5 * time.Second, DayStart: midnight})
				if err != nil || g.Granted != tc.leased {
					t.Fatalf("grant: %+v, %v", g, err)
				}
			}
			lost, err := f.Ledger.DayTotals(ctx, "c", day)
			if err != nil {
				t.Fatal(err)
			}
			f.Clock.Add(time.Second)
			if err := rc.Pass(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if got := pub.lostWrites(); len(got) != 1 {
				t.Fatalf("lost-writes broadcasts %v; want one", got)
			}
			total := checkDayAfterLoss(t, f, day)
			t.Logf("the day's budget less owed: %d after the restore, %d after the pass that found it",
				lost.Budget-lost.Owed, total.Budget-total.Owed)
			if total.Budget-total.Owed != 400_000 {
				t.Fatalf("the day's budget less owed after the pass: %d; want 400,000", total.Budget-total.Owed)
			}
			if tc.owed > 0 {
				audit := lease.ShardKey{Campaign: "c", Day: day, Shard: tc.restored}.RedisKeys()[4]
				xs, err := f.Redis.Client().XRange(ctx, audit, "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				owed := ""
				for _, x := range xs {
					if x.Values["ev"] == "move_out" && x.Values["move"] == "m1" {
						owed, _ = x.Values["owed"].(string)
					}
				}
				if owed != strconv.FormatInt(tc.owed, 10) {
					t.Fatalf("the move taken again owed %q; want %d", owed, tc.owed)
				}
			}
		})
	}
}

// The same split move, of a copy taken after the watermark's last advance:
// the watermark cannot see it, a daemon finds the loss on the source and
// freezes it (as daemon.lostWrites does). The reconciler's next step makes
// the move whole, before the freeze ends and grants resume there.
func TestSplitMoveFoundByADaemonIsMadeWhole(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 400_000, 2)
	f.Clock.Set(midnight.Add(time.Hour))
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
	step := func() {
		t.Helper()
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	step() // the term's full pass: opens the day
	src := lease.ShardKey{Campaign: "c", Day: day, Shard: 1}
	keys := src.RedisKeys()
	backup := f.Redis.Snapshot(keys...)
	if moved, err := f.Ledger.Move(ctx, "c", day, 1, 0, 50_000, "m1", 1, f.Clock.Now()); err != nil || moved != 50_000 {
		t.Fatalf("move: %d, %v", moved, err)
	}
	f.Redis.Restore(backup, keys...)
	now := f.Clock.Now()
	until := now.Add(34 * time.Second)
	if _, err := f.Ledger.Freeze(ctx, src, until, now, "a daemon's history diverged"); err != nil {
		t.Fatal(err)
	}
	lost, err := f.Ledger.DayTotals(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	f.Clock.Add(time.Second)
	step()
	total, err := f.Ledger.DayTotals(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the day's budget less owed: %d after the restore, %d after the next step", lost.Budget-lost.Owed, total.Budget-total.Owed)
	if total.Budget-total.Owed != 400_000 {
		t.Fatalf("the day's budget less owed after the step: %d; want 400,000", total.Budget-total.Owed)
	}
	// Once the freeze has ended, the next look clears today's mark.
	f.Clock.Set(until.Add(time.Second))
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if mark, err := f.Ledger.Relook(ctx, "c", day); err != nil || !mark.IsZero() {
		t.Fatalf("today's relook mark after the freeze: %v, %v; want none", mark, err)
	}
}

// An operator's budget change applied to both shards of a day, then one
// shard comes back as it was before it (its own master's backup) while the
// day's record keeps the change. The pass that finds the loss gives that
// shard its part again: a cut's part lost would leave the day above the
// operator's cut, grantable; a raise's, below the raise.
func TestRestoreOfOneShardOfABudgetChangeAppliesItsPartAgain(t *testing.T) {
	for _, newBudget := range []int64{200_000, 600_000} {
		t.Run(strconv.FormatInt(newBudget, 10), func(t *testing.T) {
			f := newFixture(t)
			f.Campaign(t, "c", 400_000, 2)
			f.Clock.Set(midnight.Add(time.Hour))
			rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, Publisher: &events{},
				Watermarks: &memWatermarks{}, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
			if err := rc.Pass(ctx, 1); err != nil {
				t.Fatal(err)
			}
			keys := append(lease.ShardKey{Campaign: "c", Day: day, Shard: 1}.RedisKeys(), "pacer:watermark")
			backup := f.Redis.Snapshot(keys...)
			if _, err := f.Ledger.AdjustDay(ctx, "c", day, newBudget, f.Clock.Now()); err != nil {
				t.Fatal(err)
			}
			f.Clock.Add(time.Second)
			if err := rc.Pass(ctx, 1); err != nil {
				t.Fatal(err)
			}
			f.Redis.Restore(backup, keys...)
			lost, err := f.Ledger.DayTotals(ctx, "c", day)
			if err != nil {
				t.Fatal(err)
			}
			f.Clock.Add(time.Second)
			if err := rc.Pass(ctx, 1); err != nil {
				t.Fatal(err)
			}
			total := checkDayAfterLoss(t, f, day)
			t.Logf("the day's budget less owed: %d after the restore, %d after the pass that found it",
				lost.Budget-lost.Owed, total.Budget-total.Owed)
			if total.Budget-total.Owed != newBudget {
				t.Fatalf("the day's budget less owed after the pass: %d; want %d", total.Budget-total.Owed, newBudget)
			}
		})
	}
}

// A carry-over spans the campaign's days record ({c}), every shard of the
// closed day and every shard of the next (each its own slot). Redis Cluster
// restores each master from its own copy, so a restore can take back some of
// the carry's steps and keep others (model seeds 1082 and 1264): here the
// days record and one shard come back from a copy taken before the carry:
// shard 0 of the closed day (it forgets its take while shard 1 keeps its
// and the next day's shards keep the credit: without a repair, its 200,000
// are on both days), or shard 0 of the next day (it forgets its credit).
// Either way each day's budget in the days record disagrees with its
// shards' without the repair. The relook after the freeze finishes the
// carry from what the shards show: the closed day's shards give what they
// hold, once, the next day's are credited exactly that, and the days record
// carries it.
func TestRestoreOfOneMastersSlotsMakesASplitCarryWhole(t *testing.T) {
	next := midnight.Add(24 * time.Hour).Format(time.DateOnly)
	for _, restored := range []lease.ShardKey{{Campaign: "c", Day: day, Shard: 0}, {Campaign: "c", Day: next, Shard: 0}} {
		t.Run(restored.String(), func(t *testing.T) { testSplitCarry(t, restored) })
	}
}

// testSplitCarry restores the days record and one shard (of the closed day:
// it forgets its take; of the next: its credit) to a copy taken before the
// carry.
func testSplitCarry(t *testing.T, restored lease.ShardKey) {
	f := newFixture(t)
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: 400_000, TZ: "UTC", Curve: "flat",
		Shards: 2, State: lease.StateActive, CarryOver: true}); err != nil {
		t.Fatal(err)
	}
	next := midnight.Add(24 * time.Hour).Format(time.DateOnly)
	f.Clock.Set(midnight.Add(24*time.Hour - 20*time.Second))
	pub := &events{}
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, Publisher: pub,
		Watermarks: &memWatermarks{}, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
	pass := func() {
		t.Helper()
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	pass() // opens the day: 200,000 a shard
	now := f.Clock.Now()
	s1 := lease.ShardKey{Campaign: "c", Day: day, Shard: 1}
	g, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: s1, LeaseID: "L", Holder: "h", Want: 150_000,
		Expiry: now.Add(30 * time.Second), Now: now, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
		Grace: 5 * time.Second, DayStart: midnight})
	if err != nil || g.Granted != 150_000 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	// Past midnight, the lease still out: the pass opens the next day and
	// cannot close this one yet. The copy of one master's slots is taken.
	f.Clock.Add(25 * time.Second)
	pass()
	keys := append(restored.RedisKeys(),
		"pacer:days:{c}", "pacer:dayops:{c}", "pacer:campaign:{c}", "pacer:watermark")
	backup := f.Redis.Snapshot(keys...)
	if _, err := f.Ledger.Release(ctx, s1, "L", 100_000, f.Clock.Now()); err != nil { // 50,000 spent
		t.Fatal(err)
	}
	f.Clock.Add(time.Second)
	pass() // closes the day and carries 350,000 over
	if carried, err := f.Ledger.CarriedOver(ctx, "c", day); err != nil || carried != 350_000 {
		t.Fatalf("carried over before the restore: %d, %v; want 350,000", carried, err)
	}
	f.Redis.Restore(backup, keys...)
	for range 3 { // finds the loss and freezes; then the freeze runs out
		f.Clock.Add(20 * time.Second)
		pass()
	}
	if got := pub.lostWrites(); len(got) == 0 {
		t.Fatalf("no lost-writes broadcast")
	}
	budgets := map[string]int64{}
	for _, d := range []string{day, next} {
		total := checkDayAfterLoss(t, f, d)
		budgets[d] = total.Budget - total.Owed
	}
	carried, err := f.Ledger.CarriedOver(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the restore and the relook: %s budget %d, %s budget %d, carried %d", day, budgets[day], next, budgets[next], carried)
	if budgets[day] != 50_000 || budgets[next] != 750_000 || carried != 350_000 {
		t.Fatalf("want %s's budget 50,000 (what it spent), %s's 750,000, 350,000 carried", day, next)
	}
}

// A carry-over into a day, undone on the closed day's shard by a restore
// the watermark sees only two days later (model seed 1159): by then the
// closed day is no pass's yesterday any more, and the freeze marks the day
// the carry went into. That day's relook finishes the carry into it too:
// the closed day's shard, back open with what it had given, is closed and
// gives it again, so the micros are not on both days.
func TestRestoreSeenTwoDaysLaterMakesTheCarryIntoYesterdayWhole(t *testing.T) {
	f := newFixture(t)
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: 400_000, TZ: "UTC", Curve: "flat",
		Shards: 1, State: lease.StateActive, CarryOver: true}); err != nil {
		t.Fatal(err)
	}
	days := []string{day, midnight.Add(24 * time.Hour).Format(time.DateOnly), midnight.Add(48 * time.Hour).Format(time.DateOnly)}
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, Publisher: &events{},
		Watermarks: &memWatermarks{}, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
	pass := func() {
		t.Helper()
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	f.Clock.Set(midnight.Add(24*time.Hour - 20*time.Second))
	pass() // opens the day
	f.Clock.Add(30 * time.Second)
	keys := append(lease.ShardKey{Campaign: "c", Day: day, Shard: 0}.RedisKeys(), "pacer:watermark")
	backup := f.Redis.Snapshot(keys...)
	for range 2 { // closes the day, carries its 400,000 over; the watermark moves
		pass()
		f.Clock.Add(time.Second)
	}
	if carried, err := f.Ledger.CarriedOver(ctx, "c", day); err != nil || carried != 400_000 {
		t.Fatalf("carried over: %d, %v; want 400,000", carried, err)
	}
	f.Clock.Set(midnight.Add(48*time.Hour + 5*time.Second))
	f.Redis.Restore(backup, keys...)
	for range 4 { // finds the loss, freezes; the freeze runs out; the relook
		pass()
		f.Clock.Add(20 * time.Second)
	}
	for _, d := range days {
		total := checkDayAfterLoss(t, f, d)
		t.Logf("%s: budget %d, owed %d", d, total.Budget, total.Owed)
	}
	sh, err := f.Ledger.ReadShard(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: 0})
	if err != nil {
		t.Fatal(err)
	}
	if !sh.Closed || sh.Budget != 0 {
		t.Fatalf("the closed day's shard after the relook: %+v; want closed, its 400,000 carried again", sh)
	}
}

// checkDayAfterLoss returns campaign c's day d as CheckDay totals it, and
// fails the test on any problem but the loss itself (a shard that lost
// acknowledged writes is named until the day is settled).
func checkDayAfterLoss(t *testing.T, f *fixture, d string) lease.Shard {
	t.Helper()
	total, problems, err := f.Ledger.CheckDay(ctx, "c", d)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if !strings.Contains(p.What, "lost acknowledged writes") {
			t.Errorf("%s: conservation: %s", d, p)
		}
	}
	return total
}
