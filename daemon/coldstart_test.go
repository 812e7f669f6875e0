package daemon_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer"
)

// Issue 10: a fresh daemon under saturating demand reaches at least 80% of
// the campaign's pace within 2 s of its first SPEND. Before, its first
// leases were sized from a demand average that starts at zero: ~2.5% of the
// pace for the first ~25 s.
func TestColdStartReachesPaceWithinTwoSeconds(t *testing.T) {
	f := newFixture(t)
	const pace = 100_000 // micros a second
	f.campaign(t, "c", pace*86_400, 8)
	f.clock.Set(midnight.Add(12*time.Hour + 10*time.Minute))
	d := f.daemon(t, "fresh")
	var allowed int64
	const bid = 1_000
	// 5x the pace, in 10 ms ticks, stepping the refill loop every 100 ms.
	for i := range 200 {
		if i%10 == 0 {
			d.Step(ctx)
		}
		for range 5 {
			dec, err := d.Spend("c", bid, "")
			if err != nil {
				t.Fatal(err)
			}
			if dec == pacer.Allowed {
				allowed += bid
			}
		}
		f.clock.Add(10 * time.Millisecond)
	}
	t.Logf("allowed %d micros in the first 2 s: %.0f%% of the pace", allowed, 100*float64(allowed)/(2*pace))
	if allowed < 2*pace*80/100 {
		t.Fatalf("allowed %d micros in the first 2 s; want at least 80%% of the pace's %d", allowed, 2*pace)
	}
	// Twelve hours behind its curve, the campaign may catch up at 3x the
	// pace (the default), plus the first lease's burst window: no more.
	if allowed > 2*pace*3+2*pace {
		t.Fatalf("allowed %d micros in the first 2 s: more than the catch-up rate allows", allowed)
	}
	f.check(t, "c")
}
