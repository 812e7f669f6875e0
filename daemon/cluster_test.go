package daemon_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// A real Redis Cluster of 3 masters and 3 replicas, given as one seed
// (redis+cluster://), under ledger.durability replicas:1: three daemons
// spend six campaigns to exhaustion while the elected reconciler works
// from the per-slot indexes, and one master is SIGKILLed half-way; its
// replica takes over. The clients are never allowed more than a budget
// (counted by the clients, campaign by campaign), the ledger balances, and
// spending resumes on the new master.
func TestClusterMasterKilledUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	rdb, err := lease.NewClient([]string{"redis+cluster://" + cl.Seed()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	policy := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1, WaitTimeout: 200 * time.Millisecond}
	ledger := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour, Durability: policy}, nil)
	const budget = 4_000_000
	const campaigns = 6
	ids := make([]string, campaigns)
	for i := range ids {
		ids[i] = "k" + strconv.Itoa(i)
		if _, err := ledger.PutCampaign(ctx, lease.Campaign{ID: ids[i], DailyMicros: budget, TZ: "UTC", Curve: "morning", Shards: 4, State: lease.StateActive}); err != nil {
			t.Fatal(err)
		}
	}
	// A morning-only curve at 13:00: all of each budget is released, so
	// demand far above it spends it out within the test's steps.
	morning := make([]float64, 24)
	for i := range 12 {
		morning[i] = 1
	}
	curve, err := bucket.NewCurve("morning", morning)
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.At(midnight.Add(13 * time.Hour))
	var ds []*daemon.Daemon
	for _, h := range []string{"a", "b", "c"} {
		d, err := daemon.New(ledger, daemon.Config{Holder: h, Clock: clock, Curves: map[string]*bucket.Curve{"morning": curve}})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	rc := reconcile.New(ledger, reconcile.Config{Clock: clock})
	allowed := map[string]int64{}
	var total int64
	step := func(i int, dt time.Duration) {
		clock.Add(dt)
		for _, d := range ds {
			d.Step(ctx)
			for _, id := range ids {
				for range 20 { // 60,000 micros a second per campaign: demand far above the budget
					dec, err := d.Spend(pacer.CampaignID(id), 1_000, "")
					if err != nil {
						t.Fatal(err)
					}
					if dec == pacer.Allowed {
						allowed[id] += 1_000
						total += 1_000
					}
				}
			}
		}
		if i%5 == 0 {
			rc.Step(ctx, 1) // failures while a master is down are counted and retried
		}
	}
	for i := range 60 {
		step(i, time.Second)
	}
	if total == 0 {
		t.Fatal("nothing allowed before the failover: the test proves nothing")
	}
	// SIGKILL the master of k0's first shard.
	master := masterOf(t, cl, lease.ShardKey{Campaign: "k0", Day: "2026-11-21", Shard: 0}.RedisKeys()[0])
	replica := cl.ReplicaOf(master)
	if replica == nil {
		t.Fatal("the master has no replica")
	}
	master.Kill()
	t.Logf("killed %s (its replica is %s)", master.Addr, replica.Addr)
	before := total
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; cl.Role(replica) != "master"; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not take over within 30s")
		}
		step(60+i, 100*time.Millisecond)
		time.Sleep(50 * time.Millisecond) // real time: the Cluster's node timeout
	}
	// The old master comes back as the new one's replica, so replicas:1 can
	// be met again.
	t.Logf("the replica took over; restarting the old master")
	master.Restart()
	cl.WaitOK(30 * time.Second)
	t.Logf("cluster ok again")
	for i := range 180 { // three minutes more: the budgets are spent out well before
		step(1000+i, time.Second)
	}
	if total == before {
		t.Fatal("nothing allowed after the failover")
	}
	for _, d := range ds {
		if err := d.Close(ctx); err != nil {
			t.Logf("close: %v", err)
		}
	}
	for id, n := range allowed {
		if n > budget {
			t.Errorf("%s: overspend: clients allowed %d on a budget of %d", id, n, budget)
		}
		tot, problems, err := ledger.CheckDay(ctx, id, "2026-11-21")
		if err != nil {
			t.Fatal(err)
		}
		if n > tot.Spent+tot.Leased {
			t.Errorf("%s: clients allowed %d, the ledger counts %d spent and %d leased: it lost grants", id, n, tot.Spent, tot.Leased)
		}
		for _, p := range problems {
			t.Errorf("%s: conservation: %s", id, p)
		}
	}
	if total < campaigns*budget*9/10 {
		t.Errorf("clients allowed %d of %d: the campaigns were not spent out, so overspend was not tested", total, campaigns*budget)
	}
	t.Logf("clients allowed %d in all (%d after the failover) on 6 budgets of %d", total, total-before, budget)
}

// masterOf returns the node serving key's slot.
func masterOf(t *testing.T, cl *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	addr, err := cl.Client().MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes {
		if n.Addr == addr.Options().Addr {
			return n
		}
	}
	t.Fatalf("no node at %s", addr.Options().Addr)
	return nil
}
