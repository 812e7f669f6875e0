package daemon_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
)

// Issue 15: the socket server decides a batch of pipelined SPENDs at one
// reading of the daemon's clock (SpendAt), so a SPEND may be decided at an
// instant up to a batch old. Over a day of saturating demand on two hosts,
// half the SPENDs decided by SpendAt at readings up to 2 ms stale (far more
// than a batch takes) are never allowed more than the budget, the campaign
// still spends it, and the ledger balances. (The bucket decides an instant
// earlier than one it has seen at that later one, so a stale reading adds
// no drip and does not reach past a lease's end.)
func TestSpendAtStaleReadingsKeepTheBudget(t *testing.T) {
	const bid = 1_000
	const budget = 2_000 * bid
	f := newFixture(t)
	f.Campaign(t, "c", budget, 4)
	ds := []*daemon.Daemon{f.daemon(t, "a"), f.daemon(t, "b")}
	rng := rand.New(rand.NewPCG(15, 15))
	var allowed, stale int64
	const step = 10 * time.Second
	for now := time.Duration(0); now < 24*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		for _, d := range ds {
			d.Step(ctx)
		}
		for k := range 8 { // ~3x the pace of 2,000 bids a day, in bursts
			d := ds[k%len(ds)]
			var dec pacer.Decision
			var err error
			if k%2 == 0 {
				at := d.Now().Add(-time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
				dec, _, err = d.SpendAt(at, "c", bid, "")
				stale++
			} else {
				dec, err = d.Spend("c", bid, "")
			}
			if err != nil {
				t.Fatal(err)
			}
			if dec == pacer.Allowed {
				allowed += bid
			}
		}
	}
	t.Logf("allowed %d of %d micros (%.2f%%), %d SPENDs decided at stale readings", allowed, budget, 100*float64(allowed)/budget, stale)
	if allowed > budget {
		t.Fatalf("allowed %d micros, over the budget of %d", allowed, budget)
	}
	if allowed < budget*95/100 {
		t.Fatalf("allowed %d micros, under 95%% of the budget of %d: stale readings starved the campaign", allowed, budget)
	}
	f.Check(t, "c")
}
