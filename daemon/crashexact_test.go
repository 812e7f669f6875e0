package daemon_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/lease"
)

// A daemon SIGKILLed (abandoned without Close: no release; its state_dir
// kept) while its bucket holds tokens that dripped and were not spent, and
// after its clients had some SPENDs refunded: the restarted daemon gives
// back exactly what the killed run's leases held unspent, granted less
// spent, its tokens as well as its undripped reserve, which is more than
// the undripped rule gave back (by the tokens, less the drip up to the
// journal's fence). The ledger then counts spent exactly what the clients
// were allowed less what was refunded; and once the rest of the day is
// spent by the new run and every lease settled, the clients' own count of
// allowed less refunded is within the budget and the ledger's spent.
func TestReclaimGivesBackWhatWasGrantedLessSpent(t *testing.T) {
	f := newFixture(t)
	const budget = 3_000_000
	cfg := morningCampaign(t, f, "c", budget, 2) // from 13:00 all of it may be leased at once
	f.Clock.Set(midnight.Add(13 * time.Hour))
	path := filepath.Join(t.TempDir(), "leases.journal")
	j, _, err := daemon.OpenJournal(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	killed, err := daemon.New(f.Ledger, withClock(cfg, f.Clock, j))
	if err != nil {
		t.Fatal(err)
	}
	var net int64 // allowed less refunded, as the clients count
	spend := func(d *daemon.Daemon, clock *clocktest.Manual, ticks, spends int) {
		for tick := range ticks {
			clock.Add(100 * time.Millisecond)
			d.Step(ctx)
			for i := range spends {
				dec, err := d.Spend("c", 1_000, "")
				if err != nil {
					t.Fatal(err)
				}
				if dec != pacer.Allowed {
					continue
				}
				net += 1_000
				if i == 0 && tick%3 == 0 { // an auction lost after its SPEND
					if err := d.Refund("c", 400, ""); err == nil {
						net -= 400
					}
				}
			}
		}
	}
	spend(killed, f.Clock, 150, 4)
	spend(killed, f.Clock, 20, 0) // a lull: the drip piles up in the bucket
	held, err := killed.Balance("c")
	if err != nil {
		t.Fatal(err)
	}
	if held.Tokens == 0 || held.Reserve == 0 {
		t.Fatalf("the killed run held %+v: the reclaim below proves nothing", held)
	}
	j.Close() // SIGKILL: no Close, no release

	f.Clock.Add(500 * time.Millisecond) // systemd restarts it
	j2, left, err := daemon.OpenJournal(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	var undripped int64 // what the undripped rule gives back: at the journal's fence
	for _, jl := range left {
		undripped += jl.Unspendable(j2.LastFence())
	}
	next, err := daemon.New(f.Ledger, withClock(cfg, f.Clock, j2))
	if err != nil {
		t.Fatal(err)
	}
	back, err := next.Reclaim(ctx, j2, left)
	if err != nil {
		t.Fatal(err)
	}
	if back != held.Tokens+held.Reserve {
		t.Errorf("the reclaim gave back %d micros; the killed run held %d tokens and %d undripped: want %d",
			back, held.Tokens, held.Reserve, held.Tokens+held.Reserve)
	}
	if back-undripped < held.Tokens {
		t.Errorf("the reclaim gave back %d micros, the undripped rule %d: less than the %d tokens more", back, undripped, held.Tokens)
	}
	if tot := f.Check(t, "c"); tot.Spent != net || tot.Leased != 0 {
		t.Errorf("after the reclaim the ledger counts %d spent and %d leased; the clients were allowed %d net of refunds: want exactly that spent",
			tot.Spent, tot.Leased, net)
	}
	t.Logf("the killed run held %d tokens and %d undripped: the reclaim gave back %d (the undripped rule: %d, %d less)",
		held.Tokens, held.Reserve, back, undripped, back-undripped)

	spend(next, f.Clock, 600, 20) // the rest of the day's budget
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.Clock.Add(time.Minute)
	for s := range 2 {
		if _, err := f.Ledger.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: s}, f.Clock.Now(), 5*time.Second, 0); err != nil {
			t.Fatal(err)
		}
	}
	tot := f.Check(t, "c")
	if tot.Spent < budget*9/10 {
		t.Fatalf("the day was not nearly spent (%+v): the budget check below would prove nothing", tot)
	}
	if net > tot.Spent || net > budget {
		t.Errorf("clients were allowed %d micros net of refunds; the ledger counts %d spent of a budget of %d", net, tot.Spent, budget)
	}
}

// A daemon SIGKILLed, and while it is down its shard restored from a
// snapshot taken before 90 s of its leases were granted, spent and given
// back (a restored backup, writes lost under durability: none): the
// restarted daemon reads the dead run's totals in its journal (granted,
// given back, and what its reclaim gave back) and re-asserts them, so the
// shard counts spent what the dead run's clients spent from leases it
// forgot. The day then allows no more than its budget, counted by the
// clients; without the re-assertion the restored shard granted the lost
// window's budget again.
//
// "restarted again": the killed run's successor re-asserts its totals at
// start (the shard is not behind yet: a no-op) and is killed at once; the
// restore comes after that, and the next run must re-assert them again.
// A run that skipped totals an earlier start had re-asserted (the model
// test's seed 27 at 52e32d7, 3,986 micros answered :1 and never charged)
// let the restored shard grant the lost window again.
func TestRestartReassertsTheDeadRunsTotals(t *testing.T) {
	t.Run("once", func(t *testing.T) { restartReassertsTheDeadRunsTotals(t, 0) })
	t.Run("restarted again", func(t *testing.T) { restartReassertsTheDeadRunsTotals(t, 1) })
}

// restartReassertsTheDeadRunsTotals runs TestRestartReassertsTheDeadRunsTotals
// with restarts runs started and killed between the SIGKILL and the restore.
func restartReassertsTheDeadRunsTotals(t *testing.T, restarts int) {
	f := newFixture(t)
	const budget = 10_000_000
	// A curve releasing the whole day in its first hour, so that the day
	// can be spent out in minutes.
	w := make([]float64, 24)
	w[0] = 1
	early, err := bucket.NewCurve("early", w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: "UTC", Curve: "early", Shards: 1, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(40 * time.Minute))
	path := filepath.Join(t.TempDir(), "leases.journal")
	cfg := daemon.Config{Holder: "a", Clock: f.Clock, Curves: map[string]*bucket.Curve{"early": early}}
	start := func() (*daemon.Daemon, *daemon.Journal) {
		j, left, err := daemon.OpenJournal(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Journal = j
		d, err := daemon.New(f.Ledger, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Reclaim(ctx, j, left); err != nil {
			t.Fatal(err)
		}
		return d, j
	}
	var allowed int64
	run := func(d *daemon.Daemon, seconds int) {
		for range seconds {
			f.Clock.Add(time.Second)
			d.Step(ctx)
			n, _ := spendUntilDenied(t, d, "c", 1_000)
			allowed += n
		}
	}
	killed, j := start()
	run(killed, 30)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	snap := f.Redis.Snapshot(k.RedisKeys()...)
	before := allowed
	run(killed, 90) // leases granted, renewed and given back: then forgotten
	lostWindow := allowed - before
	j.Close() // SIGKILL
	for range restarts {
		f.Clock.Add(500 * time.Millisecond) // restarted, and killed again at once
		_, jr := start()
		jr.Close()
	}
	f.Redis.Restore(snap, k.RedisKeys()...)

	f.Clock.Add(500 * time.Millisecond) // systemd restarts it
	next, j2 := start()
	defer j2.Close()
	run(next, 1500) // past the curve's hour: every micro it releases is asked for
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("allowed %d of %d (%d in the lost window)", allowed, budget, lostWindow)
	if lostWindow < budget/50 {
		t.Fatalf("only %d allowed in the lost window: the scenario lost too little to test", lostWindow)
	}
	if allowed > budget {
		t.Fatalf("clients were allowed %d on a budget of %d: %d granted twice", allowed, budget, allowed-budget)
	}
	if allowed < budget*8/10 {
		t.Fatalf("clients were allowed only %d of %d", allowed, budget)
	}
}
