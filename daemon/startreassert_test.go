package daemon_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pacer/pacer/reconcile"
)

// A restore that takes away a restarted run's start re-assertion is found
// by the run's first lease call on the shard, before the shard grants it
// anything (reassertPrevious, openDay). A first restore takes away a
// grant whose lease a run holds and its clients spent from; the run dies;
// its successor's start finds the lease unknown and re-asserts what the
// clients spent; a second restore, of a copy taken between the two, takes
// that re-assertion away. No reconciler pass comes between a copy and its
// restore, so the watermark sees neither.
//
// The rule checked: from the successor's first step on (well within the
// lease window the idle check waits for), the ledger counts spent all the
// dead run's clients were allowed, and spent or leased all its
// successor's. Without the fix the
// successor's first grant passed a zero history and only its own totals
// (none), the shard granted the same budget again, and the dead run's
// allowed micros were counted only by the idle check (model seed 13536:
// 60,000 allowed on a 56,051 day).
func TestRestartFindsARestoreThatTookItsStartReassertionAway(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 1) // 100,000 micros/s flat
	f.Clock.Set(midnight.Add(10 * time.Minute))
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock,
		Watermarks: &reconcile.MemWatermarks{}})
	if err := rc.Pass(ctx, 1); err != nil { // opens the day
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "leases.journal")
	start := journaledStarter(t, f, path)
	snapshot, restore := f.Redis.SnapshotAll, f.Redis.RestoreAll

	d, j := start()
	first := snapshot() // before any lease
	var allowed1 int64
	for range 3 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 10_000)
		allowed1 += n
	}
	if allowed1 == 0 {
		t.Fatal("the first run's clients were allowed nothing: the scenario tests nothing")
	}
	restore(first) // takes away the leases the run holds
	second := snapshot()
	j.Close() // SIGKILL, its leases held
	d, j = start()
	defer func() { d.Close(ctx); j.Close() }()
	if got := charged(t, f); got != allowed1 {
		t.Fatalf("after the successor's start the ledger counts %d, want the %d the dead run's clients were allowed", got, allowed1)
	}
	restore(second) // takes the start's re-assertion away
	if got := charged(t, f); got != 0 {
		t.Fatalf("the second copy counts %d spent or leased: want 0", got)
	}

	var allowed2 int64
	for i := range 5 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 10_000)
		allowed2 += n
		tot, err := f.Ledger.DayTotals(ctx, "c", day)
		if err != nil {
			t.Fatal(err)
		}
		if tot.Spent < allowed1 || tot.Spent+tot.Leased < allowed1+allowed2 {
			t.Fatalf("%d s after the second restore the ledger counts %d spent (%d leased) of the %d the dead run's clients were allowed (%d its successor's): the start's re-assertion, taken away, was not found",
				i+1, tot.Spent, tot.Leased, allowed1, allowed2)
		}
	}
	t.Logf("allowed %d by the dead run, %d by its successor; the ledger counts %d spent or leased", allowed1, allowed2, charged(t, f))
}
