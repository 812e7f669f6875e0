package daemon_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/ledgertest"
	"github.com/pacer/pacer/lease"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis re-dials a refused pool in the background, sleeping a second
	// between tries: a test that restarts Redis can end inside that sleep.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

var (
	ctx      = context.Background()
	midnight = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
)

const day = "2026-11-21"

// fixture is the shared ledger fixture (ledgertest), at midnight of day,
// with the daemons these tests start on it.
type fixture struct{ *ledgertest.Fixture }

func newFixture(t testing.TB) *fixture { return &fixture{ledgertest.New(t, midnight)} }

// campaignWithBid is campaign with the campaign's bid recorded too, as
// pacerctl campaign set --bid does (or the fleet's reports would): what sizes
// a sparse campaign's standing bids, advance and hour bound from its start.
func (f *fixture) campaignWithBid(t testing.TB, id string, daily int64, shards int, bid int64) {
	t.Helper()
	f.Campaign(t, id, daily, shards)
	if err := f.Ledger.SetBid(ctx, id, bid); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) daemon(t *testing.T, holder string) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: holder, Clock: f.Clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	return d
}

// standingDaemon is a daemon whose sparse campaigns hold standing leases
// (lease.sparse_wait off), for the tests of those.
func (f *fixture) standingDaemon(t *testing.T, holder string) *daemon.Daemon {
	t.Helper()
	return f.sparseDaemon(t, holder, daemon.Never)
}

// sparseDaemon is a daemon with lease.sparse_wait set to wait.
func (f *fixture) sparseDaemon(t *testing.T, holder string, wait time.Duration) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: holder, Clock: f.Clock, LeaseTiming: daemon.LeaseTiming{SparseWait: wait}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	return d
}

// spendUntilDenied spends amount until the daemon says no, and returns what it
// allowed and its last answer: unbounded demand.
func spendUntilDenied(t *testing.T, d *daemon.Daemon, id string, amount int64) (int64, pacer.Decision) {
	t.Helper()
	var allowed int64
	for {
		dec, err := d.Spend(pacer.CampaignID(id), pacer.Micros(amount), "")
		if err != nil {
			t.Fatal(err)
		}
		if dec != pacer.Allowed {
			return allowed, dec
		}
		allowed += amount
	}
}

func TestFirstSpendIsAllowedAndHammeringIsPaced(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "demo", 8_640_000_000, 8) // 100,000 micros/s flat
	// Ten minutes into the day, nothing spent: the campaign is ten minutes
	// (60,000,000 micros) behind its curve, so it may catch up at up to the
	// default catch-up rate, 3x the curve's pace, for a while.
	f.Clock.Set(midnight.Add(10 * time.Minute))
	d := f.daemon(t, "h1")
	dec, err := d.Spend("demo", 1000, "")
	if err != nil || dec != pacer.Allowed {
		t.Fatalf("first SPEND = %v, %v; want allowed", dec, err)
	}
	// Far above pace: most calls are paced, and over a minute the allowed
	// amount follows the pace (100,000 micros/s), not the demand.
	var allowed int64
	var paced int
	for range 600 {
		f.Clock.Add(100 * time.Millisecond)
		d.Step(ctx)
		for range 50 {
			dec, err := d.Spend("demo", 1000, "")
			if err != nil {
				t.Fatal(err)
			}
			switch dec {
			case pacer.Allowed:
				allowed += 1000
			case pacer.Paced:
				paced++
			default:
				t.Fatalf("SPEND = %v, want allowed or paced", dec)
			}
		}
	}
	if paced == 0 {
		t.Fatal("no SPEND was paced at 5x the pace")
	}
	// 60 s at 100,000/s = 6,000,000; at the catch-up rate, 3x that, plus the
	// first lease's burst; never the 30,000,000 demanded.
	if allowed < 5_000_000 || allowed > 3*6_000_000+1_000_000 {
		t.Fatalf("allowed %d micros in 60 s; pace is 6,000,000, catch-up 3x", allowed)
	}
	f.Check(t, "demo")
}

func TestUnknownCampaignAndBadSpend(t *testing.T) {
	f := newFixture(t)
	d := f.daemon(t, "h1")
	_, err := d.Spend("nope", 1000, "")
	var unknown *lease.UnknownCampaignError
	if !errors.As(err, &unknown) {
		t.Fatalf("SPEND unknown = %v, want UnknownCampaignError", err)
	}
	if _, err := d.Spend("bad{id}", 1, ""); !errors.As(err, &unknown) {
		t.Fatalf("SPEND bad id = %v", err)
	}
}

// Two daemons on one Redis with unbounded demand over a whole simulated day:
// together they allow at most the budget, and at least 99% of it.
func TestTwoDaemonsSimulatedDay(t *testing.T) {
	f := newFixture(t)
	const budget = 864_000_000 // 10,000 micros/s
	f.Campaign(t, "c", budget, 8)
	a, b := f.daemon(t, "a"), f.daemon(t, "b")
	var allowedA, allowedB int64
	for now := midnight; now.Before(midnight.Add(24 * time.Hour)); now = now.Add(2 * time.Second) {
		f.Clock.Set(now)
		a.Step(ctx)
		b.Step(ctx)
		n, _ := spendUntilDenied(t, a, "c", 2000)
		allowedA += n
		n, _ = spendUntilDenied(t, b, "c", 2000)
		allowedB += n
		if now.Minute() == 0 && now.Second() == 0 {
			f.Check(t, "c") // conservation holds throughout, not only at the end
		}
	}
	f.Clock.Set(midnight.Add(24*time.Hour + time.Minute))
	a.Step(ctx)
	b.Step(ctx)
	total := allowedA + allowedB
	t.Logf("allowed a=%d b=%d total=%d (%.3f%% of budget)", allowedA, allowedB, total, 100*float64(total)/budget)
	if total > budget {
		t.Fatalf("overspend: allowed %d > budget %d", total, budget)
	}
	if total < budget*99/100 {
		t.Fatalf("under-delivery: allowed %d < 99%% of %d", total, budget)
	}
	if allowedA < total/4 || allowedB < total/4 {
		t.Errorf("one daemon starved: a=%d b=%d", allowedA, allowedB)
	}
	sh := f.Check(t, "c")
	if sh.Spent < total {
		t.Fatalf("ledger spent %d < allowed %d", sh.Spent, total)
	}
}

// Redis dies: the daemon serves from the leases it holds until their
// spendable end, then denies; it never allows more than it was granted. When
// Redis is back (with its data: AOF), releases go through and the daemon
// leases again; the ledger balances.
func TestRedisOutageThenRestart(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, LedgerTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	var allowed int64
	for range 20 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 1000)
		allowed += n
	}
	granted := f.Check(t, "c")
	held := granted.Leased + granted.Spent
	f.Redis.Kill()
	var during int64
	for range 60 { // two lease windows without Redis
		f.Clock.Add(time.Second)
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 1000)
		during += n
	}
	if allowed+during > held {
		t.Fatalf("allowed %d while the ledger had granted this daemon %d: overspend", allowed+during, held)
	}
	if dec, _ := d.Spend("c", 1000, ""); dec == pacer.Allowed {
		t.Fatal("still allowing after every lease's spendable end with Redis down")
	}
	f.Redis.Restart()
	// The client's pool reconnects on its own within a second of real time
	// (go-redis re-dials in the background after a refused dial); wait for
	// that I/O, not for the test clock.
	waitForRedis(t, f.Ledger)
	var after int64
	for range 60 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 1000)
		after += n
	}
	if after == 0 {
		t.Fatal("the daemon did not resume spending once Redis was back")
	}
	sh := f.Check(t, "c")
	if total := allowed + during + after; total > sh.Spent+sh.Leased {
		t.Fatalf("allowed %d > ledger spent %d + leased %d", total, sh.Spent, sh.Leased)
	}
}

// Observed demand reaches the ledger in per-slot batches (for curve fitting),
// never a write per SPEND, and adds up to what the daemon answered.
func TestDemandIsFlushedPerSlot(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(6 * time.Hour))
	d := f.daemon(t, "h")
	var calls, allowed int64
	for range 3 * 60 { // three minutes, 20 SPENDs a second
		f.Clock.Add(time.Second)
		d.Step(ctx)
		for range 20 {
			dec, err := d.Spend("c", 10_000, "")
			if err != nil {
				t.Fatal(err)
			}
			calls++
			if dec == pacer.Allowed {
				allowed++
			}
		}
	}
	f.Clock.Add(time.Minute)
	d.Step(ctx)
	m, err := f.Redis.Client().HGetAll(ctx, lease.DemandKey("c", day)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// 06:00-06:04 is slot 24 of 96.
	if m["req:24"] != strconv.FormatInt(calls, 10) || m["ok:24"] != strconv.FormatInt(allowed, 10) ||
		m["reqm:24"] != strconv.FormatInt(calls*10_000, 10) {
		t.Fatalf("demand hash %v; want req:24=%d ok:24=%d reqm:24=%d", m, calls, allowed, calls*10_000)
	}
	if len(m) != 4 {
		t.Fatalf("demand spread over other slots: %v", m)
	}
}

// The network to Redis is cut (the server frozen: calls hang until their
// timeout): the daemon spends its leases until their spendable end, then
// denies, never past what the ledger granted; SPEND never waits on the hung
// calls; when the cut heals it carries on.
func TestRedisPartition(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, LedgerTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var allowed int64
	for range 20 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		allowed += spendAttempts(t, d, "c", 1000, 200)
	}
	granted := f.Check(t, "c")
	if err := f.Redis.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			f.Redis.Resume()
		}
	}()
	var during int64
	for range 45 { // one and a half lease windows cut off
		f.Clock.Add(time.Second)
		d.Step(ctx) // its ledger calls time out
		start := time.Now()
		during += spendAttempts(t, d, "c", 1000, 200)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("200 SPENDs took %v while Redis hung: the hot path waited on the network", took)
		}
	}
	if allowed+during > granted.Spent+granted.Leased {
		t.Fatalf("allowed %d while the ledger had granted %d: overspend", allowed+during, granted.Spent+granted.Leased)
	}
	if dec, _ := d.Spend("c", 1000, ""); dec == pacer.Allowed {
		t.Fatal("still allowing after every lease's spendable end with Redis unreachable")
	}
	if err := f.Redis.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// The client's pool, after a burst of failed dials, waits to dial again
	// in its own (real) time: wait for the ledger to answer before moving
	// the clock on.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := f.Ledger.GetCampaign(ctx, "c"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the ledger does not answer after the cut healed: %v", err)
		}
	}
	var after int64
	for range 30 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		after += spendAttempts(t, d, "c", 1000, 200)
	}
	if after == 0 {
		t.Fatal("no spending after the partition healed")
	}
	// Close's releases have the test's ledger timeout, 100 ms of real
	// time: on a busy machine one may go unacknowledged, which Close
	// reports and the ledger settles after expiry (below). The money holds
	// either way.
	if err := d.Close(ctx); err != nil {
		if !strings.Contains(err.Error(), "releases not acknowledged") {
			t.Fatal(err)
		}
		t.Logf("%v: settled below", err)
	}
	f.Clock.Add(time.Minute) // past every lease's expiry and grace
	for s := range 4 {
		if _, err := f.Ledger.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: s}, f.Clock.Now(), 5*time.Second, 0); err != nil {
			t.Fatal(err)
		}
	}
	sh := f.Check(t, "c")
	if total := allowed + during + after; total > sh.Spent {
		t.Fatalf("allowed %d > ledger spent %d after every lease was released or settled", total, sh.Spent)
	}
}

// waitForRedis waits (real time, for real I/O) until the ledger's client
// reaches Redis again after a restart.
func waitForRedis(t testing.TB, l *lease.Ledger) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the ledger's client did not reconnect to Redis within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
