package daemon_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/faultproxy"
	"github.com/pacer/pacer/internal/history"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// A fresh host opens a day of 16 shards, more than its bucket has feeds,
// under faults: every seventh tick the next ledger call is carried out and
// its answer lost (between the script's apply and the daemon's read of it),
// and every 25th the refill loop runs 1.5 s late. The host's full bucket
// makes room for the shard due by releasing a swept lease on its own shard
// (condition 13), and a late tick's successor credits the drip it missed
// (condition 14): each a separate step between a feed closed and a ledger
// call answered. The client, counting every answer itself, nets no more
// than the budget, every :1 is charged in the ledger, and the ledger
// balances. With a backup taken 10 s into the day put back 20 s in (the
// sweep's releases and renewals since gone), the client still nets no more
// than the budget and the ledger names the loss on the shards it finds it
// (lost acknowledged writes: frozen); what the restore took is not charged
// there, so only the limit is checked. Real redis-server behind a fault
// proxy.
func TestFaultDayStartOnMoreShardsThanFeeds(t *testing.T) {
	t.Run("lost answers and late ticks", func(t *testing.T) { dayStartOnMoreShards(t, false) })
	t.Run("and a restore", func(t *testing.T) { dayStartOnMoreShards(t, true) })
}

func dayStartOnMoreShards(t *testing.T, restore bool) {
	f := newFixture(t)
	const budget = 6_000_000
	w := make([]float64, 1440)
	w[0], w[1] = 1, 1 // the budget released over the day's first two minutes
	curve, err := bucket.NewCurve("two", w)
	if err != nil {
		t.Fatal(err)
	}
	const shards = 16
	if shards <= bucket.MaxFeeds {
		t.Fatalf("%d shards: want more than a bucket's %d feeds", shards, bucket.MaxFeeds)
	}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: "UTC", Curve: "two", Shards: shards, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight)
	proxy, ledger := proxiedLedger(t, f)
	const tick = 200 * time.Millisecond
	d, err := daemon.New(ledger, daemon.Config{Holder: "h0",
		Clock: f.Clock, TickInterval: tick, Curves: map[string]*bucket.Curve{"two": curve}, LedgerTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock})

	var rec history.Recorder
	var denied, allowed int
	next := 0
	spend := func(n int) {
		for k := range n {
			amount := int64(1000 * (1 + k%3))
			next++
			id := "a" + strconv.Itoa(next)
			now := f.Clock.Now()
			dec, err := d.Spend("c", pacer.Micros(amount), id)
			ok := err == nil && dec == pacer.Allowed
			ans := dec.String()
			if err != nil {
				ans = "error: " + err.Error()
			}
			rec.Record(history.Call{At: now, Client: "h0", Campaign: "c", Day: day, Auction: id, Amount: amount, OK: ok, Answer: ans})
			if ok {
				allowed++
			} else {
				denied++
			}
		}
	}
	var tapped int
	faults := tickFaults{proxy: proxy, clock: f.Clock, lostEvery: 7, lostAt: 3, lateEvery: 25, lateAt: 11}
	var backup map[string]string
	restored := false
	for round := range int(3 * time.Minute / tick) {
		faults.at(round)
		f.Clock.Add(tick)
		d.Step(ctx)
		spend(40) // 40 SPENDs of 2,000 micros on average a tick: 4x the pace
		switch since := f.Clock.Now().Sub(midnight); {
		case restore && backup == nil && since >= 10*time.Second:
			backup = f.Redis.SnapshotAll()
		case restore && !restored && since >= 20*time.Second:
			f.Redis.RestoreAll(backup)
			restored = true
			rec.Notef(f.Clock.Now(), "", "the backup taken 10 s into the day restored")
		}
		if f.Clock.Now().Sub(midnight) < 30*time.Second {
			continue
		}
		if tapped == 0 { // the shards the host had called in the day's first half minute
			sh, err := f.Ledger.ReadShards(ctx, "c", day, shards)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sh {
				if s.Leased+s.Spent > 0 {
					tapped++
				}
			}
		}
	}
	proxy.Disarm()
	quiesce(t, f, rc, d)
	rep, tally := checkDayC(t, f, &rec, "16 shards, lost answers, late ticks, restore "+strconv.FormatBool(restore), budget, !restore)
	balances := "the restore named on its shards"
	if !restore { // a restored shard's history is behind its holders' by design
		balances = fmt.Sprintf("%+v", f.Check(t, "c"))
	}
	t.Logf("%d shards called in the first 30 s; %d answers lost (%d resets fired), %d late ticks; %d SPENDs allowed, %d denied; clients netted %d of %d; ledger %s",
		tapped, faults.lost, proxy.Fired(), faults.late, allowed, denied, tally.Net(), budget, balances)
	if !restore {
		if err := rep.Err(); err != nil {
			t.Fatal(err)
		}
	} else {
		onlyTheRestoreNamed(t, rep, restored)
	}
	if tapped <= bucket.MaxFeeds {
		t.Errorf("the host called %d of %d shards in the day's first 30 s; want more than its bucket's %d feeds (the full bucket makes room)", tapped, shards, bucket.MaxFeeds)
	}
	if proxy.Fired() < 10 || (!restore && tally.Net() < budget/2) || denied == 0 {
		t.Fatalf("%d lost answers, clients netted %d of %d with %d denials: the faults or the load did not press on the budget", proxy.Fired(), tally.Net(), budget, denied)
	}
}

// onlyTheRestoreNamed checks a history with a backup restored: the ledger
// names the restore (lost acknowledged writes, its shards frozen) and
// nothing else is wrong, no client overspent.
func onlyTheRestoreNamed(t *testing.T, rep history.Report, restored bool) {
	t.Helper()
	named := 0
	for _, v := range rep.Violations {
		if v.Kind != "conservation" || !strings.Contains(v.Detail, "lost acknowledged writes") {
			t.Errorf("%s: %s", v.Kind, v.Detail)
			continue
		}
		named++
	}
	if !restored || named == 0 {
		t.Fatalf("restored %v, the loss named on %d shards: want the restore done and named", restored, named)
	}
}

// proxiedLedger is a ledger on the fixture's redis-server through a fault
// proxy of its own (closed with the test), its client retrying nothing so
// that a fault reaches the daemon.
func proxiedLedger(t *testing.T, f *fixture) (*faultproxy.Proxy, *lease.Ledger) {
	t.Helper()
	proxy, err := faultproxy.Start(f.Redis.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: proxy.Socket, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return proxy, lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
}

// tickFaults is the fault tests' schedule, a round (a tick) at a time:
// every lostEvery-th round from lostAt, the next ledger script is carried
// out and its answer lost (a step between apply and read); every
// lateEvery-th from lateAt, the clock jumps 1.5 s with no tick (the refill
// loop runs late). lost and late count what was injected.
type tickFaults struct {
	proxy                                *faultproxy.Proxy
	clock                                *clocktest.Manual
	lostEvery, lostAt, lateEvery, lateAt int
	lost, late                           int
}

func (tf *tickFaults) at(round int) {
	if round%tf.lostEvery == tf.lostAt {
		tf.proxy.ResetAfter(faultproxy.Scripts)
		tf.lost++
	}
	if round%tf.lateEvery == tf.lateAt {
		tf.clock.Add(1500 * time.Millisecond) // no tick: the loop runs late
		tf.late++
	}
}
