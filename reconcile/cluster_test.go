package reconcile_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// On a Redis Cluster the indexes are one key per slot. A reconciler that
// knows 10 campaigns reads the index keys of the slots their shards of
// today and yesterday hash to (at most 10 × 8 × 2) and a rotating slice of
// the others (55 a step at the defaults, so each slot once per sweep
// period), not all 16,384 of each kind: its step costs hundreds of
// commands, not 32,768. A dead daemon's lease is still found and settled.
func TestClusterIndexReadsScaleWithCampaigns(t *testing.T) {
	const n = 10
	cl := redistest.StartCluster(t, 3, 0)
	client := cl.Client()
	counter := &cmdCounter{}
	client.AddHook(counter)
	ledger := lease.New(client, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	for i := range n {
		c, err := ledger.PutCampaign(ctx, lease.Campaign{ID: "c" + strconv.Itoa(i), DailyMicros: 86_400_000_000, TZ: "UTC",
			Curve: "flat", Shards: 8, State: lease.StateActive})
		if err == nil {
			_, err = ledger.OpenDay(ctx, c, day, midnight, midnight)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	clock := clocktest.At(midnight.Add(12 * time.Hour))
	rc := reconcile.New(ledger, reconcile.Config{Clock: clock, Grace: 4 * time.Second})
	for range 2 { // the term's full pass, then a step
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	// Index reads: 2 × (160 known slots + 55 rotating); a sweep slice of
	// one campaign (35); the change stream (1).
	const most = 2*(n*8*2+55) + 35 + 10
	for i := range 3 {
		counter.n.Store(0)
		clock.Add(time.Second)
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d at %d campaigns: %d Redis commands", i, n, counter.n.Load())
		if got := counter.n.Load(); got > most {
			t.Fatalf("step %d: %d Redis commands at %d campaigns, want at most %d", i, got, n, most)
		}
	}
	now := clock.Now()
	k := lease.ShardKey{Campaign: "c3", Day: day, Shard: 5}
	g, err := ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "dead", Holder: "h", Want: 1_000_000,
		Expiry: now.Add(10 * time.Second), Now: now, Pace: lease.Pace{Now: 500_000_000, Cap: 510_000_000},
		Grace: 4 * time.Second, DayStart: midnight})
	if err != nil || g.Granted == 0 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	clock.Add(15 * time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if sh, err := ledger.ReadShard(ctx, k); err != nil || sh.Leased != 0 || sh.Lost != g.Granted {
		t.Fatalf("the dead daemon's lease is not settled: %+v, %v", sh, err)
	}
}
