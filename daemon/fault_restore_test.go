package daemon_test

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// A real redis-server (AOF, appendfsync always) is stopped and started again
// from a copy of its AOF taken 60 simulated seconds earlier, while two daemons
// serve unbounded demand from load generators that count every answer, and a
// reconciler with a watermark kept outside Redis passes every 2 s. With the
// same daemons running through the restore, the clients are never allowed
// more than the budget; with the daemons replaced by new ones that saw
// nothing, the overspend is at most what the clients were allowed in the lost
// window (docs/GUARANTEES.md, "Bounded"). Either way the ledger names
// the loss (lease.CheckDay: "lost acknowledged writes", so `pacerctl check`
// exits 1) and otherwise balances.
func TestFaultRedisRestoredFromAnOlderAOF(t *testing.T) {
	t.Run("running daemons", func(t *testing.T) {
		r := runAOFRestore(t, false, false)
		t.Logf("running daemons: clients netted %d of %d (allowed %d, refunded %d): overspend %d, utilisation %.2f%%; %d netted in the lost window; %d lost-writes broadcasts",
			r.net(), r.budget, r.allowed, r.refunded, max(0, r.net()-r.budget), 100*float64(r.net())/float64(r.budget), r.window, r.lostWrites)
		if r.net() > r.budget {
			t.Fatalf("clients netted %d on a budget of %d: %d granted twice after the restore", r.net(), r.budget, r.net()-r.budget)
		}
		if r.net() < r.budget*9/10 {
			t.Fatalf("clients netted only %d of %d: the fleet did not recover from the restore", r.net(), r.budget)
		}
	})
	t.Run("fresh daemons", func(t *testing.T) {
		r := runAOFRestore(t, true, false)
		over := r.net() - r.budget
		t.Logf("fresh daemons: clients netted %d of %d (allowed %d, refunded %d): overspend %d (%+.2f%% of the budget), %d netted in the lost window (%.2f%%); %d lost-writes broadcasts",
			r.net(), r.budget, r.allowed, r.refunded, over, 100*float64(over)/float64(r.budget), r.window, 100*float64(r.window)/float64(r.budget), r.lostWrites)
		if over > r.window {
			t.Fatalf("clients netted %d on a budget of %d: %d over, more than the %d allowed in the lost window", r.net(), r.budget, over, r.window)
		}
	})
}

// aofRestoreResult is what the clients counted in one run of the scenario.
type aofRestoreResult struct {
	budget, allowed, refunded int64
	window                    int64 // netted by the clients between the copy and the restore
	lostWrites                int   // lost-writes broadcasts by the reconciler
	// With PostgreSQL's copy: netted after the exporter's last pass before
	// the restore, and what pacerctl recover's steps did.
	unexported int64
	recovered  export.Recovered
}

func (r aofRestoreResult) net() int64 { return r.allowed - r.refunded }

// restoreFleet delivers the reconciler's broadcasts to the daemons running
// now, and counts the lost-writes ones.
type restoreFleet struct {
	mu         sync.Mutex
	nodes      []*daemon.Daemon
	lostWrites atomic.Int64
}

func (f *restoreFleet) Publish(e pacer.Event) error {
	if e.Kind == pacer.EventLostWrites {
		f.lostWrites.Add(1)
	}
	f.mu.Lock()
	nodes := slices.Clone(f.nodes)
	f.mu.Unlock()
	for _, d := range nodes {
		d.HandleEvent(e)
	}
	return nil
}

func (f *restoreFleet) set(nodes []*daemon.Daemon) {
	f.mu.Lock()
	f.nodes = slices.Clone(nodes)
	f.mu.Unlock()
}

// runAOFRestore runs the scenario; fresh replaces the daemons with new ones
// (no state, no journal) at the restore. fromSQL runs pacer-export's
// exporter after every round, and after the restore, once the reconciler
// has frozen the days, pacerctl recover's steps (sqlCopy.recover).
func runAOFRestore(t *testing.T, fresh, fromSQL bool) aofRestoreResult {
	f := newFixture(t)
	const budget = 10_000_000
	// The whole day released in its first hour, so that demand can spend
	// the day out in minutes.
	w := make([]float64, 24)
	w[0] = 1
	early, err := bucket.NewCurve("early", w)
	if err != nil {
		t.Fatal(err)
	}
	curves := map[string]*bucket.Curve{"early": early}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: "UTC", Curve: "early", Shards: 4, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(40 * time.Minute))

	// The daemons' ledger client is the production one; the reconciler has
	// its own ledger.
	rdb, err := lease.NewClient([]string{f.Redis.Socket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	dl := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	rl := lease.New(f.Redis.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	fleet := &restoreFleet{}
	rc := reconcile.New(rl, reconcile.Config{Holder: "r1", Clock: f.Clock, Publisher: fleet,
		Watermarks: &reconcile.MemWatermarks{}, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
	if err := rc.Pass(ctx, 1); err != nil { // opens the day; records the watermark
		t.Fatal(err)
	}
	var sqlc *sqlCopy
	if fromSQL {
		sqlc = newSQLCopy(t, f.Redis.Client(), rl)
	}

	start := func() []*daemon.Daemon {
		var nodes []*daemon.Daemon
		for i := range 2 {
			d, err := daemon.New(dl, daemon.Config{Holder: "h" + strconv.Itoa(i), Clock: f.Clock, Curves: curves,
				LedgerTimeout: 2 * time.Second, Logger: dbgLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close(ctx) })
			nodes = append(nodes, d)
		}
		fleet.set(nodes)
		return nodes
	}
	nodes := start()

	var allowed, refunded, errs atomic.Int64
	var nextID atomic.Int64
	// generate is one client's round: SPENDs until the daemon says no
	// (unbounded demand), half with auction ids, every tenth of those
	// allowed refunded.
	generate := func(d *daemon.Daemon) {
		for k := range 400 {
			amount := int64(1000 * (1 + k%5))
			id := ""
			if k%2 == 0 {
				id = "g" + strconv.FormatInt(nextID.Add(1), 10)
			}
			dec, err := d.Spend("c", pacer.Micros(amount), id)
			if err != nil {
				errs.Add(1)
				return
			}
			if dec != pacer.Allowed {
				return
			}
			allowed.Add(amount)
			if id != "" && k%10 == 0 {
				if err := d.Refund("c", pacer.Micros(amount), id); err == nil {
					refunded.Add(amount)
				}
			}
		}
	}
	round := 0
	run := func(until time.Time) {
		for f.Clock.Now().Before(until) {
			f.Clock.Add(time.Second)
			round++
			var wg sync.WaitGroup
			for _, d := range nodes {
				wg.Go(func() { d.Step(ctx) })
				wg.Go(func() { generate(d) })
			}
			if round%2 == 0 {
				wg.Go(func() {
					if err := rc.Pass(ctx, 1); err != nil {
						t.Errorf("reconciler pass: %v", err)
					}
				})
			}
			wg.Wait()
			if sqlc != nil {
				sqlc.pass(t, allowed.Load()-refunded.Load())
			}
		}
	}
	net := func() int64 { return allowed.Load() - refunded.Load() }

	run(f.Clock.Now().Add(30 * time.Second))
	// The backup: a copy of the AOF as it stands (every acknowledged write
	// is in it: appendfsync always).
	aof := filepath.Join(filepath.Dir(f.Redis.Socket), "appendonlydir")
	backup := filepath.Join(t.TempDir(), "appendonlydir")
	copyDir(t, aof, backup)
	atCopy := net()
	run(f.Clock.Now().Add(60 * time.Second)) // leases granted, spent, given back: then forgotten
	window := net() - atCopy
	var unexported int64
	if sqlc != nil {
		unexported = net() - sqlc.netAtPass
	}
	if fresh {
		// The pacerds stop (releasing what they hold) and come back with
		// fresh state after Redis: nobody that saw the lost window is left.
		for _, d := range nodes {
			if err := d.Close(ctx); err != nil {
				t.Logf("close: %v", err)
			}
		}
		fleet.set(nil)
	}
	f.Redis.Kill()
	if err := os.RemoveAll(aof); err != nil {
		t.Fatal(err)
	}
	copyDir(t, backup, aof)
	f.Redis.Restart()
	var recovered export.Recovered
	if sqlc != nil {
		// The reconciler's next pass finds the watermark behind and
		// freezes the day; the operator recovers while it holds.
		if err := rc.Pass(ctx, 1); err != nil {
			t.Fatal(err)
		}
		recovered = sqlc.recover(t, rl, f.Clock.Now())
	}
	if fresh {
		nodes = start()
	}
	t.Logf("restored a %d-s-old AOF copy at %s; %d netted in the lost window, %d in all so far",
		60, f.Clock.Now().Format(time.TimeOnly), window, net())

	// To the curve's end and past it, then the day's last minutes: every
	// micro the ledger releases is asked for.
	run(midnight.Add(70 * time.Minute))
	f.Clock.Set(midnight.Add(24*time.Hour - 2*time.Minute))
	run(midnight.Add(24*time.Hour - 30*time.Second))

	// Quiesce: the daemons release what they hold, the reconciler settles
	// the rest.
	for _, d := range nodes {
		if err := d.Close(ctx); err != nil {
			t.Logf("close: %v", err)
		}
	}
	f.Clock.Add(20 * time.Second)
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := errs.Load(); n > 0 {
		t.Logf("%d SPENDs answered with an error", n)
	}

	totals, problems, err := f.Ledger.CheckDay(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	lost := map[int]bool{}
	for _, p := range problems {
		if strings.Contains(p.What, "lost acknowledged writes") {
			lost[p.Shard.Shard] = true
			continue
		}
		t.Errorf("conservation: %s", p)
	}
	t.Logf("ledger %+v; CheckDay names the loss on shards %v", totals, lost)
	if len(lost) == 0 {
		t.Errorf("CheckDay does not name the restore (problems %v): pacerctl check would say ok", problems)
	}
	r := aofRestoreResult{budget: budget, allowed: allowed.Load(), refunded: refunded.Load(), window: window,
		lostWrites: int(fleet.lostWrites.Load()), recovered: recovered}
	if sqlc != nil {
		r.unexported = unexported
	}
	if r.lostWrites == 0 {
		t.Errorf("the reconciler broadcast no lost-writes: its watermark check did not see the restore")
	}
	// The scenario must have lost something worth testing.
	if window < budget/100 {
		t.Fatalf("only %d netted in the lost window: the restore lost too little to test", window)
	}
	return r
}

// copyDir copies the regular files of directory src into dst (created).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatalf("%s is empty: no AOF to copy", src)
	}
	if err := os.MkdirAll(dst, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			in.Close()
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
