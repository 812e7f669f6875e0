package daemon_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// Under ledger.durability replicas:1, the replica falls behind (frozen for
// five seconds), then the primary is SIGKILLed mid-load and the replica
// promoted without the writes it missed; the daemons are killed too and
// restarted onto it (as a failover that moves the address would). Every
// grant the daemons spent from was acknowledged by the replica before its
// tokens were spendable (grants made while it lagged failed their WAIT and
// were released unspent), so the promoted ledger knows all of it: the
// clients were never allowed more than it accounts for, nor the budget.
func TestReplicaPromotedUnderReplicasPolicy(t *testing.T) {
	policy := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1, WaitTimeout: 500 * time.Millisecond}
	if lost := replicaFailover(t, policy); lost > 0 {
		t.Fatalf("the promoted ledger lost %d micros of grants the clients spent", lost)
	}
}

// replicaFailover runs the scenario and returns how many micros the clients
// were allowed beyond what the promoted ledger counts as spent.
func replicaFailover(t *testing.T, policy lease.Durability) int64 {
	primary := redistest.StartWith(t, redisproc.Options{TCP: true, Extra: []string{"--repl-diskless-sync-delay", "0"}})
	replica := redistest.StartWith(t, redisproc.Options{ReplicaOf: primary.Addr})
	waitForReplica(t, primary)

	clock := clocktest.At(midnight.Add(24*time.Hour - 20*time.Minute))
	const budget = 20_000_000
	retain := 100 * 365 * 24 * time.Hour
	before := lease.New(primary.Client(), lease.Config{Retention: retain, Durability: policy}, nil)
	if _, err := before.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: "UTC", Curve: "flat", Shards: 4, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := func(l *lease.Ledger, holder string) (*daemon.Daemon, *daemon.Journal) {
		j, left, err := daemon.OpenJournal(filepath.Join(dir, holder+".journal"), nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := daemon.New(l, daemon.Config{Holder: holder, Clock: clock, Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Reclaim(ctx, j, left); err != nil {
			t.Logf("reclaim: %v (the leases it could not reach are settled)", err)
		}
		return d, j
	}
	var allowed int64
	run := func(ds []*daemon.Daemon, seconds int) {
		for range seconds * 10 {
			clock.Add(100 * time.Millisecond)
			for _, d := range ds {
				d.Step(ctx)
				for range 10 {
					if dec, err := d.Spend("c", 2_000, ""); err != nil {
						t.Fatal(err)
					} else if dec == pacer.Allowed {
						allowed += 2_000
					}
				}
			}
		}
	}
	a, ja := start(before, "a")
	b, jb := start(before, "b")
	run([]*daemon.Daemon{a, b}, 20)
	if allowed == 0 {
		t.Fatal("nothing allowed before the failover: the test proves nothing")
	}

	if err := replica.Pause(); err != nil { // the replica falls behind
		t.Fatal(err)
	}
	run([]*daemon.Daemon{a, b}, 5)
	primary.Kill() // and the daemons with it: no release, no journal close
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	ja.Close()
	jb.Close()
	if err := replica.Client().SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	after := lease.New(replica.Client(), lease.Config{Retention: retain}, nil)
	clock.Add(time.Second)
	a2, ja2 := start(after, "a")
	b2, jb2 := start(after, "b")
	defer ja2.Close()
	defer jb2.Close()
	run([]*daemon.Daemon{a2, b2}, 20)
	for _, d := range []*daemon.Daemon{a2, b2} {
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(time.Minute) // every lease past expiry plus grace: settle what nobody released
	day := bucket0(clock)
	for i := range 4 {
		if _, err := after.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: i}, clock.Now(), 5*time.Second, 0); err != nil {
			t.Fatal(err)
		}
	}
	tot, problems, err := after.CheckDay(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("conservation: %s", p)
	}
	t.Logf("%s: clients allowed %d of %d; the promoted ledger counts %d spent (%d settled as lost)", policy, allowed, budget, tot.Spent, tot.Lost)
	if allowed > budget {
		t.Fatalf("overspend: clients allowed %d on a budget of %d", allowed, budget)
	}
	return allowed - tot.Spent
}

func bucket0(c *clocktest.Manual) string { return c.Now().Add(-time.Minute).UTC().Format("2006-01-02") }

// waitForReplica waits (real I/O) until the primary's replica acknowledges
// writes: after a diskless sync the first acknowledgement can take a second.
func waitForReplica(t *testing.T, primary *redistest.Server) {
	t.Helper()
	c := primary.Client()
	conn := c.Conn()
	defer conn.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, _ := c.Info(ctx, "replication").Result()
		if strings.Contains(info, "state=online") {
			if err := conn.Set(ctx, "pacer:test:ack", 1, 0).Err(); err == nil {
				if n, err := conn.Wait(ctx, 1, 200*time.Millisecond).Result(); err == nil && n >= 1 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not come online within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
