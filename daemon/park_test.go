package daemon_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/history"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// leaseCalls is the daemon's ledger calls answered, by operation
// (pacer_lease_calls_total{result="ok"}).
func leaseCalls(t *testing.T, d *daemon.Daemon) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for _, mf := range gather(t, d) {
		if mf.GetName() != "pacer_lease_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var op, result string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "op":
					op = l.GetValue()
				case "result":
					result = l.GetValue()
				}
			}
			if result == "ok" {
				calls[op] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return calls
}

// budgetBound runs hosts on campaign c (8 shards, a flat curve of pace
// micros a second) from midnight for busy minutes of SPENDs asking twice
// the pace, then quiet more minutes of steps without SPENDs, on 100-ms
// refill ticks; it returns what the hosts allowed.
func budgetBound(t *testing.T, f *fixture, ds []*daemon.Daemon, pace int64, busy, quiet time.Duration, at func(time.Duration)) int64 {
	t.Helper()
	const bid = 2_000
	var allowed int64
	for el := time.Duration(0); el < busy+quiet; el += 10 * time.Millisecond {
		if el%(100*time.Millisecond) == 0 {
			for _, d := range ds {
				d.Step(ctx)
			}
		}
		if el < busy {
			for k := range 2 * pace / bid / 100 { // 2x the pace in 10 ms
				dec, err := ds[(int(el/(10*time.Millisecond))+int(k))%len(ds)].Spend("c", bid, "")
				if err != nil {
					t.Fatal(err)
				}
				if dec == pacer.Allowed {
					allowed += bid
				}
			}
		}
		f.Clock.Add(10 * time.Millisecond)
		if at != nil {
			at(el + 10*time.Millisecond)
		}
	}
	return allowed
}

// A budget-bound host asks a shard every quarter window and comes back to
// it about two windows later, a window after its lease there ended: that
// lease's release waits for the host's next grant on the shard and rides it
// as a renewal (park.go), one ledger call where it took two. Three hosts on
// 8 shards, past the day's start (two windows of sweeps): at least four
// leases in five are released by a renewal, and each host makes at most 16
// ledger calls a minute (22.8 when every lease was released on its own:
// TestSaturatedSpendIsSmoothPer10Seconds's three hosts, the same campaign).
func TestAReleaseRidesTheNextGrantOnItsShard(t *testing.T) {
	const hosts = 3
	f := newFixture(t)
	const pace = 240_000
	ds := pacedFleet(t, f, hosts, pace)
	calls := func() map[string]int64 {
		all := map[string]int64{}
		for _, d := range ds {
			for op, n := range leaseCalls(t, d) {
				all[op] += n
			}
		}
		return all
	}
	var before map[string]int64
	allowed := budgetBound(t, f, ds, pace, 8*time.Minute, 0, func(el time.Duration) {
		if el == 2*time.Minute {
			before = calls()
		}
	})
	after := calls()
	renew, release, grant := after["renew"]-before["renew"], after["release"]-before["release"], after["grant"]-before["grant"]
	perHostMinute := float64(renew+release+grant) / hosts / 6
	t.Logf("6 minutes past the start: %d renewals, %d releases on their own, %d grants; %.1f lease calls a host-minute", renew, release, grant, perHostMinute)
	if release*5 > renew+release {
		t.Errorf("%d of %d leases released on their own; want at most one in five, the rest riding a renewal", release, renew+release)
	}
	if perHostMinute > 16 {
		t.Errorf("%.1f lease calls a host-minute; want at most 16", perHostMinute)
	}
	if tot := f.Check(t, "c"); allowed > tot.Spent+tot.Leased {
		t.Fatalf("overspend: allowed %d, the ledger counts %d spent and %d leased", allowed, tot.Spent, tot.Leased)
	}
}

// A parked release that no grant comes to take (the host's demand stopped)
// goes on its own before its lease's ledger expiry: 80 s after the last
// SPEND (past every lease's end and park window), the ledger has settled
// none of the host's leases as expired (nothing lost), and the leases it
// has open are the ones the host holds (a standing bid: the campaign is
// sparse now), none parked and forgotten.
func TestAParkedReleaseGoesBeforeItsLeaseExpires(t *testing.T) {
	f := newFixture(t)
	const pace = 240_000
	f.Campaign(t, "c", pace*86_400, 8)
	f.Clock.Set(midnight)
	d := f.daemon(t, "h0")
	parked := 0
	allowed := budgetBound(t, f, []*daemon.Daemon{d}, pace, 4*time.Minute, 80*time.Second, func(el time.Duration) {
		if el == 4*time.Minute {
			parked = openLeases(t, f, "c", 8) - d.Status().LeasesHeld
		}
	})
	open, held := openLeases(t, f, "c", 8), d.Status().LeasesHeld
	tot := f.Check(t, "c")
	t.Logf("allowed %d; %d leases parked at the last SPEND; 80 s later the ledger: spent %d, leased %d, lost %d, %d leases open, the host holds %d",
		allowed, parked, tot.Spent, tot.Leased, tot.Lost, open, held)
	if parked == 0 {
		t.Fatal("no lease parked at the last SPEND: the test proves nothing")
	}
	if tot.Lost != 0 {
		t.Errorf("the ledger settled %d micros of the host's leases as lost: a parked release came after its lease expired", tot.Lost)
	}
	if open != held {
		t.Errorf("the ledger has %d leases open, the host holds %d: a parked release was never sent", open, held)
	}
	if allowed > tot.Spent+tot.Leased {
		t.Fatalf("overspend: allowed %d, the ledger counts %d spent and %d leased", allowed, tot.Spent, tot.Leased)
	}
}

// openLeases is how many leases campaign c's shards have open today.
func openLeases(t *testing.T, f *fixture, c string, shards int) int {
	t.Helper()
	n := 0
	for i := range shards {
		held, err := f.Ledger.Leases(ctx, lease.ShardKey{Campaign: c, Day: day, Shard: i})
		if err != nil {
			t.Fatal(err)
		}
		n += len(held)
	}
	return n
}

// Three budget-bound hosts on 8 shards park their leases' releases for
// their next grant on each shard (park.go) under faults: every seventh tick
// the next ledger call is carried out and its answer lost (a renewal that
// carried a parked release among them), every 25th the refill loop runs
// 1.5 s late, and at 3 minutes one host is SIGKILLed with releases parked
// and restarts from its journal. The clients, counting every answer
// themselves, net no more than they were allowed and every :1 is charged in
// the ledger, exactly; the ledger balances. With a backup taken at 2:30 put
// back at 3:00 (releases parked and renewals since gone), no client
// overspends and the ledger names the loss on the shards it finds it.
// Real redis-server behind a fault proxy.
func TestFaultParkedReleases(t *testing.T) {
	t.Run("lost answers, late ticks, a crash", func(t *testing.T) { faultParked(t, false) })
	t.Run("and a restore", func(t *testing.T) { faultParked(t, true) })
}

func faultParked(t *testing.T, restore bool) {
	f := newFixture(t)
	const pace = 240_000 // micros a second, flat
	const budget = pace * 86_400
	f.Campaign(t, "c", budget, 8)
	f.Clock.Set(midnight)
	proxy, ledger := proxiedLedger(t, f)
	dir := t.TempDir()
	start := func(i int) (*daemon.Daemon, *daemon.Journal) {
		j, left, err := daemon.OpenJournal(filepath.Join(dir, fmt.Sprintf("h%d.journal", i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := daemon.New(ledger, daemon.Config{Holder: fmt.Sprintf("h%d", i), Clock: f.Clock, Journal: j, LedgerTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Reclaim(ctx, j, left); err != nil {
			t.Fatal(err)
		}
		return d, j
	}
	ds := make([]*daemon.Daemon, 3)
	js := make([]*daemon.Journal, 3)
	for i := range ds {
		ds[i], js[i] = start(i)
	}
	defer func() {
		for _, j := range js {
			j.Close()
		}
	}()
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock})

	var rec history.Recorder
	next, denied := 0, 0
	const bid = 2_000
	var renewals, parkedAtKill int64
	faults := tickFaults{proxy: proxy, clock: f.Clock, lostEvery: 70, lostAt: 33, lateEvery: 250, lateAt: 111}
	var backup map[string]string
	restored := false
	for round := range int(5 * time.Minute / (100 * time.Millisecond)) {
		faults.at(round)
		for _, d := range ds {
			d.Step(ctx)
		}
		for k := range 2 * pace / bid / 10 { // twice the pace over the tick
			h := (round + int(k)) % len(ds)
			next++
			id := "a" + strconv.Itoa(next)
			now := f.Clock.Now()
			dec, err := ds[h].Spend("c", bid, id)
			ok := err == nil && dec == pacer.Allowed
			rec.Record(history.Call{At: now, Client: fmt.Sprintf("h%d", h), Campaign: "c", Day: day, Auction: id, Amount: bid, OK: ok, Answer: dec.String()})
			if !ok {
				denied++
			}
		}
		f.Clock.Add(100 * time.Millisecond)
		switch since := f.Clock.Now().Sub(midnight); {
		case since == 3*time.Minute:
			open := openLeases(t, f, "c", 8)
			renewals += leaseCalls(t, ds[1])["renew"]
			js[1].Close() // SIGKILL: no release, parked or held
			ds[1], js[1] = start(1)
			parkedAtKill = int64(open)
			rec.Notef(f.Clock.Now(), "", "h1 killed and restarted from its journal")
		case restore && since == 150*time.Second:
			backup = f.Redis.SnapshotAll()
		case restore && since == 3*time.Minute+100*time.Millisecond:
			f.Redis.RestoreAll(backup)
			restored = true
			rec.Notef(f.Clock.Now(), "", "the backup taken at 2:30 restored")
		}
	}
	for _, d := range ds {
		renewals += leaseCalls(t, d)["renew"]
	}
	proxy.Disarm()
	quiesce(t, f, rc, ds...)
	rep, tally := checkDayC(t, f, &rec, "parked releases, lost answers, late ticks, a crash, restore "+strconv.FormatBool(restore), budget, !restore)
	t.Logf("%d renewals; %d leases open at the kill; %d answers lost (%d resets fired), %d late ticks; %d SPENDs, %d denied; clients netted %d",
		renewals, parkedAtKill, faults.lost, proxy.Fired(), faults.late, next, denied, tally.Net())
	if !restore {
		if err := rep.Err(); err != nil {
			t.Fatal(err)
		}
		f.Check(t, "c")
	} else {
		onlyTheRestoreNamed(t, rep, restored)
	}
	if renewals < 100 || proxy.Fired() < 10 || denied == 0 {
		t.Fatalf("%d renewals, %d lost answers, %d denials: the releases did not park, or the faults or the load did not press", renewals, proxy.Fired(), denied)
	}
}
