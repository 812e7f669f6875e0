package daemon_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pacer/pacer"
)

// A campaign on its curve, its host restarted fresh three times in a row
// (each run closed cleanly, the next with no state): every fresh daemon,
// under saturating demand, allows at least 80% of the pace within 2 s and
// no more than the catch-up multiple allows, whatever its predecessor
// left. The campaign runs on its curve first: ten minutes from midnight at
// twice the pace.
func TestFreshRestartsReachPaceWithinTwoSeconds(t *testing.T) {
	f := newFixture(t)
	const pace = 100_000 // micros a second
	const bid = 1_000
	f.Campaign(t, "c", pace*86_400, 8)
	f.Clock.Set(midnight)
	run := func(holder string, ticks int) int64 { // 10 ms ticks at 2x the pace; what the first 2 s allowed
		d := f.daemon(t, holder)
		var first int64
		for i := range ticks {
			if i%10 == 0 {
				d.Step(ctx)
			}
			for range 2 * pace / bid / 100 {
				dec, err := d.Spend("c", bid, "")
				if err != nil {
					t.Fatal(err)
				}
				if dec == pacer.Allowed && i < 200 {
					first += bid
				}
			}
			f.Clock.Add(10 * time.Millisecond)
		}
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return first
	}
	run("warm", 10*60*100)
	for i := range 3 {
		first := run(fmt.Sprintf("fresh-%d", i), 30*100)
		t.Logf("fresh daemon %d: %.0f%% of the pace in its first 2 s", i, 100*float64(first)/(2*pace))
		if first < 2*pace*80/100 {
			t.Errorf("fresh daemon %d allowed %d micros in its first 2 s; want at least 80%% of the pace's %d", i, first, 2*pace)
		}
		if first > 2*pace*3+2*pace {
			t.Errorf("fresh daemon %d allowed %d micros in its first 2 s: more than the catch-up and a burst window allow", i, first)
		}
	}
	f.Check(t, "c")
}
