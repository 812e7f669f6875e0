package daemon_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer"
)

// A campaign opened at midday with nothing spent, one fresh host, demand at
// ten times the pace: it catches up at the catch-up multiple (3x by
// default) and no faster, in every 10-second window (the pacing
// controller's contract, package pace), and reaches it from its second
// window on.
func TestCatchUpIsBoundedPer10Seconds(t *testing.T) {
	f := newFixture(t)
	const pace = 10_000 // micros a second
	const bid = 1_000
	f.Campaign(t, "c", pace*86_400, 1)
	f.Clock.Set(midnight.Add(12*time.Hour + 10*time.Minute))
	d := f.daemon(t, "fresh")
	var window int64
	var ratios []float64
	for i := range 300 * 100 { // five minutes of 10 ms ticks
		if i%10 == 0 {
			d.Step(ctx)
		}
		dec, err := d.Spend("c", bid, "")
		if err != nil {
			t.Fatal(err)
		}
		if dec == pacer.Allowed {
			window += bid
		}
		f.Clock.Add(10 * time.Millisecond)
		if (i+1)%1000 == 0 {
			ratios = append(ratios, float64(window)/(10*pace))
			window = 0
		}
	}
	t.Logf("10-second windows, as multiples of the pace: %.2f", ratios)
	for i, r := range ratios {
		if r > 3.3 {
			t.Errorf("window %d ran at %.2fx the pace; the catch-up bound is 3x (3.3x with slack)", i, r)
		}
		if i > 0 && r < 2.7 {
			t.Errorf("window %d ran at %.2fx the pace; far behind with demand to spare, it should catch up at 3x", i, r)
		}
	}
	f.Check(t, "c")
}
