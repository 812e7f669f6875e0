package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/lease"
)

// A daemon SIGKILLed while it spends, restarted on the same state_dir with
// a clock 0.9 s behind the killed run's last instant (both within the skew
// bound of 1 s of Redis's): the journal replay never gives back what its
// predecessor's clients spent. With the spent map, its reclaim gives back
// exactly what the killed run's leases held unspent (the ledger then
// counts spent exactly what the clients were allowed), whatever either
// clock says; with the map lost (a machine crash), it gives back at most
// what the killed run had not dripped at its last SPEND. Either way the
// clients, counted by themselves, were never allowed more than the ledger
// counts spent, nor more than the budget, once every lease is settled. So
// too when the killed run's refill loop had stalled (a slow ledger) for its
// last two seconds while its SPENDs went on.
func TestReclaimAfterTheClockSteppedBack(t *testing.T) {
	for _, stall := range []int{0, 20} {
		for _, lostMap := range []bool{false, true} {
			name := map[int]string{0: "loop-running", 20: "loop-stalled"}[stall] + map[bool]string{false: "", true: "/map-lost"}[lostMap]
			t.Run(name, func(t *testing.T) {
				reclaimAfterStepBack(t, stall, lostMap)
			})
		}
	}
}

// reclaimAfterStepBack runs TestReclaimAfterTheClockSteppedBack with the
// killed run's last stall ticks (100 ms) spent without a refill step, and
// its spent map lost if lostMap.
func reclaimAfterStepBack(t *testing.T, stall int, lostMap bool) {
	f := newFixture(t)
	const budget = 300_000
	cfg := morningCampaign(t, f, "c", budget, 1) // from 13:00 all of it may be leased at once
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
	var allowed int64
	var last time.Time // the killed run's last SPEND allowed
	spend := func(d *daemon.Daemon, clock *clocktest.Manual, ticks int, step bool) {
		for range ticks {
			clock.Add(100 * time.Millisecond)
			if step {
				d.Step(ctx)
			}
			if n, _ := spendUntilDenied(t, d, "c", 1_000); n > 0 {
				allowed, last = allowed+n, clock.Now()
			}
		}
	}
	spend(killed, f.Clock, 200-stall, true)
	spend(killed, f.Clock, stall, false)
	if f.Clock.Now().Sub(last) > 100*time.Millisecond {
		t.Fatalf("the killed run's last SPEND was allowed at %v, %v before its end", last, f.Clock.Now().Sub(last))
	}
	j.Close() // SIGKILL: no Close, no release
	if lostMap {
		if err := os.Remove(strings.TrimSuffix(path, ".journal") + ".spent"); err != nil {
			t.Fatal(err)
		}
	}

	j2, left, err := daemon.OpenJournal(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	var undripped int64 // what the killed run had not dripped at its last SPEND
	for _, jl := range left {
		undripped += jl.Unspendable(last)
	}
	if undripped == 0 {
		t.Fatal("the killed run left nothing undripped: the reclaim below proves nothing")
	}
	behind := clocktest.At(f.Clock.Now().Add(-900 * time.Millisecond)) // stepped back, within the skew bound
	next, err := daemon.New(f.Ledger, withClock(cfg, behind, j2))
	if err != nil {
		t.Fatal(err)
	}
	back, err := next.Reclaim(ctx, j2, left)
	if err != nil {
		t.Fatal(err)
	}
	if lostMap && back > undripped {
		t.Errorf("the reclaim gave back %d micros; the killed run had only %d undripped at its last SPEND (%d it had dripped)",
			back, undripped, back-undripped)
	}
	tot := f.Check(t, "c")
	if allowed > tot.Spent {
		t.Errorf("clients were allowed %d micros; after the reclaim the ledger counts %d spent", allowed, tot.Spent)
	}
	if !lostMap && (tot.Spent != allowed || tot.Leased != 0) {
		t.Errorf("after the reclaim the ledger counts %d spent and %d leased; the clients were allowed %d: want it all back but that", tot.Spent, tot.Leased, allowed)
	}
	spend(next, behind, 1200, true)
	if err := next.Close(ctx); err != nil {
		t.Fatal(err)
	}
	behind.Add(time.Minute)
	if _, err := f.Ledger.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: 0}, behind.Now(), 5*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	tot = f.Check(t, "c")
	if tot.Spent < budget*9/10 {
		t.Fatalf("the day was not nearly spent (%+v): the budget check below would prove nothing", tot)
	}
	if allowed > tot.Spent || allowed > budget {
		t.Errorf("clients were allowed %d micros; the ledger counts %d spent of a budget of %d", allowed, tot.Spent, budget)
	}
	t.Logf("killed run: %d undripped at its last SPEND; the reclaim gave back %d; clients allowed %d, ledger spent %d of %d",
		undripped, back, allowed, tot.Spent, budget)
}

func withClock(cfg daemon.Config, clock *clocktest.Manual, j *daemon.Journal) daemon.Config {
	cfg.Holder, cfg.Clock, cfg.Journal = "h", clock, j
	return cfg
}
