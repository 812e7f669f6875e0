package reconcile_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// One shard drained by a busy daemon must not make the campaign look
// exhausted: the reconciler refills it from the richest, exactly.
func TestReconcilerRebalancesShards(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_000_000, 4)
	f.Clock.Set(midnight.Add(time.Hour))
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock})
	if err := rc.Pass(ctx, 7); err != nil { // opens today
		t.Fatal(err)
	}
	// Drain shard 2 completely (a late lease takes everything left on it).
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 2}
	if g, err := lateLease(f, k, "big", 2_000_000); err != nil || g.Shard.Remaining() != 0 {
		t.Fatalf("drain shard 2: %+v, %v", g, err)
	}
	if err := rc.Pass(ctx, 7); err != nil {
		t.Fatal(err)
	}
	sh, err := f.Ledger.ReadShard(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Remaining() == 0 {
		t.Fatal("the reconciler left shard 2 empty while the others hold budget")
	}
	tot := f.Check(t, "c")
	if tot.Budget != 8_000_000 {
		t.Fatalf("day budget %d after a move, want 8,000,000", tot.Budget)
	}
	// A reconciler with an older fence is refused on the shards it touches.
	if err := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock}).Pass(ctx, 6); err == nil {
		t.Fatal("a pass with a stale fence went through")
	}
}

// A shard left with about half its siblings' remaining budget is refilled
// too, not only a nearly empty one: a campaign behind its curve catches up
// at the catch-up multiple of each shard's plan, so shards left unevenly
// behind (hosts lease from them unevenly) catch up at less than the
// campaign's multiple, and the day ends with budget locked on the laggards
// (the simulator's family 7 f45: 98.8-99.5% spent with the old threshold of a
// quarter of the mean, 99.9-100% with three quarters). PoorShare 0.25 keeps
// the old behaviour.
func TestReconcilerRefillsAShardHalfAsRich(t *testing.T) {
	drainHalf := func(t *testing.T, cfg reconcile.Config) (before, after int64) {
		f := newFixture(t)
		f.Campaign(t, "c", 8_000_000, 4)
		f.Clock.Set(midnight.Add(time.Hour))
		cfg.Clock = f.Clock
		rc := reconcile.New(f.Ledger, cfg)
		if err := rc.Pass(ctx, 7); err != nil { // opens today
			t.Fatal(err)
		}
		// A lease takes half of shard 2 (1,000,000 of its 2,000,000): 1,000,000
		// left against a mean of 1,750,000.
		k := lease.ShardKey{Campaign: "c", Day: day, Shard: 2}
		g, err := lateLease(f, k, "half", 1_000_000)
		if err != nil || g.Granted != 1_000_000 {
			t.Fatalf("lease half of shard 2: %+v, %v", g, err)
		}
		if err := rc.Pass(ctx, 7); err != nil {
			t.Fatal(err)
		}
		sh, err := f.Ledger.ReadShard(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if tot := f.Check(t, "c"); tot.Budget != 8_000_000 {
			t.Fatalf("day budget %d after a move, want 8,000,000", tot.Budget)
		}
		return g.Shard.Remaining(), sh.Remaining()
	}
	if before, after := drainHalf(t, reconcile.Config{}); after <= before {
		t.Errorf("default threshold: shard 2 holds %d after the pass (%d before): not refilled", after, before)
	}
	if before, after := drainHalf(t, reconcile.Config{PoorShare: 0.25}); after != before {
		t.Errorf("PoorShare 0.25: shard 2 holds %d after the pass (%d before): refilled above a quarter of the mean", after, before)
	}
}

// lateLease leases want micros from shard k a minute before the day's end,
// where the curve has released everything.
func lateLease(f *fixture, k lease.ShardKey, id string, want int64) (lease.Grant, error) {
	end := midnight.Add(24*time.Hour - time.Minute)
	return f.Ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h", Want: want,
		Expiry: end.Add(30 * time.Second), Now: end, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
		Grace: 5 * time.Second, DayStart: midnight})
}

// A cut below what is leased is owed by the shards holding the leases; when
// one lease comes back unused and the other was spent, the reconciler's next
// pass pays the spent shard's debt from its sibling, so nothing the cut took
// stays grantable (model seed 848).
func TestReconcilerPaysACutsDebtFromASibling(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 10_000_000, 2)
	end := midnight.Add(24*time.Hour - time.Minute)
	f.Clock.Set(end)
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock})
	if err := rc.Pass(ctx, 7); err != nil { // opens today
		t.Fatal(err)
	}
	var keys [2]lease.ShardKey
	for i := range keys {
		keys[i] = lease.ShardKey{Campaign: "c", Day: day, Shard: i}
		g, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: keys[i], LeaseID: "L", Holder: "h", Want: 3_000_000,
			Expiry: end.Add(30 * time.Second), Now: end, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
			Grace: 5 * time.Second, DayStart: midnight})
		if err != nil || g.Granted != 3_000_000 {
			t.Fatalf("grant on shard %d = %+v, %v", i, g, err)
		}
	}
	if _, err := f.Ledger.AdjustDay(ctx, "c", day, 2_000_000, end); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.Release(ctx, keys[0], "L", 3_000_000, end); err != nil { // unused
		t.Fatal(err)
	}
	if _, err := f.Ledger.Release(ctx, keys[1], "L", 0, end); err != nil { // spent
		t.Fatal(err)
	}
	remaining := func() int64 {
		shards, err := f.Ledger.ReadShards(ctx, "c", day, 2)
		if err != nil {
			t.Fatal(err)
		}
		return shards[0].Remaining() + shards[1].Remaining()
	}
	if r := remaining(); r != 1_000_000 {
		t.Fatalf("before the pass, %d grantable; want shard 0's 1,000,000 above its share", r)
	}
	// A deposed leader (an older fence) moves nothing.
	if err := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock}).Pass(ctx, 6); err == nil {
		t.Fatal("a pass with a stale fence went through")
	}
	if r := remaining(); r != 1_000_000 {
		t.Fatalf("after a stale leader's pass, %d grantable; want the debt left for the leader", r)
	}
	if err := rc.Pass(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if r := remaining(); r != 0 {
		t.Fatalf("after the pass, %d grantable; want 0: the day spent 3,000,000 of a 2,000,000 budget", r)
	}
	if tot := f.Check(t, "c"); tot.Budget != tot.Spent || tot.Target() != 2_000_000 {
		t.Fatalf("after the pass: %+v", tot)
	}
}

// At the campaign's local midnight the reconciler opens the new day and, once
// the old day's leases are settled, writes its report; the old day's leftover
// is under-delivery, not carried over.
func TestReconcilerClosesTheDay(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000, 2)
	f.Clock.Set(midnight.Add(24*time.Hour - 2*time.Minute))
	d := f.daemon(t, "h")
	for range 110 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		spendAttempts(t, d, "c", 1000, 5)
	}
	// The daemon dies just before midnight, holding leases.
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock})
	f.Clock.Set(midnight.Add(24*time.Hour + 2*time.Second)) // leases end by midnight+1s, settle after +grace
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}
	next := "2026-11-22"
	if n, err := f.Ledger.DayShards(ctx, "c", next); err != nil || n != 2 {
		t.Fatalf("next day not opened at midnight: %d, %v", n, err)
	}
	if _, ok, _ := f.Ledger.LoadReport(ctx, "c", day); ok {
		t.Fatal("report written while the day's leases were still outstanding")
	}
	f.Clock.Add(time.Minute) // past every lease's expiry plus grace
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r, ok, err := f.Ledger.LoadReport(ctx, "c", day)
	if err != nil || !ok {
		t.Fatalf("no report for the closed day: %v", err)
	}
	sh := f.Check(t, "c")
	if r.Budget != 86_400_000 || r.Spent != sh.Spent || r.Outstanding != 0 || r.UnderDelivery != r.Budget-r.Spent {
		t.Fatalf("report %+v vs ledger %+v", r, sh)
	}
	if r.Lost == 0 {
		t.Fatal("the dead daemon's leases should show as lost")
	}
	// The new day starts with its own full budget: nothing carried over.
	tot, err := f.Ledger.DayTotals(ctx, "c", next)
	if err != nil || tot.Budget != 86_400_000 {
		t.Fatalf("next day's budget %+v, %v", tot, err)
	}
}

// A campaign that carries over: what the closed day did not hand out moves to
// the next day, exactly once, and both days balance.
func TestReconcilerCarriesOver(t *testing.T) {
	f := newFixture(t)
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: 86_400_000, TZ: "UTC", Curve: "flat",
		Shards: 2, State: lease.StateActive, CarryOver: true}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(24*time.Hour - 2*time.Minute))
	d := f.daemon(t, "h")
	for range 60 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		spendAttempts(t, d, "c", 1000, 5)
	}
	if err := d.Close(ctx); err != nil { // releases its leases
		t.Fatal(err)
	}
	closed := f.CheckDay(t, "c", day)
	left := closed.Remaining()
	if left == 0 || closed.Spent == 0 {
		t.Fatalf("want a day both spent from and with budget left: %+v", closed)
	}
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock})
	f.Clock.Set(midnight.Add(24*time.Hour + time.Minute))
	for range 2 { // a second pass moves nothing more
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	next := "2026-11-22"
	tot, err := f.Ledger.DayTotals(ctx, "c", next)
	if err != nil || tot.Budget != 86_400_000+left {
		t.Fatalf("next day's budget %d, %v; want the daily budget plus the %d carried", tot.Budget, err, left)
	}
	after := f.CheckDay(t, "c", day)
	if after.Budget != closed.Spent || after.Remaining() != 0 {
		t.Fatalf("closed day after the carry: %+v; want budget = spent %d", after, closed.Spent)
	}
	f.CheckDay(t, "c", next)
	r, ok, err := f.Ledger.LoadReport(ctx, "c", day)
	if err != nil || !ok || r.CarriedOver != left || r.UnderDelivery != 0 {
		t.Fatalf("report %+v, %v, %v; want %d carried over and no under-delivery", r, ok, err, left)
	}
}
