package export_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

const restoreBudget = 10_000_000

// restoreWorld is a campaign-day of 4 shards and what its clients were
// allowed, net of refunds, counted as the clients count it: a lease's
// amount less what its holder gave back, or what the holder's buckets
// allowed from a lease it still held.
type restoreWorld struct {
	*fixture
	net      int64
	leaseSeq int
}

func newRestoreWorld(t *testing.T) *restoreWorld {
	f := newFixture(t, lease.Config{})
	c := lease.Campaign{ID: "r", DailyMicros: restoreBudget, TZ: "UTC", Curve: "flat", Shards: 4, State: lease.StateActive}
	if _, err := f.ledger.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.OpenDay(ctx, c, day, t0, t0); err != nil {
		t.Fatal(err)
	}
	return &restoreWorld{fixture: f}
}

func rshard(i int) lease.ShardKey { return lease.ShardKey{Campaign: "r", Day: day, Shard: i} }

var restoreAt = t0.Add(10 * time.Hour)

// grant leases up to want on shard i to run (holder-boot), as a daemon would.
func (w *restoreWorld) grant(t *testing.T, l *lease.Ledger, i int, run string, want int64) (string, int64) {
	t.Helper()
	w.leaseSeq++
	id := run + "-" + strconv.Itoa(w.leaseSeq)
	holder, _, _ := cutRun(run)
	g, err := l.Grant(ctx, lease.GrantRequest{Shard: rshard(i), LeaseID: id, Holder: holder, Want: want,
		Expiry: restoreAt.Add(30 * time.Second), Now: restoreAt, Pace: lease.Pace{Now: ppb, Cap: ppb},
		Grace: 5 * time.Second, DayStart: t0})
	if err != nil {
		t.Fatalf("grant %s: %v", id, err)
	}
	return id, g.Granted
}

func cutRun(run string) (string, string, bool) {
	for i := range run {
		if run[i] == '-' {
			return run[:i], run[i+1:], true
		}
	}
	return run, "", false
}

// spend leases amount on shard i to run, lets its clients be allowed
// amount - unused and gives unused back.
func (w *restoreWorld) spend(t *testing.T, i int, run string, amount, unused int64) {
	t.Helper()
	id, g := w.grant(t, w.ledger, i, run, amount)
	if g != amount {
		t.Fatalf("lease %s: granted %d of %d", id, g, amount)
	}
	w.net += amount - unused
	if _, err := w.ledger.Release(ctx, rshard(i), id, unused, restoreAt); err != nil {
		t.Fatal(err)
	}
}

// drain is a fresh fleet that saw nothing: run F-new leases everything
// the shards will grant and its clients spend all of it.
func (w *restoreWorld) drain(t *testing.T) {
	t.Helper()
	for range 3 {
		for i := range 4 {
			id, g := w.grant(t, w.ledger, i, "F-new", restoreBudget)
			if g == 0 {
				continue
			}
			w.net += g
			if _, err := w.ledger.Release(ctx, rshard(i), id, 0, restoreAt); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// history is the day up to a restore: spending before the backup is taken,
// then in the lost window, all exported but the last exportLag operations.
// It returns the backup and what the clients netted in the lost window and
// after the last export.
func (w *restoreWorld) history(t *testing.T, e *export.Exporter, exportLag int) (backup map[string]string, window, unexported int64) {
	t.Helper()
	for i := range 4 {
		w.spend(t, i, "A-1", 1_000_000, 400_000)
	}
	passes(t, e)
	backup = redistest.Snapshot(t, w.rdb)
	atCopy := w.net
	// The lost window: A goes on, B leases, gives some back, and holds a
	// lease it spent 150,000 of when its host is lost.
	ops := []func(){
		func() { w.spend(t, 0, "A-1", 500_000, 0) },
		func() { w.spend(t, 1, "A-1", 500_000, 0) },
		func() { w.spend(t, 0, "B-7", 300_000, 100_000) },
		func() { w.spend(t, 1, "B-7", 300_000, 100_000) },
		func() {
			if _, g := w.grant(t, w.ledger, 2, "B-7", 200_000); g != 200_000 {
				t.Fatalf("B's held lease: %d", g)
			}
			w.net += 150_000
		},
		func() { w.spend(t, 2, "A-1", 500_000, 0) },
		func() { w.spend(t, 3, "A-1", 500_000, 0) },
	}
	for n, op := range ops {
		if n == len(ops)-exportLag {
			passes(t, e)
			unexported = w.net
		}
		op()
	}
	if exportLag == 0 {
		passes(t, e)
		unexported = w.net
	}
	return backup, w.net - atCopy, w.net - unexported
}

// recoverAll compares the ledger with PostgreSQL's copy and recovers.
func recoverAll(t *testing.T, db *export.Plan, w *restoreWorld, l *lease.Ledger) (export.Recovered, error) {
	t.Helper()
	plan, err := export.CompareCopy(ctx, w.db, w.ledger, export.CompareOptions{Now: restoreAt, Since: day})
	if err != nil {
		t.Fatal(err)
	}
	if db != nil {
		*db = plan
	}
	return export.Recover(ctx, l, plan, restoreAt, func(s string) { t.Log(s) })
}

// conserved fails unless every shard of the day balances.
func (w *restoreWorld) conserved(t *testing.T) {
	t.Helper()
	_, problems, err := w.ledger.CheckDay(ctx, "r", day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("conservation: %s", p)
	}
}

// Redis restored from a copy taken before a window in which two daemon
// runs leased, spent and gave back 2,550,000 micros; then a fleet that
// saw nothing leases all it can. Without recovery the clients net
// 12,550,000 on a budget of 10,000,000; after pacerctl recover's steps
// (CompareCopy, Recover) with PostgreSQL's copy current, at most the
// budget, and with the last operation not yet exported, at most what that
// operation netted. The ledger balances either way.
func TestRecoverFromSQLBoundsARestoreByTheExportLag(t *testing.T) {
	cases := []struct {
		name      string
		recover   bool
		exportLag int
	}{
		{"without recover", false, 0},
		{"export current", true, 0},
		{"export one operation behind", true, 1},
		{"export two operations behind", true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newRestoreWorld(t)
			backup, window, unexported := w.history(t, w.exporter("x1", export.Config{}), tc.exportLag)
			redistest.RestoreSnapshot(t, w.rdb, backup)
			var plan export.Plan
			if tc.recover {
				got, err := recoverAll(t, &plan, w, w.ledger)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("recovered %+v; PostgreSQL saw %d micros consumed that the restored ledger did not count", got, plan.Unseen())
			}
			w.drain(t)
			over := w.net - restoreBudget
			t.Logf("%s: clients netted %d of %d: overspend %d; %d netted in the lost window, %d of it not exported",
				tc.name, w.net, int64(restoreBudget), max(over, 0), window, unexported)
			w.conserved(t)
			if window != 2_550_000 {
				t.Fatalf("netted %d in the lost window; the scenario wants 2,550,000", window)
			}
			if !tc.recover {
				if over != window {
					t.Fatalf("without recover: overspend %d; want the lost window's %d granted again", over, window)
				}
				return
			}
			if over > unexported {
				t.Fatalf("overspend %d after recover; want at most the %d netted after the last export", over, unexported)
			}
			if tc.exportLag == 0 && (plan.Unseen() == 0 || len(plan.Leases) != 1) {
				t.Fatalf("plan %+v: want the runs behind and B's held lease", plan)
			}
		})
	}
}

// Recovery is idempotent and resumable: a recover that dies after its
// first ledger step, run again, then run a third time, and a daemon
// re-asserting the same run's totals concurrently, end with the ledger
// exactly where one recover leaves it, and CompareCopy finds nothing.
func TestRecoverResumesAfterACrashAndRunsTwice(t *testing.T) {
	want := func() lease.Shard {
		w := newRestoreWorld(t)
		backup, _, _ := w.history(t, w.exporter("x1", export.Config{}), 0)
		redistest.RestoreSnapshot(t, w.rdb, backup)
		if _, err := recoverAll(t, nil, w, w.ledger); err != nil {
			t.Fatal(err)
		}
		tot, err := w.ledger.DayTotals(ctx, "r", day)
		if err != nil {
			t.Fatal(err)
		}
		return tot
	}()

	w := newRestoreWorld(t)
	backup, _, _ := w.history(t, w.exporter("x1", export.Config{}), 0)
	redistest.RestoreSnapshot(t, w.rdb, backup)
	// The crash: the process's connection dies after its first script.
	dying := w.srv.Client()
	cctx, cancel := context.WithCancel(ctx)
	var scripts atomic.Int64
	dying.AddHook(crashAfter{n: 1, seen: &scripts, cancel: cancel})
	crashed := lease.New(dying, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	plan, err := export.CompareCopy(ctx, w.db, w.ledger, export.CompareOptions{Now: restoreAt, Since: day})
	if err != nil {
		t.Fatal(err)
	}
	got, err := export.Recover(cctx, crashed, plan, restoreAt, nil)
	if err == nil || got.Leases+got.Runs != 1 {
		t.Fatalf("recover with a dying connection: %+v, %v; want one step done, then an error", got, err)
	}
	t.Logf("first recover died after %d step(s): %v", got.Leases+got.Runs, err)

	// Again, with a daemon of run A re-asserting its totals at the same time.
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := recoverAll(t, nil, w, w.ledger); err != nil {
			t.Error(err)
		}
	})
	wg.Go(func() {
		if _, _, err := w.ledger.ReassertRun(ctx, rshard(0), "A-1", lease.History{Granted: 1_500_000, Returned: 400_000}, restoreAt); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	again, err := recoverAll(t, nil, w, w.ledger)
	if err != nil || again != (export.Recovered{}) {
		t.Fatalf("a third recover: %+v, %v; want nothing to do", again, err)
	}
	if plan, err := export.CompareCopy(ctx, w.db, w.ledger, export.CompareOptions{Now: restoreAt, Since: day}); err != nil || plan.Behind() {
		t.Fatalf("after recover, the ledger is still behind: %+v, %v", plan, err)
	}
	tot, err := w.ledger.DayTotals(ctx, "r", day)
	if err != nil {
		t.Fatal(err)
	}
	if tot != want {
		t.Fatalf("after a crash, a resume and a concurrent re-assertion: %+v; one recover leaves %+v", tot, want)
	}
	w.conserved(t)
}

// crashAfter lets n scripts succeed, then cancels the context the
// recovery runs under and fails every later script: the process died.
type crashAfter struct {
	n      int64
	seen   *atomic.Int64
	cancel context.CancelFunc
}

func (crashAfter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (crashAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h crashAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if name != "evalsha" && name != "eval" && name != "fcall" {
			return next(ctx, cmd)
		}
		if h.seen.Load() >= h.n {
			return errors.Join(context.Canceled, errors.New("connection lost"))
		}
		err := next(ctx, cmd)
		if err == nil && h.seen.Add(1) >= h.n {
			h.cancel()
		}
		return err
	}
}

// A closed day is left alone: recover names it and changes nothing.
func TestRecoverLeavesAClosedDayAlone(t *testing.T) {
	w := newRestoreWorld(t)
	backup, _, _ := w.history(t, w.exporter("x1", export.Config{}), 0)
	redistest.RestoreSnapshot(t, w.rdb, backup)
	if err := w.ledger.CloseDay(ctx, "r", day, restoreAt); err != nil {
		t.Fatal(err)
	}
	before, err := w.ledger.DayTotals(ctx, "r", day)
	if err != nil {
		t.Fatal(err)
	}
	var plan export.Plan
	got, err := recoverAll(t, &plan, w, w.ledger)
	if err != nil {
		t.Fatal(err)
	}
	after, err := w.ledger.DayTotals(ctx, "r", day)
	if err != nil {
		t.Fatal(err)
	}
	if got.Closed != 4 || got.Spent != 0 || after != before || len(plan.Findings) != 4 {
		t.Fatalf("recover on a closed day: %+v, findings %v, totals %+v -> %+v; want 4 closed shards named and nothing changed", got, plan.Findings, before, after)
	}
}
