package main

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
)

// Real pacerd processes spend while pacer-export's exporter copies the
// ledger into a real PostgreSQL; a copy of Redis's AOF is taken; they spend
// on (the lost window); then they stop, Redis is restored from the copy and
// new pacerds that saw nothing (fresh state_dirs, new holders) take over.
// What the clients were allowed and the ledger no longer counts is what the
// fleet can grant twice: without recovery, about the lost window's spend;
// after pacerctl recover's steps (export.CompareCopy, export.Recover), at
// most what the clients netted after the exporter's last pass before the
// restore (the exporter stops a second before the fleet). The CI run's
// window is 6 s; PACER_SOAK_RESTORE=1 (make soak) restores a 60-s-old copy.
func TestAOFRestoreUnderFreshPacerdsRecoveredFromSQL(t *testing.T) {
	window := 6 * time.Second
	if os.Getenv("PACER_SOAK_RESTORE") != "" {
		window = 60 * time.Second
	}
	for _, recover := range []bool{false, true} {
		name := map[bool]string{false: "without recover", true: "recovered from SQL"}[recover]
		t.Run(name, func(t *testing.T) {
			r := runRealRestore(t, window, recover)
			t.Logf("%s: clients allowed %d, the ledger counts %d spent: %d allowed and not counted (what can be granted twice); %d allowed in the %v window, %d after the export's last pass; recover %+v",
				name, r.allowed, r.spent, r.allowed-r.spent, r.window, window, r.unexported, r.recovered)
			if r.window < 1_000_000 {
				t.Fatalf("only %d allowed in the lost window: too little to test", r.window)
			}
			if !recover {
				if r.allowed-r.spent < r.window/2 {
					t.Fatalf("without recover the ledger counts all but %d of %d allowed: the restore lost nothing? (window %d)", r.allowed-r.spent, r.allowed, r.window)
				}
				return
			}
			if r.allowed-r.spent > r.unexported {
				t.Fatalf("after recover %d allowed are not counted spent: more than the %d allowed after the export's last pass", r.allowed-r.spent, r.unexported)
			}
		})
	}
}

type realRestore struct {
	allowed, spent     int64
	window, unexported int64
	recovered          export.Recovered
}

func runRealRestore(t *testing.T, window time.Duration, recover bool) realRestore {
	s := newStack(t)
	s.campaign("c", 333_000*86_400/3)
	_, db := pgtest.Pool(t, pgtest.Own(t))
	if _, err := export.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	exp := export.New(s.redis.Client(), s.ledger, db, export.Config{}, nil, nil)
	var allowed, atPass atomic.Int64
	// The exporter passes every 100 ms; atPass is what the clients had been
	// allowed when the last pass began.
	exporting := func() (stop func()) {
		done, quit := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				a := allowed.Load()
				if _, err := exp.Pass(ctx); err == nil {
					atPass.Store(a)
				}
				select {
				case <-quit:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		return func() { close(quit); <-done }
	}
	fleet := func(hosts ...string) (stop func()) {
		procs := make([]*proc, len(hosts))
		quit := make(chan struct{})
		var wg sync.WaitGroup
		for i, h := range hosts {
			procs[i] = s.start(h)
			wg.Go(func() { spendOn(t, func() string { return procs[i].socket }, &allowed, quit) })
		}
		return func() {
			close(quit)
			wg.Wait()
			for _, p := range procs {
				terminate(t, p)
			}
		}
	}
	stopExport := exporting()
	stopFleet := fleet("h0", "h1")
	time.Sleep(window)
	aof := filepath.Join(filepath.Dir(s.redis.Socket), "appendonlydir")
	backup := filepath.Join(t.TempDir(), "appendonlydir")
	if err := os.CopyFS(backup, os.DirFS(aof)); err != nil {
		t.Fatal(err)
	}
	atCopy := allowed.Load()
	time.Sleep(window) // spent, then forgotten
	// The exporter stops a second before the fleet: what the clients are
	// allowed meanwhile never reaches PostgreSQL (an export lag of 1 s).
	stopExport()
	time.Sleep(time.Second)
	stopFleet()
	r := realRestore{window: allowed.Load() - atCopy, unexported: allowed.Load() - atPass.Load()}

	s.redis.Kill()
	if err := os.RemoveAll(aof); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(aof, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	s.redis.Restart()
	if recover {
		day := time.Now().UTC().Format(time.DateOnly)
		plan, err := export.CompareCopy(ctx, db, s.ledger, export.CompareOptions{Day: day, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if r.recovered, err = export.Recover(ctx, s.ledger, plan, time.Now(), nil); err != nil {
			t.Fatal(err)
		}
	}
	stopFleet = fleet("h2", "h3") // fresh: nothing of h0's and h1's runs
	time.Sleep(window)
	stopFleet()
	r.allowed = allowed.Load()
	r.spent = settleAll(t, s, "c")
	return r
}

// settleAll settles every lease still open on campaign id's day as spent
// and returns what the ledger counts spent.
func settleAll(t *testing.T, s *stack, id string) int64 {
	t.Helper()
	day := time.Now().UTC().Format(time.DateOnly)
	n, err := s.ledger.DayShards(ctx, id, day)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.ledger.Settle(ctx, lease.ShardKey{Campaign: id, Day: day, Shard: i}, time.Now().Add(time.Hour), 300*time.Millisecond, 0); err != nil {
			t.Fatal(err)
		}
	}
	return s.check(id).Spent
}
