package reconcile_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/redis/go-redis/v9"
)

// idleStepMost bounds an idle step's commands on a Cluster at the defaults
// with campaigns of one shard (n of them: a sweep slice of ⌈n/300⌉): the 64
// anchors, the change stream, 55 rotating slots' reanchor calls, the
// sweep's 3 reads and a survey a campaign.
func idleStepMost(n int) int64 { return int64(64 + 1 + 55 + ((n+299)/300)*4 + 4) }

// edgeShards stores and opens, on the Cluster behind ledger, campaigns of
// one shard whose shards hash to the first and the last slots each master
// serves: a slot just above a master's first one is one whose anchor group
// (slot / 256) may start on the master before, so that its scripts record
// it in the next group's anchor.
func edgeShards(t *testing.T, cc *redis.ClusterClient, ledger *lease.Ledger) []lease.ShardKey {
	t.Helper()
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var windows [][2]int
	for _, r := range ranges {
		windows = append(windows, [2]int{int(r.Start), int(r.Start) + 15}, [2]int{int(r.End) - 15, int(r.End)})
	}
	var shards []lease.ShardKey
	for _, w := range windows {
		for i := 0; ; i++ {
			k := lease.ShardKey{Campaign: "e" + strconv.Itoa(w[0]) + "-" + strconv.Itoa(i), Day: day, Shard: 0}
			if s := lease.Slot(k.String()); s < w[0] || s > w[1] {
				continue
			}
			c, err := ledger.PutCampaign(ctx, lease.Campaign{ID: k.Campaign, DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 1, State: lease.StateActive})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ledger.OpenDay(ctx, c, day, midnight, midnight); err != nil {
				t.Fatal(err)
			}
			shards = append(shards, k)
			break
		}
	}
	return shards
}

// grantDead grants a lease on k that nobody renews or releases.
func grantDead(t *testing.T, ledger *lease.Ledger, k lease.ShardKey, id string, now time.Time) int64 {
	t.Helper()
	g, err := ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h", Want: 1_000_000,
		Expiry: now.Add(10 * time.Second), Now: now, Pace: lease.Pace{Now: 500_000_000, Cap: 510_000_000},
		Grace: 4 * time.Second, DayStart: midnight})
	if err != nil || g.Granted == 0 {
		t.Fatalf("grant %s on %s: %+v, %v", id, k, g, err)
	}
	return g.Granted
}

// settled checks that the leases on k are all settled, lost for want.
func settled(t *testing.T, ledger *lease.Ledger, k lease.ShardKey, want int64) {
	t.Helper()
	if sh, err := ledger.ReadShard(ctx, k); err != nil || sh.Leased != 0 || sh.Lost != want {
		t.Fatalf("%s (slot %d): the dead daemon's leases are not settled: %+v, %v", k, lease.Slot(k.String()), sh, err)
	}
}

// On a Cluster the reconciler finds the slots with work through the 64
// anchors the ledger scripts keep: a dead daemon's lease is settled by the
// first step after its expiry plus the grace, wherever its shard hashes
// (the first and last slots of each master), while an idle step costs
// about 125 commands, not 2 × 16,384 index reads; once settled, the
// anchors are empty again. Without the anchors the step after the expiry
// reads only its rotating slice of slots and leaves the leases unsettled.
func TestClusterStaleLeaseOnAnySlotIsSettled(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cc := cl.Client()
	counter := &redistest.Counter{}
	cc.AddHook(counter)
	ledger := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	shards := edgeShards(t, cc, ledger)
	clock := clocktest.At(midnight.Add(12 * time.Hour))
	rc := reconcile.New(ledger, reconcile.Config{Clock: clock, Grace: 4 * time.Second})
	step := func(what string, most int64) {
		t.Helper()
		counter.Reset()
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := counter.N()
		t.Logf("%s: %d Redis commands", what, got)
		if most > 0 && got > most {
			t.Fatalf("%s: %d Redis commands, want at most %d", what, got, most)
		}
	}
	step("the full pass", 0)
	step("the term's first step (every slot reanchored)", 0)
	clock.Add(time.Second)
	step("an idle step", idleStepMost(len(shards)))
	granted := make([]int64, len(shards))
	for i, k := range shards {
		granted[i] = grantDead(t, ledger, k, "dead-"+strconv.Itoa(i), clock.Now())
	}
	clock.Add(time.Second)
	step("a step before the leases' expiry", idleStepMost(len(shards)))
	clock.Add(14 * time.Second) // past the expiry (10 s) and the grace (4 s)
	step("the step after the expiry", idleStepMost(len(shards))+int64(len(shards))*12)
	for i, k := range shards {
		settled(t, ledger, k, granted[i])
	}
	if left, err := ledger.AnchoredSlots(ctx, clock.Now().Add(time.Hour)); err != nil || len(left) != 0 {
		t.Fatalf("anchored slots once settled: %v, %v; want none", left, err)
	}
}

// A master is SIGKILLed and its replica takes over: the anchors, written in
// the same scripts as the index entries, are on the new master with them,
// and a lease granted before the failover and one granted after are both
// settled once expired.
func TestClusterAnchorsSurviveAFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	cc := cl.Client()
	ledger := lease.New(cc, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	shards := edgeShards(t, cc, ledger)
	clock := clocktest.At(midnight.Add(12 * time.Hour))
	rc := reconcile.New(ledger, reconcile.Config{Clock: clock, Grace: 4 * time.Second})
	for range 2 {
		// A loaded machine's late cluster-bus pings can mark a master
		// failing for a moment (node timeout 1 s, for a fast failover
		// below): the reconciler retries at its next pass, and so does this.
		for deadline := time.Now().Add(time.Minute); ; {
			err := rc.Step(ctx, 1)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "CLUSTERDOWN") || time.Now().After(deadline) {
				t.Fatal(err)
			}
			cl.WaitOK(time.Minute)
			cc.ReloadState(ctx)
		}
	}
	k := shards[2] // the second master's first slots
	before := grantDead(t, ledger, k, "before", clock.Now())
	m, err := cc.MasterForKey(ctx, k.RedisKeys()[0])
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.Do(ctx, "wait", 1, 60_000).Int(); err != nil || n != 1 { // the grant is on the replica
		t.Fatalf("WAIT for the replica: %d replicas, %v", n, err)
	}
	var master *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr == m.Options().Addr {
			master = n
		}
	}
	replica := cl.ReplicaOf(master)
	master.Kill()
	deadline := time.Now().Add(time.Minute)
	for cl.Role(replica) != "master" {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not take over within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl.WaitOK(time.Minute)
	cc.ReloadState(ctx)
	var after int64
	for try := 0; ; try++ { // the client's slot map may still name the dead master
		g, err := ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "after", Holder: "h", Want: 1_000_000,
			Expiry: clock.Now().Add(10 * time.Second), Now: clock.Now(), Pace: lease.Pace{Now: 500_000_000, Cap: 510_000_000},
			Grace: 4 * time.Second, DayStart: midnight})
		if err == nil {
			after = g.Granted
			break
		}
		if try == 300 {
			t.Fatalf("grant after the failover, 30 s on: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
		cc.ReloadState(ctx)
	}
	clock.Add(15 * time.Second)
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	settled(t, ledger, k, before+after)
}
