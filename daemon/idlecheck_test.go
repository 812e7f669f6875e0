package daemon_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/reconcile"
)

// A restore the watermark cannot see: the copy is taken after the
// reconciler's last pass and put back before its next, so the restored
// watermark reads as current. The writes since the copy are those of a
// daemon whose campaign then goes idle on the shard: no next call of its
// own finds the loss. The idle check does (idlecheck.go): once the shard
// has had no write of the daemon's for a lease window and the watermark has
// moved since, the daemon re-asserts its run's totals there, and the
// ledger counts what its clients spent from the leases it forgot. Each
// case must end with the ledger counting exactly what the clients were
// allowed: no less (a :1 without a charge), no more (a false alarm's
// re-assertion would under-deliver).
//
// Without the idle check, the living daemon's case leaves 130,000 micros
// answered :1 without a charge (all it was allowed), and the restarted
// one's 130,000 too (its predecessor's, which its start had re-asserted
// before the restore took that away: model seed 2227).
func TestIdleCheckFindsARestoreTheWatermarkCannotSee(t *testing.T) {
	t.Run("living daemon", func(t *testing.T) { idleCheckFindsARestore(t, false, true) })
	t.Run("restarted before the restore", func(t *testing.T) { idleCheckFindsARestore(t, true, true) })
	t.Run("no restore", func(t *testing.T) { idleCheckFindsARestore(t, false, false) })
}

func idleCheckFindsARestore(t *testing.T, restart, restore bool) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 1) // 100,000 micros/s flat
	f.Clock.Set(midnight.Add(10 * time.Minute))
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock,
		Watermarks: &reconcile.MemWatermarks{}})
	pass := func() {
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	pass() // opens the day; the watermark is 1, recorded
	path := filepath.Join(t.TempDir(), "leases.journal")
	start := journaledStarter(t, f, path)
	d, j := start()
	copyTaken := f.Redis.SnapshotAll()

	// The lost window: the daemon leases and its clients spend, then the
	// campaign goes quiet here and its leases are given back. No pass.
	var allowed int64
	for range 3 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 10_000)
		allowed += n
	}
	if allowed == 0 {
		t.Fatal("nothing allowed in the lost window: the scenario tests nothing")
	}
	for range 40 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	if restart {
		j.Close() // SIGKILL; the next run reclaims, and re-asserts the dead run's totals
		d, j = start()
	}
	defer func() { d.Close(ctx); j.Close() }()
	if restore {
		f.Redis.RestoreAll(copyTaken)
		if lost := charged(t, f); lost != 0 {
			t.Fatalf("the restored copy counts %d spent or leased: want 0 (the copy was taken before any lease)", lost)
		}
	}

	// Idle: the reconciler passes every second and finds nothing (the
	// watermark is the one it recorded); the daemon steps and never
	// spends on c again.
	found := -1 // seconds after the restore until the ledger counts what was allowed
	idle := func(seconds int) map[string]float64 {
		before := ledgerCalls(t, d)
		for i := range seconds {
			f.Clock.Add(time.Second)
			pass()
			d.Step(ctx)
			if found < 0 && restore && charged(t, f) >= allowed {
				found = i + 1
			}
		}
		after := ledgerCalls(t, d)
		for op := range after {
			after[op] -= before[op]
		}
		return after
	}
	calls := idle(90)
	got := charged(t, f)
	t.Logf("allowed %d after the copy; the ledger counts %d spent or leased after the idle check (all of it %d s after the restore); its calls %v", allowed, got, found, calls)
	switch {
	case got < allowed:
		t.Fatalf("%d micros answered :1 without a charge (allowed %d, the ledger counts %d)", allowed-got, allowed, got)
	case got > allowed:
		t.Fatalf("the ledger counts %d spent or leased, %d more than the clients were allowed", got, got-allowed)
	}
	// When: a lease window after the daemon's last write there (at the
	// latest the restarted run's start, just before the restore), at the
	// second watermark read after it, reads LeaseWindow/8 apart.
	if restore && found > 30+2*4 {
		t.Fatalf("found %d s after the restore: want within a lease window and two watermark reads (38 s)", found)
	}
	// What it cost: one check (a read of the shard's record of the run) of
	// the one run on the one shard, and where it found the loss a
	// re-assertion and a second check, of that re-assertion (a write the
	// same kind of restore could take away); then an idle campaign costs
	// the ledger nothing.
	checks, reasserts := 1.0, 0.0
	if restore {
		checks, reasserts = 2, 1
	}
	if calls["read"] != checks || calls["reassert"] != reasserts {
		t.Fatalf("the idle check made %v reads and %v reassert calls: want %v and %v", calls["read"], calls["reassert"], checks, reasserts)
	}
	if calls = idle(600); calls["watermark"]+calls["read"]+calls["reassert"] != 0 {
		t.Fatalf("ten idle minutes after the check cost %v ledger calls: want no watermark read, check or reassert", calls)
	}
}

// charged is what the ledger counts spent or leased on c's day.
func charged(t *testing.T, f *fixture) int64 {
	t.Helper()
	tot, err := f.Ledger.DayTotals(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	return tot.Spent + tot.Leased
}

// A re-assertion taken away: the reconciler finds a first restore (a pass
// came between its copy and it) and the daemon re-asserts what its clients
// spent; a second copy, taken after that pass and before the
// re-assertion, is put back before the next pass. The re-assertion is a
// write of the daemon's like a grant: its idle check must wait for the
// watermark to move after it, and then find the shard behind again.
// Without that, the second restore leaves the 130,000 micros the clients
// were allowed uncounted (model seed 5200, found with backups and
// restores drawn four times as often).
func TestIdleCheckFindsARestoreThatTookAReassertionAway(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 1) // 100,000 micros/s flat
	f.Clock.Set(midnight.Add(10 * time.Minute))
	var d *daemon.Daemon
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock,
		Watermarks: &reconcile.MemWatermarks{}, Publisher: toDaemon{&d}})
	pass := func() {
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	pass() // opens the day; the watermark is 1, recorded
	d = f.daemon(t, "a")
	snapshot, restore := f.Redis.SnapshotAll, f.Redis.RestoreAll
	first := snapshot()
	var allowed int64
	for range 3 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 10_000)
		allowed += n
	}
	step := func(seconds int) {
		for range seconds {
			f.Clock.Add(time.Second)
			d.Step(ctx)
		}
	}
	step(80) // the campaign goes quiet; its leases are given back
	pass()   // the watermark is 2, recorded: the first restore is visible
	step(5)  // the idle check sees it move and finds the shard current
	restore(first)
	f.Clock.Add(time.Second)
	pass() // finds the watermark behind: freezes, tells the daemon
	second := snapshot()
	d.Step(ctx) // re-asserts what its clients spent: after the second copy
	if got := charged(t, f); got != allowed {
		t.Fatalf("after the first restore's re-assertion the ledger counts %d, want the %d allowed", got, allowed)
	}
	step(1)
	restore(second) // no pass since the copy: the watermark reads as current
	for range 90 {
		f.Clock.Add(time.Second)
		pass()
		d.Step(ctx)
	}
	if got := charged(t, f); got != allowed {
		t.Fatalf("after the second restore the ledger counts %d spent or leased of the %d allowed: %d answered :1 without a charge",
			got, allowed, allowed-got)
	}
}

// toDaemon delivers the reconciler's broadcasts to one daemon.
type toDaemon struct{ d **daemon.Daemon }

func (p toDaemon) Publish(e pacer.Event) error {
	(*p.d).HandleEvent(e)
	return nil
}

// journaledStarter returns a function that starts daemon "a" on f's ledger
// and clock with the journal at path, reclaiming what a previous run left
// there, as pacerd does at start.
func journaledStarter(t *testing.T, f *fixture, path string) func() (*daemon.Daemon, *daemon.Journal) {
	return func() (*daemon.Daemon, *daemon.Journal) {
		j, left, err := daemon.OpenJournal(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := daemon.New(f.Ledger, daemon.Config{Holder: "a", Clock: f.Clock, Journal: j, Logger: dbgLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Reclaim(ctx, j, left); err != nil {
			t.Fatal(err)
		}
		return d, j
	}
}
