package export_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// On a Redis Cluster (3 masters, a replica each, the ledger writing with
// WAIT for one replica), the master holding a shard's stream is SIGKILLed
// between a batch's commit and its XACK; its replica takes over and the
// ledger writes on. Passes fail while the slot moves, then the export
// catches up, the batch delivered again skipped: every event once.
func TestClusterMasterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	rdb := cl.Client()
	l := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour,
		Durability: lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1, WaitTimeout: time.Second}}, nil)
	f := &fixture{ledger: l, db: openDB(t, pg.DB(t))}
	f.open(t, "cl", 4)
	f.spend(t, "cl", 4, 10, "a", t0.Add(9*time.Hour))
	key := lease.ShardKey{Campaign: "cl", Day: day, Shard: 0}.AuditKey()
	node, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var master *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr == node.Options().Addr {
			master = n
		}
	}
	replica := cl.ReplicaOf(master)
	if master == nil || replica == nil {
		t.Fatalf("no master (%v) or replica (%v) for %s", master, replica, key)
	}
	// The first batch (shard 0's: streams go in shard order) is committed,
	// and its master dies before the XACK.
	killed := false
	e := export.New(rdb, l, f.db, export.Config{Consumer: "one", Batch: 7, Step: func(_ context.Context, step string) error {
		if step == "committed" && !killed {
			killed = true
			master.Kill()
		}
		return nil
	}}, nil, nil)
	if _, err := e.Pass(ctx); err == nil || !killed {
		t.Fatalf("the pass that lost its master: %v (killed: %v)", err, killed)
	}
	deadline := time.Now().Add(60 * time.Second) // a node timeout of 1 s, on a loaded machine
	for cl.Role(replica) != "master" {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not take over within 60 s")
		}
		time.Sleep(50 * time.Millisecond) // real time: the Cluster's node timeout
	}
	master.Restart()
	cl.WaitOK(60 * time.Second)
	// The client learns the new slot map from an error (MOVED) or two.
	for i := 0; rdb.XLen(ctx, key).Err() != nil; i++ {
		if i == 50 {
			t.Fatalf("the Cluster client does not reach %s after the failover: %v", key, rdb.XLen(ctx, key).Err())
		}
	}
	f.spend(t, "cl", 4, 10, "b", t0.Add(10*time.Hour))
	var err2 error
	for range 50 { // the client learns the new slot map after an error or two
		if _, err2 = e.Pass(ctx); err2 == nil {
			break
		}
	}
	if err2 != nil {
		t.Fatal(err2)
	}
	passes(t, e)
	f.exact(t)
}
