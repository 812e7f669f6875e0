package daemon_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
)

// Issue 10: a campaign of about 100 bids a day, its 150 SPENDs spread at
// random over three hosts, spends nearly all of its budget, never more, and
// never gets -1 while budget is left. Before standing leases, the one-bid
// advance and the bid-sized shard count it spent nothing: every sparse SPEND
// met an empty bucket, and no shard ever held a whole bid until midnight.
func TestSparseCampaignSpendsItsBudget(t *testing.T) {
	const bid = 2_000
	const budget = 100 * bid
	f := newFixture(t)
	f.campaign(t, "sparse", budget, 8)
	if err := f.ledger.SetBid(ctx, "sparse", bid); err != nil { // as pacerctl campaign set --bid does
		t.Fatal(err)
	}
	hosts := []string{"a", "b", "c"}
	daemons := make([]*daemon.Daemon, len(hosts))
	for i, h := range hosts {
		daemons[i] = f.daemon(t, h)
	}
	rng := rand.New(rand.NewPCG(10, 10))
	// 150 SPENDs of one bid at random instants of the day (1.5x the budget).
	var at []time.Duration
	for range 150 {
		at = append(at, time.Duration(rng.Int64N(int64(24*time.Hour-time.Minute))))
	}
	const step = 10 * time.Second
	var allowed int64
	var exhaustedWithBudgetLeft int
	for now := time.Duration(0); now < 24*time.Hour; now += step {
		f.clock.Set(midnight.Add(now))
		for _, d := range daemons {
			d.Step(ctx)
		}
		for _, a := range at {
			if a < now || a >= now+step {
				continue
			}
			d := daemons[rng.IntN(len(daemons))]
			dec, err := d.Spend("sparse", bid, "")
			if err != nil {
				t.Fatal(err)
			}
			switch dec {
			case pacer.Allowed:
				allowed += bid
			case pacer.Exhausted:
				if allowed < budget {
					exhaustedWithBudgetLeft++
				}
			}
		}
	}
	t.Logf("allowed %d of %d micros (%.1f%%); -1 with budget left: %d", allowed, budget, 100*float64(allowed)/budget, exhaustedWithBudgetLeft)
	if allowed > budget {
		t.Fatalf("allowed %d micros, over the budget of %d", allowed, budget)
	}
	if allowed < budget*90/100 {
		t.Fatalf("allowed %d micros, under 90%% of the budget of %d", allowed, budget)
	}
	if exhaustedWithBudgetLeft > 0 {
		t.Fatalf("%d SPENDs were told the day is over while budget was left", exhaustedWithBudgetLeft)
	}
	f.check(t, "sparse")
}
