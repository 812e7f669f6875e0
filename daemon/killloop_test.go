package daemon_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// A daemon SIGKILLed 13 times in 5 minutes (each run lives long enough to
// hold full-size leases) while its campaign catches up (half a day behind
// its curve) and demand is several times what the ledger releases: with its
// journal, each restart gives back what the dead run had not dripped by the
// restart, so a kill costs only what dripped during the half second systemd
// took to restart it (the journal cannot know when its writer died, so it
// counts the drip until then as spent: conservative) and the tokens held;
// without it, every lease held at a kill is settled as spent. The loss with
// the journal is at most a tenth of the loss without, and at most 5% of what
// the ledger counts spent. (Until issue 10 the scenario was the day's last
// 16 minutes, when pro-rata release dumped the day's rest: 0.78% vs 9.68% of
// the budget. Catch-up is bounded now, and a day's end releases little.)
// Figures for docs/BENCHMARKS.md come from the t.Logf lines.
func TestSIGKILLLoopLosesLittle(t *testing.T) {
	losses := map[bool]int64{}
	defer func() {
		if !t.Failed() && losses[true]*10 > losses[false] {
			t.Errorf("with the journal the kills lost %d micros, more than a tenth of the %d lost without it", losses[true], losses[false])
		}
	}()
	for _, journal := range []bool{true, false} {
		name := map[bool]string{true: "journal", false: "no-journal"}[journal]
		t.Run(name, func(t *testing.T) {
			// Demand: 20 SPENDs of 5,000 a tick, 1,000,000 a second; 13 kills.
			allowed, tot := killLoop(t, killRun{journal: journal, spendsPerTick: 20, killEvery: 230})
			if allowed > tot.Spent {
				t.Fatalf("overspend: clients were allowed %d, the ledger counts %d spent", allowed, tot.Spent)
			}
			lost := tot.Spent - allowed
			t.Logf("%s: 13 SIGKILLs in 5 min: clients allowed %d, ledger spent %d (settled as lost %d): %d micros lost = %.2f%% of what the ledger counts spent",
				name, allowed, tot.Spent, tot.Lost, lost, 100*float64(lost)/float64(tot.Spent))
			losses[journal] = lost
			if journal && lost > tot.Spent/20 {
				t.Fatalf("lost %d micros, more than 5%% of the %d spent", lost, tot.Spent)
			}
			if !journal && lost <= tot.Spent/10 {
				t.Fatalf("without the journal the kills lost only %d of %d spent: the scenario does not stress reclaim", lost, tot.Spent)
			}
		})
	}
}

// A daemon whose campaign asks for a quarter of what the ledger may release
// ends its leases with tokens in the bucket, which a lease that ends keeps
// for its successor when the successor's drip backs them (the bucket charges
// spends to the leases that end first). Run without kills, what the clients
// were allowed is exactly what the ledger counts spent: no lease gave back a
// token that a later one spent. SIGKILLed every few seconds (81 kills, some
// just after such an end, before the successor closed), each restart
// reclaims by the journal what the dead run had not dripped, and the clients
// were never allowed more than the ledger counts spent. Every shard balances.
func TestSIGKILLWithTokensCarriedAcrossLeaseEnds(t *testing.T) {
	for _, kills := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-kills", true: "kills"}[kills], func(t *testing.T) {
			// 2 SPENDs of 5,000 a tick: 100,000 micros a second, a quarter of
			// the catch-up pace.
			run := killRun{journal: true, spendsPerTick: 2}
			if kills {
				run.killEvery = 37
			}
			allowed, tot := killLoop(t, run)
			switch {
			case !kills && allowed != tot.Spent:
				t.Fatalf("clients were allowed %d, the ledger counts %d spent; want them equal", allowed, tot.Spent)
			case allowed > tot.Spent:
				t.Fatalf("overspend: clients were allowed %d, the ledger counts %d spent", allowed, tot.Spent)
			case allowed < 100_000*300/2:
				t.Fatalf("allowed %d in 5 minutes of 100,000 micros a second: the scenario did not spend", allowed)
			}
			t.Logf("kills %v: clients allowed %d, ledger spent %d", kills, allowed, tot.Spent)
		})
	}
}

// killRun is one of killLoop's five minutes.
type killRun struct {
	journal       bool // the daemon keeps a lease journal and reclaims by it
	spendsPerTick int  // SPENDs of 5,000 micros every 100 ms
	killEvery     int  // ticks between SIGKILLs (no Close, no release); 0: none
}

// killLoop runs one daemon for 5 minutes in steps of 100 ms on a campaign
// half a day behind its curve (133,333 micros a second, caught up at 3x,
// 400,000 a second), killing and restarting it (half a second, as systemd)
// as run says; then closes it, settles every lease, checks that every shard
// balances, and returns what the clients were allowed and the day's totals.
func killLoop(t *testing.T, run killRun) (int64, lease.Shard) {
	t.Helper()
	f := newFixture(t)
	const budget = 11_520_000_000
	f.campaign(t, "c", budget, 4)
	f.clock.Set(midnight.Add(12 * time.Hour))
	path := filepath.Join(t.TempDir(), "leases.journal")
	start := func() (*daemon.Daemon, *daemon.Journal) {
		cfg := daemon.Config{Holder: "h", Clock: f.clock}
		var j *daemon.Journal
		var left []daemon.JournalLease
		if run.journal {
			var err error
			if j, left, err = daemon.OpenJournal(path, nil); err != nil {
				t.Fatal(err)
			}
			cfg.Journal = j
		}
		d, err := daemon.New(f.ledger, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if j != nil {
			if _, err := d.Reclaim(ctx, j, left); err != nil {
				t.Fatal(err)
			}
		}
		return d, j
	}
	var allowed int64
	d, j := start()
	for tick := 1; tick <= 3000; tick++ {
		f.clock.Add(100 * time.Millisecond)
		d.Step(ctx)
		for range run.spendsPerTick {
			if dec, err := d.Spend("c", 5_000, ""); err != nil {
				t.Fatal(err)
			} else if dec == pacer.Allowed {
				allowed += 5_000
			}
		}
		if run.killEvery > 0 && tick%run.killEvery == 0 {
			if j != nil {
				j.Close()
			}
			f.clock.Add(500 * time.Millisecond) // systemd restarts it
			d, j = start()
		}
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if j != nil {
		j.Close()
	}
	// Every lease is closed once expiry plus grace has passed.
	f.clock.Add(time.Minute)
	for i := range 4 {
		if _, err := f.ledger.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: i}, f.clock.Now(), 5*time.Second, 0); err != nil {
			t.Fatal(err)
		}
	}
	tot := f.check(t, "c")
	if tot.Leased != 0 {
		t.Fatalf("leases still outstanding: %+v", tot)
	}
	return allowed, tot
}
