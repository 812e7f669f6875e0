package pace

import (
	"math/rand/v2"
	"testing"
	"time"
)

// randomSparse draws what a host may know of a sparse campaign: any count
// of SPENDs, intervals from none to a day, quiet spells, day ends, rates
// and configured windows and idles (off included).
func randomSparse(r *rand.Rand) Sparse {
	span := func(most time.Duration) time.Duration { return time.Duration(r.Int64N(int64(most) + 1)) }
	in := Sparse{
		Seen:        r.IntN(12),
		Interval:    span(time.Hour) * time.Duration(r.IntN(2)),
		Quiet:       span(12 * time.Hour),
		UntilDayEnd: span(25 * time.Hour),
		Calls:       r.Float64() * 2,
		Window:      span(20 * time.Minute),
		Idle:        span(12*time.Hour) - time.Duration(r.IntN(2))*time.Hour,
	}
	if r.IntN(4) == 0 {
		in.Interval = span(30 * time.Hour)
	}
	return in
}

// Conditions 9 to 11 over random inputs.
func TestStandingRulesProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 9))
	for i := range 200_000 {
		in := randomSparse(r)
		iv := in.Interval
		stands := StandsHere(in)
		// 9: it stands only while its SPENDs come within a window of each
		// other, have come lately, and more than two are left in the day.
		if stands && (in.Seen <= StandingSpends || iv <= 0 || iv > in.Window || in.Quiet > max(in.Window, StandingIdleIntervals*iv) || in.UntilDayEnd <= 2*iv) {
			t.Fatalf("#%d %+v: stands, but its SPENDs are too few, rare, quiet or near the day's end", i, in)
		}
		if !stands && in.Seen > StandingSpends && iv > 0 && iv <= in.Window && in.Quiet <= in.Window && in.UntilDayEnd > 2*iv {
			t.Fatalf("#%d %+v: SPENDs every %s within a window %s, last %s ago: does not stand", i, in, iv, in.Window, in.Quiet)
		}
		// 9, with fetching on: the standing lease and a mean bid fit within Ahead.
		lease, mean, ahead := r.Int64N(10_000), r.Int64N(10_000), r.Int64N(20_000)-1_000
		if fits := StandingFits(lease, mean, ahead); fits != (ahead <= 0 || lease+mean <= ahead) {
			t.Fatalf("#%d: StandingFits(%d, %d, %d) = %v", i, lease, mean, ahead, fits)
		}
		// 10: the configured idle, up to three intervals if longer, a day at most; off stays off.
		idle := StandingIdle(in)
		switch {
		case in.Idle <= 0 && idle != in.Idle:
			t.Fatalf("#%d %+v: idle off, StandingIdle %s", i, in, idle)
		case in.Idle > 0 && (idle < in.Idle || idle > max(in.Idle, MaxStandingIdle) || idle > max(in.Idle, StandingIdleIntervals*iv)):
			t.Fatalf("#%d %+v: StandingIdle %s, want the idle %s or up to %d intervals, at most %s", i, in, idle, in.Idle, StandingIdleIntervals, MaxStandingIdle)
		}
		// 11: one to four bids, at most 1% of the budget but for the one.
		budget := 1 + r.Int64N(1e9)
		bid := 1 + r.Int64N(budget)
		n := StandingBids(in, budget, bid)
		if n < 1 || n > MaxStandingBids || (n > 1 && n*bid*100 > budget) {
			t.Fatalf("#%d %+v: %d standing bids of %d for a budget of %d: want 1-%d, within 1%% but for the first", i, in, n, bid, budget, MaxStandingBids)
		}
		if want := float64(in.Calls) * in.Window.Seconds() / 4; n > 1 && float64(n) > want {
			t.Fatalf("#%d %+v: %d standing bids, more than the %.1f SPENDs expected in a quarter window", i, in, n, want)
		}
	}
}
