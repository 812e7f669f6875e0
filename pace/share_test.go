package pace

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// randomShare draws a host's share: unknown, alone, or anything between.
func randomShare(r *rand.Rand) float64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return -r.Float64()
	}
	return r.Float64()
}

// Condition 15 over random inputs.
func TestShareRateProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 15))
	for i := range 200_000 {
		share, pace, rate, catching := randomShare(r), r.Float64()*1e6, r.Float64()*3e6, r.IntN(2) == 0
		got := ShareRate(share, pace, rate, catching)
		fleet := pace
		if catching {
			fleet = rate
		}
		switch {
		case !(share > 0 && share < 1):
			if got != 0 {
				t.Fatalf("#%d share %v: rate %v; an unmetered host's is 0", i, share, got)
			}
		case math.Abs(got-share*fleet) > 1e-9*fleet || got > fleet:
			t.Fatalf("#%d share %v of %v (catching %v): rate %v", i, share, fleet, catching, got)
		}
	}
}

// Condition 16 over random runs of readings: the credit never exceeds the
// limit, what the host spent is at most its share rate × the time elapsed
// plus the credit it started with less the credit it ends with, and a
// host spending at most its share keeps the whole limit.
func TestMeterCreditProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 16))
	for i := range 20_000 {
		rate := r.Float64() * 50_000
		if r.IntN(8) == 0 {
			rate = 0
		}
		bid, win := 1+r.Int64N(20_000), time.Duration(1+r.Int64N(int64(time.Minute)))
		within := r.IntN(3) == 0 // this run spends at most its share
		credit := MeterCredit(0, Reading{First: true, Rate: rate, Bid: bid, Window: win})
		start := credit
		var spent, elapsed float64
		for j := range 50 {
			rd := Reading{Elapsed: time.Duration(r.Int64N(int64(10 * time.Second))), Rate: rate, Bid: bid, Window: win}
			rd.Spent = r.Int64N(3*bid + 1)
			if within {
				rd.Spent = int64(rate * rd.Elapsed.Seconds() * r.Float64())
			}
			credit = MeterCredit(credit, rd)
			spent += float64(rd.Spent)
			elapsed += rd.Elapsed.Seconds()
			limit := rd.Limit()
			if limit < MeterBids*float64(bid) || limit < rate*win.Seconds() {
				t.Fatalf("#%d.%d: limit %v below %d bids of %d or a window %v at %v", i, j, limit, MeterBids, bid, win, rate)
			}
			if credit > limit {
				t.Fatalf("#%d.%d: credit %v above the limit %v", i, j, credit, limit)
			}
			if rate <= 0 && credit != limit {
				t.Fatalf("#%d.%d: an unmetered host's credit %v, not the limit %v", i, j, credit, limit)
			}
			if within && credit != limit {
				t.Fatalf("#%d.%d: a host within its share was held to %v of %v", i, j, credit, limit)
			}
			if rate > 0 && spent > rate*elapsed+start-credit+1e-6*(spent+rate*elapsed+start) {
				t.Fatalf("#%d.%d: spent %v in %vs at %v/s from credit %v to %v: more than its share", i, j, spent, elapsed, rate, start, credit)
			}
		}
	}
}

// Condition 17 over random inputs, and over runs of a host asking as soon
// as it may: what it is granted after its first is covered by its share
// rate over the time it waited, and no wait ends past a standing window.
func TestShareWaitProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 17))
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	for i := range 200_000 {
		th := Throttle{Now: t0.Add(time.Duration(r.Int64N(int64(time.Hour)))), Granted: r.Int64N(50_000) - 1_000,
			Rate: r.Float64()*1_000 - 100, Demand: r.Float64() * 5_000, Interval: time.Duration(r.Int64N(int64(time.Minute))),
			Catching: r.IntN(2) == 0, Standing: time.Duration(r.Int64N(int64(10 * time.Minute)))}
		if r.IntN(2) == 0 {
			th.Next = th.Now.Add(time.Duration(r.Int64N(int64(20*time.Minute))) - 10*time.Minute)
		}
		got := ShareWait(th)
		delayed := th.Granted > 0 && th.Rate > 0 && th.Interval > 0 && th.Demand >= ShareThrottleDemand*th.Rate
		if !delayed {
			if !got.Equal(th.Next) {
				t.Fatalf("#%d %+v: next %v; a host not metered, or asking less than %vx its share, keeps %v", i, th, got, ShareThrottleDemand, th.Next)
			}
			continue
		}
		if got.After(th.Now.Add(th.Standing)) {
			t.Fatalf("#%d %+v: next %v, past a standing window", i, th, got)
		}
		wait := time.Duration(float64(th.Granted) / th.Rate * float64(time.Second))
		from := th.Now
		if th.Catching {
			from = th.Now.Add(-min(2*th.Interval, th.Standing))
		}
		if th.Next.After(from) {
			from = th.Next
		}
		if want := from.Add(wait); got.Before(want) && got.Before(th.Now.Add(th.Standing)) {
			t.Fatalf("#%d %+v: next %v, before %v (g/rate from %v)", i, th, got, want, from)
		}
	}
	// A host that asks as soon as it may, not catching up, within a
	// standing window of waits: granted after its first ≤ rate × elapsed.
	for i := range 2_000 {
		rate := 10 + r.Float64()*1_000
		th := Throttle{Now: t0, Rate: rate, Demand: 10 * rate, Interval: time.Second, Standing: time.Hour}
		var granted float64
		for range 100 {
			th.Granted = 1 + r.Int64N(int64(rate*60))
			th.Next = ShareWait(th)
			if !th.Now.Equal(t0) {
				granted += float64(th.Granted)
			}
			th.Now = th.Next
			if th.Now.Before(t0) {
				t.Fatalf("#%d: next %v before the start", i, th.Now)
			}
		}
		if elapsed := th.Now.Sub(t0).Seconds(); granted > rate*elapsed*(1+1e-9)+1 {
			t.Fatalf("#%d: granted %v after the first in %vs at %v/s: more than its share", i, granted, elapsed, rate)
		}
	}
}

// Condition 18 over random inputs.
func TestHeldElsewhereProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 18))
	for i := range 200_000 {
		sparse, leased, held := r.IntN(2) == 0, r.Int64N(1e9)-1e6, r.Int64N(1e9)
		got := HeldElsewhere(sparse, leased, held)
		switch {
		case !sparse && got != 0:
			t.Fatalf("#%d: a busy campaign counts %d held elsewhere", i, got)
		case got < 0 || got > max(leased, 0):
			t.Fatalf("#%d leased %d held %d: %d held elsewhere", i, leased, held, got)
		case sparse && held <= leased && got != leased-held:
			t.Fatalf("#%d leased %d held %d: %d held elsewhere; want %d", i, leased, held, got, leased-held)
		}
	}
}
