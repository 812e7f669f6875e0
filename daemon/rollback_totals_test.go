package daemon_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// A shard rolled back over leases granted and given back while its daemon
// runs: the daemon sees the loss on its next call, re-asserts the leases it
// holds and its run's totals (what it was granted, what it gave back), and
// the shard counts what its clients spent from the forgotten leases. The
// day then allows no more than its budget, counted by the clients. With
// only the held leases re-asserted, a 90-s window lost of a 10,000,000 day
// let the clients be allowed 11,450,000.
func TestRollbackOverReleasedLeasesCostsNoOverspend(t *testing.T) {
	f := newFixture(t)
	const budget = 10_000_000
	// A curve releasing the whole day in its first hour, so that the
	// day can be spent out in minutes.
	w := make([]float64, 24)
	w[0] = 1
	early, err := bucket.NewCurve("early", w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: "UTC", Curve: "early", Shards: 1, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(40 * time.Minute))
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "a", Clock: f.Clock, Curves: map[string]*bucket.Curve{"early": early}, Logger: dbgLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	var allowed int64
	run := func(seconds int) {
		for range seconds {
			f.Clock.Add(time.Second)
			d.Step(ctx)
			n, _ := spendUntilDenied(t, d, "c", 1_000)
			allowed += n
		}
	}
	run(30)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	snap := f.Redis.Snapshot(k.RedisKeys()...)
	before := allowed
	t.Logf("before the window %d", before)
	run(90) // leases granted, renewed and given back: then forgotten
	lostWindow := allowed - before
	f.Redis.Restore(snap, k.RedisKeys()...)
	run(1500) // past the curve's hour: every micro it releases is asked for
	if info(d, "ledger_lost_writes") == 0 {
		t.Fatal("the daemon did not notice that the shard lost writes")
	}
	t.Logf("allowed %d of %d (%d in the lost window)", allowed, budget, lostWindow)
	if lostWindow < budget/50 {
		t.Fatalf("only %d allowed in the lost window: the scenario lost too little to test", lostWindow)
	}
	if allowed > budget {
		t.Fatalf("clients were allowed %d on a budget of %d: %d granted twice", allowed, budget, allowed-budget)
	}
	if allowed < budget*9/10 {
		t.Fatalf("clients were allowed only %d of %d", allowed, budget)
	}
}
