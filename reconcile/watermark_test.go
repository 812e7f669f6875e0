package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/internal/ledgertest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// memWatermarks is reconcile.MemWatermarks whose Store fails while
// failStore is set, as an etcd that is down would.
type memWatermarks struct {
	reconcile.MemWatermarks
	failStore atomic.Bool
}

func (s *memWatermarks) Store(ctx context.Context, master string, w lease.Watermark) error {
	if s.failStore.Load() {
		return errors.New("store down")
	}
	return s.MemWatermarks.Store(ctx, master, w)
}

// events records what a reconciler broadcasts.
type events struct {
	mu  sync.Mutex
	got []pacer.Event
}

func (e *events) Publish(ev pacer.Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
	return nil
}

func (e *events) lostWrites() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.got {
		if ev.Kind == pacer.EventLostWrites {
			out = append(out, ev.Campaign+"/"+ev.Day)
		}
	}
	return out
}

// startEtcd starts a real etcd and returns a client of it.
func startEtcd(t *testing.T) (*embedded.Etcd, func() *clientv3.Client) {
	t.Helper()
	e, err := embedded.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// snapshotAll DUMPs every key of a Redis: a backup.
func snapshotAll(t *testing.T, c *redis.Client) map[string]string {
	t.Helper()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		v, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// restoreAll makes a Redis hold exactly the snapshot: restored from backup.
func restoreAll(t *testing.T, c *redis.Client, snap map[string]string) {
	t.Helper()
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for k, v := range snap {
		if err := c.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// metric reads one of a reconciler's metrics.
func metric(t *testing.T, rc *reconcile.Reconciler, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(rc.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// spendOnLedger leases amount on shard k as a daemon would, and releases
// it with unused micros back: the daemon spent amount - unused.
func spendOnLedger(t *testing.T, f *fixture, k lease.ShardKey, id string, amount, unused int64) {
	t.Helper()
	now := f.Clock.Now()
	g, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h", Want: amount,
		Expiry: now.Add(30 * time.Second), Now: now, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
		Grace: 5 * time.Second, DayStart: midnight})
	if err != nil || g.Granted != amount {
		t.Fatalf("grant %s: %+v, %v", id, g, err)
	}
	if _, err := f.Ledger.Release(ctx, k, id, unused, now); err != nil {
		t.Fatal(err)
	}
}

// grantErr asks shard k for a lease and returns the ledger's error.
func grantErr(f *fixture, k lease.ShardKey, id string) error {
	now := f.Clock.Now()
	_, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: id, Holder: "fresh", Want: 1000,
		Expiry: now.Add(30 * time.Second), Now: now, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
		Grace: 5 * time.Second, DayStart: midnight})
	return err
}

const lateInDay = 24*time.Hour - 10*time.Minute

// Redis restored from a backup taken before a reconciler pass, under
// daemons that are all new (no history to compare): the next pass finds the
// watermark behind the one recorded in etcd, freezes every shard of the
// open day (grants refused), broadcasts lost-writes, counts it, and
// CheckDay names the loss; it is found once. What it cannot give back: the
// micros spent in the lost window are grantable again once the freeze ends.
func TestWatermarkDetectsARestoreUnderNewDaemons(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 10_000_000, 4)
	f.Clock.Set(midnight.Add(lateInDay))
	_, client := startEtcd(t)
	pub := &events{}
	rc := reconcile.New(f.Ledger, reconcile.Config{Holder: "r1", Clock: f.Clock, Publisher: pub,
		Watermarks: reconcile.NewEtcdWatermarks(client()), LeaseWindow: 30 * time.Second, Grace: 4 * time.Second})
	if err := rc.Pass(ctx, 1); err != nil { // opens today; the watermark is 1
		t.Fatal(err)
	}
	rdb := f.Redis.Client()
	backup := snapshotAll(t, rdb)

	// The lost window: two daemons lease, spend part and give the rest back.
	shard := func(i int) lease.ShardKey { return lease.ShardKey{Campaign: "c", Day: day, Shard: i} }
	spendOnLedger(t, f, shard(0), "A-1", 400_000, 100_000)
	spendOnLedger(t, f, shard(1), "B-1", 300_000, 0)
	f.Clock.Add(time.Second)
	if err := rc.Step(ctx, 1); err != nil { // the watermark is 2, recorded
		t.Fatal(err)
	}
	before := f.Check(t, "c")
	if got := pub.lostWrites(); len(got) != 0 || metric(t, rc, "pacer_ledger_rollbacks_total") != 0 {
		t.Fatalf("a rollback found before any: %v", got)
	}

	restoreAll(t, rdb, backup)
	after, err := f.Ledger.DayTotals(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	regained := after.Remaining() - before.Remaining()
	t.Logf("spent in the lost window %d; the restored ledger can grant %d more than before", before.Spent, regained)
	if before.Spent != 600_000 || regained != before.Spent {
		t.Fatalf("spent %d before the restore, %d regained: want 600,000 both", before.Spent, regained)
	}

	f.Clock.Add(time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := pub.lostWrites(); len(got) != 1 || got[0] != "c/"+day {
		t.Fatalf("lost-writes broadcasts %v; want one for c/%s", got, day)
	}
	if n := metric(t, rc, "pacer_ledger_rollbacks_total"); n != 1 {
		t.Fatalf("rollbacks counted: %v; want 1", n)
	}
	if n := metric(t, rc, "pacer_ledger_frozen_days"); n != 1 {
		t.Fatalf("frozen days: %v; want 1", n)
	}
	for i := range 4 {
		if err := grantErr(f, shard(i), "fresh-"+string(rune('0'+i))); !errors.Is(err, lease.ErrShardFrozen) {
			t.Fatalf("grant on shard %d after the rollback was found: %v; want ErrShardFrozen", i, err)
		}
	}
	_, problems, err := f.Ledger.CheckDay(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	named := map[int]bool{}
	for _, p := range problems {
		if strings.Contains(p.What, "lost acknowledged writes") && strings.Contains(p.What, "watermark") {
			named[p.Shard.Shard] = true
		}
	}
	if len(named) != 4 {
		t.Fatalf("CheckDay names the loss on shards %v; want all 4 (problems %v)", named, problems)
	}

	// Found once: the next passes record the new watermark and find nothing.
	for range 3 {
		f.Clock.Add(time.Second)
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := pub.lostWrites(); len(got) != 1 || metric(t, rc, "pacer_ledger_rollbacks_total") != 1 {
		t.Fatalf("after more passes: broadcasts %v, rollbacks %v; want the one", got, metric(t, rc, "pacer_ledger_rollbacks_total"))
	}
	// The freeze lasts a lease window plus grace; then grants resume, and
	// what was spent in the lost window is granted again.
	f.Clock.Add(35 * time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := metric(t, rc, "pacer_ledger_frozen_days"); n != 0 {
		t.Fatalf("frozen days after the freeze: %v", n)
	}
	if err := grantErr(f, shard(0), "fresh-after"); err != nil {
		t.Fatalf("grant after the freeze: %v", err)
	}
}

// Many passes with traffic, an honest Redis restart (AOF, fsync always),
// a leader change (a new term, a new process's store) and a deposed
// leader's late pass: the watermark never reports a rollback, and the
// deposed leader cannot advance it.
func TestWatermarkNoFalseAlarm(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 10_000_000, 4)
	f.Clock.Set(midnight.Add(lateInDay))
	_, client := startEtcd(t)
	pub := &events{}
	cfg := reconcile.Config{Clock: f.Clock, Publisher: pub, LeaseWindow: 30 * time.Second, Grace: 4 * time.Second}
	el1, el2 := reconcile.NewEtcdElector(client(), "r1", 5), reconcile.NewEtcdElector(client(), "r2", 5)
	lead1, err := el1.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Holder, cfg.Watermarks = "r1", reconcile.NewEtcdWatermarks(client())
	rc1 := reconcile.New(f.Ledger, cfg)
	d := f.daemon(t, "d1")
	var allowed int64
	passes := func(rc *reconcile.Reconciler, fence int64, n int) {
		t.Helper()
		for i := range n {
			d.Step(ctx)
			allowed += spendAttempts(t, d, "c", 1000, 3)
			if i == n/2 {
				f.Redis.Restart()
				if err := f.Ledger.Ping(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := rc.Step(ctx, fence); err != nil {
				t.Fatalf("pass %d: %v", i, err)
			}
			f.Clock.Add(time.Second)
		}
	}
	passes(rc1, lead1.Fence, 20)
	if err := el1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lead2, err := el2.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Holder, cfg.Watermarks = "r2", reconcile.NewEtcdWatermarks(client())
	rc2 := reconcile.New(f.Ledger, cfg)
	passes(rc2, lead2.Fence, 20)
	if err := rc1.Step(ctx, lead1.Fence); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("the deposed leader's pass: %v; want ErrFenced", err)
	}
	passes(rc2, lead2.Fence, 5)
	for _, rc := range []*reconcile.Reconciler{rc1, rc2} {
		if n := metric(t, rc, "pacer_ledger_rollbacks_total"); n != 0 {
			t.Fatalf("rollbacks counted: %v", n)
		}
	}
	if got := pub.lostWrites(); len(got) != 0 {
		t.Fatalf("lost-writes broadcast without a rollback: %v", got)
	}
	if allowed == 0 {
		t.Fatal("the daemon spent nothing: no traffic between the passes")
	}
	t.Logf("45 passes, %d micros allowed between them", allowed)
	f.Check(t, "c")
	_ = el2.Resign(ctx)
}

// A record the store failed to write leaves Redis ahead of it: not a
// rollback. A record the store has that Redis lost entirely (the key gone)
// is one.
func TestWatermarkAheadIsNotBehind(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 1_000_000, 2)
	f.Clock.Set(midnight.Add(lateInDay))
	store := &memWatermarks{}
	pub := &events{}
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock, Publisher: pub, Watermarks: store})
	for i := range 6 {
		store.failStore.Store(i%2 == 1)
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := pub.lostWrites(); len(got) != 0 {
		t.Fatalf("Redis ahead of the record read as a rollback: %v", got)
	}
	if err := f.Redis.Client().Del(ctx, "pacer:watermark").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := pub.lostWrites(); len(got) != 1 {
		t.Fatalf("the watermark key lost: broadcasts %v; want one", got)
	}
}

// What the watermark cannot see: a restore to a copy taken after the last
// pass. Nothing is found, and what was spent meanwhile is grantable again;
// the window is at most one pass interval of writes.
func TestWatermarkCannotSeeWritesAfterTheLastPass(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 10_000_000, 4)
	f.Clock.Set(midnight.Add(lateInDay))
	store := &memWatermarks{}
	pub := &events{}
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock, Publisher: pub, Watermarks: store})
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rdb := f.Redis.Client()
	backup := snapshotAll(t, rdb)
	spendOnLedger(t, f, lease.ShardKey{Campaign: "c", Day: day, Shard: 0}, "A-1", 400_000, 100_000)
	restoreAll(t, rdb, backup)
	f.Clock.Add(time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := pub.lostWrites(); len(got) != 0 {
		t.Fatalf("found %v: the bound in the README is too loose", got)
	}
	if tot := f.Check(t, "c"); tot.Spent != 0 {
		t.Fatalf("spent %d after the restore; want the lost 300,000 forgotten", tot.Spent)
	}
}

// On a Cluster each master has its own watermark: a master restored from
// its backup has only its own shards frozen; the other master's keep
// granting.
func TestWatermarkFreezesOnlyTheRestoredMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ledger := lease.New(cl.Client(), lease.Config{Retention: ledgertest.Retention}, nil)
	f := &fixture{&ledgertest.Fixture{Ledger: ledger, Clock: clocktest.At(midnight.Add(lateInDay)), Day: day}}
	f.Campaign(t, "c", 8_000_000, 8)
	pub := &events{}
	rc := reconcile.New(ledger, reconcile.Config{Clock: f.Clock, Publisher: pub, Watermarks: &memWatermarks{}})
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}
	masters, err := ledger.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters %+v, %v", masters, err)
	}
	restored := masters[0]
	var node *redis.Client
	for _, n := range cl.Nodes {
		if n.Addr == restored.Addr {
			node = n.Client()
		}
	}
	backup := snapshotAll(t, node)
	f.Clock.Add(time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	restoreAll(t, node, backup)
	f.Clock.Add(time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := pub.lostWrites(); len(got) != 1 {
		t.Fatalf("broadcasts %v; want one for the day", got)
	}
	var frozen, open int
	for i := range 8 {
		k := lease.ShardKey{Campaign: "c", Day: day, Shard: i}
		err := grantErr(f, k, "g"+string(rune('0'+i)))
		switch {
		case restored.Owns(k) && errors.Is(err, lease.ErrShardFrozen):
			frozen++
		case !restored.Owns(k) && err == nil:
			open++
		default:
			t.Errorf("shard %d (on the restored master: %v): grant %v", i, restored.Owns(k), err)
		}
	}
	if frozen == 0 || open == 0 {
		t.Fatalf("%d shards frozen, %d granting: want both kinds", frozen, open)
	}
}

// The etcd store writes only over what it last read: a deposed leader's
// late record cannot move a newer one back.
func TestWatermarkEtcdStoreCompares(t *testing.T) {
	// The README names the prefix, and the etcd role it documents (the
	// election's prefix) must cover it, outside the election's directory.
	if p := reconcile.WatermarkPrefix; p != "/pacer/reconciler-watermark/" || !strings.HasPrefix(p, reconcile.ElectionPrefix) ||
		strings.HasPrefix(p, reconcile.ElectionPrefix+"/") {
		t.Fatalf("WatermarkPrefix %q", p)
	}
	_, client := startEtcd(t)
	a, b := reconcile.NewEtcdWatermarks(client()), reconcile.NewEtcdWatermarks(client())
	if _, ok, err := a.Load(ctx, "redis"); ok || err != nil {
		t.Fatalf("empty etcd: %v %v", ok, err)
	}
	if _, _, err := b.Load(ctx, "redis"); err != nil {
		t.Fatal(err)
	}
	if err := b.Store(ctx, "redis", lease.Watermark{Epoch: 9, Counter: 3}); err != nil {
		t.Fatal(err)
	}
	if err := a.Store(ctx, "redis", lease.Watermark{Epoch: 9, Counter: 2}); !errors.Is(err, reconcile.ErrWatermarkConflict) {
		t.Fatalf("a stale store's write: %v; want ErrWatermarkConflict", err)
	}
	if err := b.Store(ctx, "redis", lease.Watermark{Epoch: 9, Counter: 4}); err != nil {
		t.Fatalf("the store that wrote last writes again: %v", err)
	}
	w, ok, err := a.Load(ctx, "redis")
	if err != nil || !ok || w != (lease.Watermark{Epoch: 9, Counter: 4}) {
		t.Fatalf("load %v %v %v", w, ok, err)
	}
	if err := a.Store(ctx, "redis", lease.Watermark{Epoch: 9, Counter: 5}); err != nil {
		t.Fatalf("after a load: %v", err)
	}
}

// The leading reconciler shows its etcd session's remaining TTL (a real
// etcd, election.ttl 5 s): above 0 and at most the TTL while it leads,
// 0 once it stopped.
func TestElectionSessionTTLGauge(t *testing.T) {
	f := newFixture(t)
	_, client := startEtcd(t)
	leading := make(chan bool, 2)
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock, Holder: "r1",
		OnLeadership: func(l bool) { leading <- l }})
	const name = "pacer_reconciler_election_session_ttl_seconds"
	if got := metric(t, rc, name); got != 0 {
		t.Fatalf("%s before any term: %v", name, got)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rc.Run(rctx, reconcile.NewEtcdElector(client(), "r1", 5)) }()
	<-leading
	var got float64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = metric(t, rc, name); got > 0 {
			break
		}
	}
	if got <= 0 || got > 5 {
		t.Errorf("%s while leading: %v, want in (0, 5]", name, got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := metric(t, rc, name); got != 0 {
		t.Errorf("%s after the term: %v, want 0", name, got)
	}
}
