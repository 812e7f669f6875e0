package daemon_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func startNATS(t testing.TB) *embedded.NATS {
	t.Helper()
	n, err := embedded.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// fleetDaemon is a daemon wired to NATS as pacerd wires it (daemon.Open): it
// publishes what it learns first and applies what others broadcast. The test
// steps it on the fixture's clock.
func (f *fixture) fleetDaemon(t testing.TB, holder, natsURL string, cfg daemon.Config) (*daemon.Daemon, *broadcast.Broadcaster) {
	t.Helper()
	rdb := f.Redis.Client()
	t.Cleanup(func() { rdb.Close() })
	cfg.Holder, cfg.Clock = holder, f.Clock
	cfg.Links = daemon.Links{RedisClient: rdb, Ledger: lease.Config{Retention: 100 * 365 * 24 * time.Hour},
		NATS: natsURL, NATSOptions: broadcast.Options{Name: holder}, ManualStep: true}
	d, err := daemon.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	b := d.Broadcaster()
	if err := b.Flush(time.Second); err != nil {
		t.Fatal(err)
	}
	return d, b
}

// evalshaCalls counts the ledger scripts Redis ran (EVALSHA and FCALL).
func evalshaCalls(t *testing.T, f *fixture) int64 {
	t.Helper()
	info, err := f.Redis.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, name := range []string{"cmdstat_evalsha:calls=", "cmdstat_fcall:calls="} {
			if rest, ok := strings.CutPrefix(line, name); ok {
				c, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				n += c
			}
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // what a machine at load 20 may take
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Once a campaign-day's budget is gone every daemon answers -1 and none of
// them makes another lease call for it: a hot campaign at zero cannot hammer
// its shards.
func TestExhaustionStopsEveryDaemonAndLeaseCalls(t *testing.T) {
	f := newFixture(t)
	n := startNATS(t)
	// A morning-only campaign: its curve is done at noon, so at 13:00 all of
	// its budget is released and unbounded demand drains it within seconds.
	morning := make([]float64, 24)
	for i := range 12 {
		morning[i] = 1
	}
	curve, err := bucket.NewCurve("morning", morning)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: 86_400_000, TZ: "UTC", Curve: "morning", Shards: 4, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(13 * time.Hour))
	cfg := daemon.Config{Curves: map[string]*bucket.Curve{"morning": curve}}
	var ds []*daemon.Daemon
	var bs []*broadcast.Broadcaster
	for _, h := range []string{"a", "b", "c"} {
		d, b := f.fleetDaemon(t, h, n.URL, cfg)
		ds, bs = append(ds, d), append(bs, b)
	}
	var allowed int64
	exhausted := func() bool {
		for _, d := range ds {
			if dec, _ := d.Spend("c", 1000, ""); dec != pacer.Exhausted {
				if dec == pacer.Allowed {
					allowed += 1000
				}
				return false
			}
		}
		return true
	}
	for i := 0; !exhausted(); i++ {
		if i > 300 {
			b, _ := ds[0].Balance("c")
			t.Fatalf("campaign not exhausted on every daemon after 300 steps: allowed %d, ledger %+v, a: %+v %v", allowed, f.Check(t, "c"), b, ds[0].Info())
		}
		f.Clock.Add(time.Second)
		for _, d := range ds {
			d.Step(ctx)
			// Demand far above what is left: 500 bids of 1,000 a second.
			allowed += spendAttempts(t, d, "c", 1000, 500)
		}
	}
	var received int64
	for _, b := range bs {
		received += b.Stats().Received
	}
	if received == 0 {
		t.Error("no exhaustion broadcast was received")
	}
	// Exhaustion is a hint (issue 9): what the last leases give back when
	// they close is leased and spent again, daemons finding it on their next
	// look at the ledger. Once every shard is empty and no lease is out,
	// nothing can come back: watch the ledger then.
	// Crumbs smaller than a SPEND on a shard cannot be spent from one lease,
	// and stay where they are.
	spendableLeft := func() bool {
		for i := range 4 {
			sh, err := f.Ledger.ReadShard(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: i})
			if err != nil {
				t.Fatal(err)
			}
			if sh.Remaining() >= 1000 || sh.Leased > 0 {
				return true
			}
		}
		return false
	}
	for i := 0; ; i++ {
		if !spendableLeft() {
			t.Logf("after %d s more: allowed %d; ledger %+v", i, allowed, f.Check(t, "c"))
			break
		}
		if i > 600 {
			for _, d := range ds {
				bal, _ := d.Balance("c")
				t.Logf("%+v %v", bal, d.Info())
			}
			t.Fatalf("budget still out after 600 s: %+v", f.Check(t, "c"))
		}
		f.Clock.Add(time.Second)
		for _, d := range ds {
			d.Step(ctx)
			allowed += spendAttempts(t, d, "c", 1000, 500)
		}
	}
	if allowed > 86_400_000 {
		t.Fatalf("overspend: allowed %d of 86,400,000", allowed)
	}
	// Let every daemon look at the ledger once more (CampaignRefresh).
	for range 40 {
		f.Clock.Add(time.Second)
		for _, d := range ds {
			d.Step(ctx)
		}
	}
	// Lease calls: the scripts Redis ran, less the demand flushes (a script
	// too), which go on while bids are still being asked for.
	leaseCalls := func() int64 {
		n := evalshaCalls(t, f)
		for _, d := range ds {
			n -= int64(ledgerOpCalls(t, d, "demand"))
		}
		return n
	}
	before := leaseCalls()
	for range 300 {
		f.Clock.Add(time.Second)
		for _, d := range ds {
			d.Step(ctx)
			if dec, _ := d.Spend("c", 1000, ""); dec != pacer.Exhausted {
				t.Fatalf("SPEND after exhaustion = %v, want exhausted", dec)
			}
		}
	}
	if after := leaseCalls(); after != before {
		t.Fatalf("%d lease calls after exhaustion; want none", after-before)
	}
	f.Check(t, "c")
}

// A pause reaches every daemon within one NATS hop; they drop their tokens
// and give their leases back. Without NATS the ledger tells them within a
// lease window.
func TestPauseReachesEveryDaemon(t *testing.T) {
	for _, withNATS := range []bool{true, false} {
		t.Run(map[bool]string{true: "nats", false: "ledger-only"}[withNATS], func(t *testing.T) {
			f := newFixture(t)
			n := startNATS(t)
			f.Campaign(t, "c", 8_640_000_000, 4)
			f.Clock.Set(midnight.Add(12 * time.Hour))
			var ds []*daemon.Daemon
			var bcs []*broadcast.Broadcaster
			for _, h := range []string{"a", "b", "c"} {
				d, b := f.fleetDaemon(t, h, n.URL, daemon.Config{})
				ds, bcs = append(ds, d), append(bcs, b)
			}
			for range 5 {
				f.Clock.Add(time.Second)
				for _, d := range ds {
					d.Step(ctx)
					spendUntilDenied(t, d, "c", 1000)
				}
			}
			if f.Check(t, "c").Leased == 0 {
				t.Fatal("no leases held before the pause")
			}
			if _, err := f.Ledger.SetState(ctx, "c", lease.StatePaused); err != nil {
				t.Fatal(err)
			}
			if withNATS {
				pub, err := broadcast.Connect(n.URL, "pacerctl", nil)
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close()
				if err := pub.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c"}); err != nil {
					t.Fatal(err)
				}
				// The broadcast is a hint: until its refill loop has read
				// the ledger, a daemon answers as before.
				waitFor(t, "every daemon to receive the revoke broadcast", func() bool {
					for _, b := range bcs {
						if b.Stats().Received == 0 {
							return false
						}
					}
					return true
				})
				for _, d := range ds {
					if dec, _ := d.Spend("c", 1, ""); dec == pacer.Exhausted {
						t.Fatal("a broadcast alone made a daemon deny")
					}
				}
				// One tick, not a lease window: the loop reads the ledger.
				f.Clock.Add(100 * time.Millisecond)
			} else {
				// Within one lease window (the settings refresh interval).
				f.Clock.Add(30 * time.Second)
			}
			for _, d := range ds {
				d.Step(ctx)
				if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
					t.Fatalf("SPEND after pause = %v, want exhausted", dec)
				}
			}
			if sh := f.Check(t, "c"); sh.Leased != 0 {
				t.Fatalf("%d micros still leased after the pause; want all released", sh.Leased)
			}
		})
	}
}

func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The reconciler's leader dies: another takes over and settles the leases of a
// crashed daemon, exactly once; the deposed leader's fence is refused.
func TestReconcilerFailover(t *testing.T) {
	f := newFixture(t)
	e, err := embedded.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	f.Campaign(t, "c", 8_640_000_000, 2)
	f.Clock.Set(midnight.Add(12 * time.Hour))

	// A daemon takes leases, then "crashes" (never releases them).
	crashed, err := daemon.New(f.Ledger, daemon.Config{Holder: "crashed", Clock: f.Clock})
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := crashed.Spend("c", 1000, ""); dec != pacer.Allowed || err != nil {
		t.Fatalf("SPEND = %v, %v", dec, err)
	}
	held := f.Check(t, "c").Leased
	if held == 0 {
		t.Fatal("the crashed daemon holds no lease")
	}

	type member struct {
		name   string
		client *clientv3.Client
		cancel context.CancelFunc
		done   chan error
	}
	var members []*member
	for _, name := range []string{"r1", "r2"} {
		m := &member{name: name, client: etcdClient(t, e.Endpoint), done: make(chan error, 1)}
		rc := reconcile.New(f.Ledger, reconcile.Config{Holder: name, Interval: 20 * time.Millisecond, Grace: 4 * time.Second, Clock: f.Clock})
		var rctx context.Context
		rctx, m.cancel = context.WithCancel(ctx)
		go func() { m.done <- rc.Run(rctx, reconcile.NewEtcdElector(m.client, name, 1)) }()
		members = append(members, m)
		defer func() { m.cancel(); <-m.done; m.client.Close() }()
	}
	obs := etcdClient(t, e.Endpoint)
	defer obs.Close()
	var first string
	waitFor(t, "a reconciler leader", func() bool { first, _ = reconcile.Leader(ctx, obs); return first != "" })
	var leader, other *member
	for _, m := range members {
		if m.name == first {
			leader = m
		} else {
			other = m
		}
	}
	// Kill the leader: its etcd session dies with its client.
	leader.cancel()
	leader.client.Close()
	<-leader.done
	leader.done <- nil
	waitFor(t, "the other reconciler to lead", func() bool {
		l, _ := reconcile.Leader(ctx, obs)
		return l == other.name
	})
	// The crashed daemon's leases expire; the new leader settles them.
	f.Clock.Add(time.Minute)
	waitFor(t, "the crashed daemon's leases to be settled", func() bool {
		sh, _, _ := f.Ledger.CheckDay(ctx, "c", day)
		return sh.Leased == 0
	})
	sh := f.Check(t, "c")
	if sh.Lost != held {
		t.Fatalf("lost %d, want exactly the %d the crashed daemon held", sh.Lost, held)
	}
	r, err := f.Ledger.BuildReport(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	if r.Settled != r.Leases {
		t.Fatalf("report: %d leases, %d settled; want each settled once", r.Leases, r.Settled)
	}
	// A deposed leader's late write, with a fence older than the new leader's,
	// is refused.
	_, err = f.Ledger.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: 0}, f.Clock.Now(), time.Second, 1)
	if !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("settle with a stale fence: %v, want ErrFenced", err)
	}
}

// etcd down: no reconciler, but daemons keep serving and leasing from Redis;
// when etcd is back a reconciler is elected again and settles what expired.
func TestEtcdOutage(t *testing.T) {
	f := newFixture(t)
	e, err := embedded.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	f.Campaign(t, "live", 8_640_000_000, 2)
	f.Campaign(t, "dead", 8_640_000_000, 2)
	f.Clock.Set(midnight.Add(12 * time.Hour))

	crashed, err := daemon.New(f.Ledger, daemon.Config{Holder: "crashed", Clock: f.Clock})
	if err != nil {
		t.Fatal(err)
	}
	if dec, _ := crashed.Spend("dead", 1000, ""); dec != pacer.Allowed {
		t.Fatalf("SPEND = %v", dec)
	}
	live := f.daemon(t, "live")

	client := etcdClient(t, e.Endpoint)
	defer client.Close()
	var leading atomic.Bool
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r", Interval: 20 * time.Millisecond, Clock: f.Clock,
		OnLeadership: func(l bool) { leading.Store(l) }})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rc.Run(rctx, reconcile.NewEtcdElector(client, "r", 1)) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "a leader", func() bool { l, _ := reconcile.Leader(ctx, client); return l == "r" && leading.Load() })

	e.Close()
	// A leader keeps its role until its session's TTL runs out (later than
	// the TTL on a loaded machine): wait until it says it has lost it, then
	// let the crashed daemon's lease expire while etcd is down. The live
	// daemon keeps spending and leasing from Redis meanwhile.
	waitFor(t, "the leader to lose its role with etcd down", func() bool { return !leading.Load() })
	var allowed int64
	for range 120 {
		f.Clock.Add(time.Second)
		live.Step(ctx)
		n, _ := spendUntilDenied(t, live, "live", 1000)
		allowed += n
	}
	if allowed == 0 {
		t.Fatal("the live daemon allowed nothing while etcd was down")
	}
	if sh := f.CheckDay(t, "dead", day); sh.Leased == 0 {
		t.Fatal("the crashed daemon's lease was settled while no reconciler could lead")
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "settlement after etcd is back", func() bool {
		sh, _, _ := f.Ledger.CheckDay(ctx, "dead", day)
		return sh.Leased == 0 && sh.Lost > 0
	})
	f.CheckDay(t, "dead", day)
	f.CheckDay(t, "live", day)
}

// offsetClock reads a shared clock shifted by a fixed skew, as a host whose
// clock is off.
type offsetClock struct {
	base *clocktest.Manual
	off  time.Duration
}

func (c offsetClock) Now() time.Time { return c.base.Now().Add(c.off) }

// Two daemons whose clocks differ by 1.8 s (each 0.9 s off, inside the 1 s
// skew bound) and a reconciler on a third clock settle leases aggressively
// over the end of a day with unbounded demand: at every step the fleet has
// allowed no more than the ledger counts as leased or spent, and the day ends
// within its budget.
func TestClockSkewWithinBound(t *testing.T) {
	f := newFixture(t)
	const budget = 86_400_000
	f.Campaign(t, "c", budget, 4)
	f.Clock.Set(midnight.Add(22 * time.Hour))
	cfg := func(h string, off time.Duration) daemon.Config {
		return daemon.Config{Holder: h, Clock: offsetClock{f.Clock, off}, LeaseTiming: daemon.LeaseTiming{SkewBound: time.Second, Grace: 2100 * time.Millisecond}}
	}
	a, err := daemon.New(f.Ledger, cfg("ahead", 900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := daemon.New(f.Ledger, cfg("behind", -900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: offsetClock{f.Clock, 900 * time.Millisecond}, Grace: 2100 * time.Millisecond})
	var allowed int64
	for now := f.Clock.Now(); now.Before(midnight.Add(24*time.Hour + time.Minute)); now = now.Add(time.Second) {
		f.Clock.Set(now)
		a.Step(ctx)
		b.Step(ctx)
		if now.Second()%10 == 0 {
			if err := rc.Pass(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
		// Spend until two seconds before midnight (what comes after would
		// belong to the next day on some clock); keep stepping past midnight
		// so that every lease is released or settled.
		if now.Before(midnight.Add(24*time.Hour - 2*time.Second)) {
			allowed += spendAttempts(t, a, "c", 1000, 3)
			allowed += spendAttempts(t, b, "c", 1000, 3)
		}
		if now.Minute()%10 == 0 && now.Second() == 0 {
			sh := f.Check(t, "c")
			if allowed > sh.Spent+sh.Leased {
				t.Fatalf("%v: allowed %d > spent %d + leased %d", now, allowed, sh.Spent, sh.Leased)
			}
		}
	}
	if allowed > budget {
		t.Fatalf("overspend with skewed clocks: allowed %d > budget %d", allowed, budget)
	}
	sh := f.Check(t, "c")
	if allowed > sh.Spent+sh.Leased {
		t.Fatalf("allowed %d > spent %d + leased %d", allowed, sh.Spent, sh.Leased)
	}
	t.Logf("allowed %d of %d in the day's last two hours (spent %d, lost %d)", allowed, budget, sh.Spent, sh.Lost)
}
