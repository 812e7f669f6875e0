package daemon_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// cmdKinds counts the commands a client sends by kind: "lease" for the
// ledger's scripts on a shard's keys, "demand" for the demand flush script,
// else the command's name, and for a settings read "hgetall <key>" too (a
// pipeline's commands one by one).
type cmdKinds struct {
	mu sync.Mutex
	n  map[string]int64
	// class, if set, names the class of a script's first key's campaign:
	// scripts are then counted as "lease:<class>" and "demand:<class>" too.
	class func(key string) string
}

func (c *cmdKinds) count(cmd redis.Cmder) {
	kind := strings.ToLower(cmd.Name())
	if kind == "evalsha" || kind == "eval" || kind == "fcall" {
		kind = "lease"
		if args := cmd.Args(); len(args) > 3 && strings.HasPrefix(fmt.Sprint(args[3]), "pacer:demand:") {
			kind = "demand"
		}
	}
	c.mu.Lock()
	c.n[kind]++
	if args := cmd.Args(); c.class != nil && (kind == "lease" || kind == "demand") && len(args) > 3 {
		c.n[kind+":"+c.class(fmt.Sprint(args[3]))]++
	}
	if args := cmd.Args(); kind == "hgetall" && len(args) > 1 {
		c.n[kind+" "+fmt.Sprint(args[1])]++
	}
	c.mu.Unlock()
}

func (c *cmdKinds) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdKinds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *cmdKinds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// take returns the counts so far and starts again from zero.
func (c *cmdKinds) take() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int64{}
	return n
}

// countingLedger is a ledger on the fixture's Redis whose commands are
// counted by kind.
func countingLedger(f *fixture) (*lease.Ledger, *cmdKinds) {
	kinds := &cmdKinds{n: map[string]int64{}}
	c := f.Redis.Client()
	c.AddHook(kinds)
	return lease.New(c, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil), kinds
}

// countedDaemon is a daemon at noon over n campaigns c0..c<n-1> whose ledger
// commands are counted by kind.
func countedDaemon(t *testing.T, n int) (*fixture, *daemon.Daemon, *cmdKinds) {
	t.Helper()
	f := newFixture(t)
	for i := range n {
		f.Campaign(t, "c"+strconv.Itoa(i), 86_400_000_000, 4)
	}
	ledger, kinds := countingLedger(f)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d, err := daemon.New(ledger, daemon.Config{Holder: "h", Clock: f.Clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	return f, d, kinds
}

// Issue 13: beyond its lease calls, a daemon sends at most about one Redis
// command per busy campaign per minute: its demand flush (one script), the
// change stream read shared by all campaigns, and each campaign's full
// settings read every CampaignReread (30 min). Before, it was 11.4: a
// settings read every 30 s and five commands per demand flush.
func TestBusyCampaignCostsOneCommandPerMinute(t *testing.T) {
	const campaigns, minutes = 20, 10
	f, d, kinds := countedDaemon(t, campaigns)
	step := func(seconds int) int64 {
		var allowed int64
		for range seconds {
			f.Clock.Add(time.Second)
			d.Step(ctx)
			for i := range campaigns {
				allowed += spendAttempts(t, d, "c"+strconv.Itoa(i), 1000, 2)
			}
		}
		return allowed
	}
	step(120) // loads, first leases, the first full settings read
	kinds.take()
	if allowed := step(minutes * 60); allowed == 0 {
		t.Fatal("nothing allowed: the campaigns are not busy")
	}
	n := kinds.take()
	// Per campaign: everything but the lease scripts and the change
	// stream reads, which are per daemon (one for all its campaigns).
	var perCampaign int64
	for k, v := range n {
		if k != "lease" && k != "xrange" && k != "xrevrange" && !strings.HasPrefix(k, "hgetall ") {
			perCampaign += v
		}
	}
	perMinute := float64(perCampaign) / campaigns / minutes
	t.Logf("%d busy campaigns, %d minutes: %v; %.2f commands per campaign-minute beyond the lease calls, %d change stream reads for all",
		campaigns, minutes, n, perMinute, n["xrange"])
	if perMinute > 1 {
		t.Fatalf("%.2f commands per busy campaign per minute beyond the lease calls (%v); want at most 1", perMinute, n)
	}
	if n["xrange"] > 2*minutes+1 {
		t.Fatalf("%d change stream reads in %d minutes; want one per CampaignRefresh (30 s)", n["xrange"], minutes)
	}
	if n["demand"] < campaigns*(minutes-1) {
		t.Fatalf("%d demand flushes in %d minutes of %d campaigns: demand is not being flushed", n["demand"], minutes, campaigns)
	}
	if n["hgetall"] > 0 {
		t.Fatalf("%d settings reads with no settings changed (want 0: one change stream read covers them): %v", n["hgetall"], n)
	}
}

// A settings change reaches the daemon through the change stream within
// CampaignRefresh: one stream read, and a settings read of the changed
// campaign only.
func TestSettingsChangeFoundThroughTheChangeStream(t *testing.T) {
	const campaigns = 30
	f, d, kinds := countedDaemon(t, campaigns)
	for range 40 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		for i := range campaigns {
			spendAttempts(t, d, "c"+strconv.Itoa(i), 1000, 1)
		}
	}
	if _, err := f.Ledger.SetState(ctx, "c7", lease.StatePaused); err != nil {
		t.Fatal(err)
	}
	kinds.take()
	for s := 1; ; s++ {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		if dec, _ := d.Spend("c7", 1000, ""); dec == pacer.Exhausted {
			break
		}
		if s > 31 {
			t.Fatalf("the pause did not reach the daemon within CampaignRefresh (30 s) and a tick")
		}
	}
	n := kinds.take()
	t.Logf("commands from the pause to its effect: %v", n)
	if n["hgetall"] != 1 {
		t.Fatalf("%d settings reads for one campaign changed among %d: %v; want 1", n["hgetall"], campaigns, n)
	}
	if n["xrange"] == 0 {
		t.Fatalf("the change was not found through the change stream: %v", n)
	}
	if dec, _ := d.Spend("c8", 1000, ""); dec == pacer.Exhausted {
		t.Fatal("another campaign paused too")
	}
}

// Issue 13: a campaign unused for CampaignIdle is dropped once its leases are
// given back, and costs no Redis command and no step after that; its next
// SPEND loads it again. The SPEND counters do not go back when it goes.
func TestIdleCampaignIsDroppedAndReloaded(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000_000, 4)
	f.Campaign(t, "busy", 86_400_000_000, 4)
	ledger, kinds := countingLedger(f)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d, err := daemon.New(ledger, daemon.Config{Holder: "h", Clock: f.Clock, LeaseTiming: daemon.LeaseTiming{StandingIdle: 5 * time.Minute}, CampaignIdle: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	var allowed int64
	for range 60 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		allowed += spendAttempts(t, d, "c", 1000, 5)
		spendAttempts(t, d, "busy", 1000, 1)
	}
	if allowed == 0 {
		t.Fatal("nothing allowed before the campaign went idle")
	}
	before := info(d, "spend_allowed")
	dropped := time.Duration(0)
	for s := 1; s <= 30*60; s++ {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		spendAttempts(t, d, "busy", 1000, 1)
		if dropped == 0 && !slices.Contains(d.Campaigns(), "c") {
			dropped = time.Duration(s) * time.Second
			kinds.take()
		}
	}
	if dropped == 0 {
		t.Fatalf("campaign unused for 30 minutes still loaded (CampaignIdle 20m): %v", d.Campaigns())
	}
	if dropped < 20*time.Minute || dropped > 21*time.Minute {
		t.Fatalf("dropped %v after its last use; want 20m (CampaignIdle) to 21m", dropped)
	}
	if n := info(d, "campaigns_dropped"); n != 1 {
		t.Fatalf("campaigns_dropped = %d, want 1", n)
	}
	if n := info(d, "spend_allowed"); n < before {
		t.Fatalf("spend_allowed went back from %d to %d when the campaign was dropped", before, n)
	}
	// Every lease of c is back in the ledger, and nothing was sent for c
	// since it went (only the busy campaign's calls and the change stream).
	if sh := f.Check(t, "c"); sh.Leased != 0 {
		t.Fatalf("dropped campaign still holds leases in the ledger: %+v", sh)
	}
	n := kinds.take()
	if k := "hgetall pacer:campaign:{c}"; n[k] > 0 {
		t.Fatalf("the dropped campaign's settings were read %d times after it was dropped: %v", n[k], n)
	}
	// Its next SPEND loads it again and it spends.
	var again int64
	for range 5 {
		again += spendAttempts(t, d, "c", 1000, 5)
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	if again == 0 {
		t.Fatal("a dropped campaign's next SPENDs were not allowed within 5 s of its reload")
	}
	if !slices.Contains(d.Campaigns(), "c") {
		t.Fatal("campaign not loaded again by its SPEND")
	}
}

// spendEvery30s runs one daemon at noon for d of 100 ms refill ticks with a
// SPEND of 1,000 micros every 30 s on a large campaign, and returns the
// SPENDs made and allowed and the lease calls (grants, renewals, releases).
func spendEvery30s(t *testing.T, d time.Duration) (spends, allowed int64, calls float64) {
	t.Helper()
	f := newFixture(t)
	f.Campaign(t, "w", 86_400_000_000, 8)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	dm := f.sparseDaemon(t, "h", time.Second) // a fetch a loaded machine delays past 5 ms still serves its SPEND
	dm.Warm([]string{"w"})
	for tick := range int(d / (100 * time.Millisecond)) {
		f.Clock.Add(100 * time.Millisecond)
		dm.Step(ctx)
		if tick%300 == 0 {
			spends++
			allowed += spendAttempts(t, dm, "w", 1000, 1) / 1000
		}
	}
	calls = ledgerOpCalls(t, dm, "grant", "renew", "release")
	t.Logf("%d SPENDs, %d allowed, %v lease calls", spends, allowed, calls)
	return spends, allowed, calls
}

// A sparse campaign (a SPEND every 30 s here) keeps a standing lease of one
// bid and tops it up after each SPEND. Each bid spent whole kept its feed
// open to its end, so within minutes the bucket's feeds were full and every
// top-up was granted, refused by the bucket and given back, over and over:
// 730 lease calls for 20 SPENDs. A top-up now renews the oldest lease.
func TestSparseCampaignTopUpsDoNotChurn(t *testing.T) {
	spends, allowed, calls := spendEvery30s(t, 10*time.Minute)
	if calls > 2*float64(spends)+4 {
		t.Fatalf("%v lease calls for %d sparse SPENDs; want about one per SPEND", calls, spends)
	}
	if allowed < spends-1 {
		t.Fatalf("%d of %d sparse SPENDs allowed with budget to spare", allowed, spends)
	}
}

// Issue 13: a warm campaign (a SPEND every 30 s on this host, as in the
// fleet arithmetic of docs/BENCHMARKS.md) holds a standing lease of several
// bids, so it tops up every few SPENDs instead of at each: a ledger call per
// SPEND for such campaigns was most of a large fleet's Redis load. Its
// SPENDs are all allowed as before.
func TestWarmCampaignTopsUpEveryFewSpends(t *testing.T) {
	spends, allowed, calls := spendEvery30s(t, 30*time.Minute)
	if calls > float64(spends)/2 {
		t.Errorf("%v lease calls for %d SPENDs; want at most one per two (a standing lease of several bids)", calls, spends)
	}
	if allowed < spends-2 {
		t.Errorf("%d of %d SPENDs allowed with budget to spare", allowed, spends)
	}
}

// A fault the change stream cannot cover: Redis fails over and loses the
// change record of a pause (and the broadcast is lost with it). The daemon
// still learns of the pause from its full re-read of each campaign every
// CampaignReread (30 min, spread by campaign), at one settings read per
// campaign per re-read, not one per refresh.
func TestPauseWithLostChangeRecordArrivesByReread(t *testing.T) {
	const campaigns = 10
	f, d, kinds := countedDaemon(t, campaigns)
	for range 10 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		for i := range campaigns {
			spendAttempts(t, d, "c"+strconv.Itoa(i), 1000, 1)
		}
	}
	if _, err := f.Ledger.SetState(ctx, "c7", lease.StatePaused); err != nil {
		t.Fatal(err)
	}
	// The failover: the stream's record of the change is gone.
	if err := f.Redis.Client().Del(ctx, "pacer:campaigns:changes").Err(); err != nil {
		t.Fatal(err)
	}
	kinds.take()
	const step = 10 * time.Second
	var took time.Duration
	for took = step; ; took += step {
		f.Clock.Add(step)
		d.Step(ctx)
		if dec, _ := d.Spend("c7", 1000, ""); dec == pacer.Exhausted {
			break
		}
		if took > 31*time.Minute {
			t.Fatal("a pause whose change record was lost did not reach the daemon within CampaignReread (30 min)")
		}
	}
	n := kinds.take()
	t.Logf("the pause took effect after %v; commands meanwhile: %v", took, n)
	if n["hgetall"] > campaigns+1 {
		t.Errorf("%d settings reads in %v for %d campaigns; want at most one each per CampaignReread", n["hgetall"], took, campaigns)
	}
	if dec, _ := d.Spend("c8", 1000, ""); dec == pacer.Exhausted {
		t.Fatal("another campaign paused too")
	}
}
