package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// Under replicas:1 a grant the replica did not acknowledge fails with
// ErrNotDurable but says how much it granted, so it can be released.
func TestLedgerReplicasGrantNotAcknowledged(t *testing.T) {
	master := redistest.StartWith(t, redisproc.Options{TCP: true, Extra: []string{"--repl-diskless-sync-delay", "0"}})
	replica := redistest.StartWith(t, redisproc.Options{ReplicaOf: master.Addr})
	waitReplicas(t, master.Client(), 1)
	pol := lease.Durability{Policy: lease.PolicyReplicas, Replicas: 1, WaitTimeout: 200 * time.Millisecond}
	l := lease.New(master.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour, Durability: pol}, nil)
	c := lease.Campaign{ID: "c", DailyMicros: 1_000_000, TZ: "UTC", Curve: "flat", Shards: 1, State: lease.StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, "2026-11-21", t0, t0); err != nil {
		t.Fatal(err)
	}
	k := lease.ShardKey{Campaign: "c", Day: "2026-11-21", Shard: 0}
	req := func(id string) lease.GrantRequest {
		return lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h", Want: 1000, Expiry: t0.Add(12*time.Hour + 30*time.Second),
			Now: t0.Add(12 * time.Hour), Pace: lease.Pace{Now: ppb / 2, Cap: ppb}, Grace: 4 * time.Second, DayStart: t0}
	}
	if g, err := l.Grant(ctx, req("a")); err != nil || g.Granted != 1000 {
		t.Fatalf("grant acknowledged: %+v, %v", g, err)
	}
	replica.Kill()
	g, err := l.Grant(ctx, req("b"))
	if !errors.Is(err, lease.ErrNotDurable) || g.Granted != 1000 {
		t.Fatalf("grant not acknowledged: %+v, %v", g, err)
	}
	sh, err := l.Release(ctx, k, "b", g.Granted, t0.Add(12*time.Hour))
	if !errors.Is(err, lease.ErrNotDurable) {
		t.Fatalf("release: %v", err)
	}
	if sh, err = l.ReadShard(ctx, k); err != nil || sh.Leased != 1000 || sh.Spent != 0 {
		t.Fatalf("after releasing the unacknowledged grant: %+v, %v", sh, err)
	}
}
