package lease_test

import (
	"testing"
	"time"
)

// A move interrupted after its first step is finished by the next
// reconciler, exactly once; conservation holds at every point.
func TestMoveSurvivesCrashBetweenSteps(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 8_000_000, 2), day)
	taken, err := l.MoveOutForTest(ctx, "c", day, 0, 1, 1_000_000, "m1", t0)
	if err != nil || taken != 1_000_000 {
		t.Fatalf("move out = %d, %v", taken, err)
	}
	tot := mustBalance(t, l, "c", day) // in flight: day budget still balances
	if tot.Budget != 7_000_000 {
		t.Fatalf("shard budgets %d, want 7,000,000 with 1,000,000 in flight", tot.Budget)
	}
	for range 2 { // the second pass finds nothing left to do
		if _, err := l.FinishMoves(ctx, "c", day, 2, t0); err != nil {
			t.Fatal(err)
		}
	}
	tot = mustBalance(t, l, "c", day)
	if tot.Budget != 8_000_000 {
		t.Fatalf("after finishing: shard budgets %d, want 8,000,000", tot.Budget)
	}
	a, _ := l.ReadShard(ctx, shardKey("c", day, 0))
	b, _ := l.ReadShard(ctx, shardKey("c", day, 1))
	if a.Budget != 3_000_000 || b.Budget != 5_000_000 {
		t.Fatalf("shards %+v %+v", a, b)
	}
	// A full move, and its retry with the same id, move once.
	for range 2 {
		if _, err := l.Move(ctx, "c", day, 1, 0, 2_000_000, "m2", 0, t0); err != nil {
			t.Fatal(err)
		}
	}
	a, _ = l.ReadShard(ctx, shardKey("c", day, 0))
	if a.Budget != 5_000_000 {
		t.Fatalf("after m2: shard 0 budget %d, want 5,000,000", a.Budget)
	}
	mustBalance(t, l, "c", day)
	r, err := l.BuildReport(ctx, "c", day)
	if err != nil || r.Budget != 8_000_000 {
		t.Fatalf("report %+v, %v", r, err)
	}
}

func TestReportFromAudit(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := shardKey("c", day, 0)
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	if _, err := l.Grant(ctx, grantReq("A", k, 1_000_000, h(3), ppb/8)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grant(ctx, grantReq("B", k, 500_000, h(3), ppb/8)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(ctx, k, "A", 250_000, h(3)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Settle(ctx, k, h(4), 5*time.Second, 0); err != nil { // B expired: settled
		t.Fatal(err)
	}
	if _, err := l.AdjustDay(ctx, "c", day, 20_000_000, h(4)); err != nil {
		t.Fatal(err)
	}
	r, err := l.BuildReport(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	want := struct{ budget, spent, returned, lost, out, leases, settled int64 }{20_000_000, 1_250_000, 250_000, 500_000, 0, 2, 1}
	got := struct{ budget, spent, returned, lost, out, leases, settled int64 }{r.Budget, r.Spent, r.Returned, r.Lost, r.Outstanding, r.Leases, r.Settled}
	if got != want {
		t.Fatalf("report %+v, want %+v", got, want)
	}
	tot := mustBalance(t, l, "c", day)
	if tot.Spent != r.Spent || r.UnderDelivery != 20_000_000-1_250_000 {
		t.Fatalf("ledger spent %d, report %+v", tot.Spent, r)
	}
}
