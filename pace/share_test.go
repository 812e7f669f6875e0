package pace

import (
	"cmp"
	"fmt"
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
		if r.IntN(2) == 0 {
			return ShareAlone + (1-ShareAlone)*r.Float64()
		}
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
		if Alone(share) != (share >= ShareAlone) || Metered(share) != (share > 0 && share < ShareAlone) {
			t.Fatalf("#%d share %v: alone %v, metered %v", i, share, Alone(share), Metered(share))
		}
		switch {
		case !(share > 0 && share < ShareAlone):
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

// Condition 17, judged by what it promises rather than by its formula:
// checkShareWait simulates hosts whose SPENDs arrive at random and which
// ask whenever no wait holds them, and checks what they were granted over
// every span. ShareWait keeps every promise; each plausible wrong wait
// below breaks one, so the check can fail.
func TestShareWaitProperties(t *testing.T) {
	if err := checkShareWait(ShareWait, rand.New(rand.NewPCG(35, 17))); err != nil {
		t.Fatal(err)
	}
	if err := checkShareWait(mistaken(waitMistake{}), rand.New(rand.NewPCG(35, 17))); err != nil {
		t.Fatalf("the mistakes' template without a mistake: %v", err)
	}
	for _, m := range []struct {
		name    string
		mistake waitMistake
	}{
		{"delays a host near its share (threshold 1x, not 1.25x)", waitMistake{threshold: 1}},
		{"waits past a standing window", waitMistake{noCap: true}},
		{"waits g / (1.25 × rate)", waitMistake{rate: ShareThrottleDemand}},
		{"waits 2g / rate", waitMistake{rate: 0.5}},
		{"catching up, counts back past its last wait's end", waitMistake{ignoreNext: true}},
		{"catching up, counts back three intervals", waitMistake{back: 3}},
		{"catching up, counts from now", waitMistake{back: -1}},
	} {
		err := checkShareWait(mistaken(m.mistake), rand.New(rand.NewPCG(35, 17)))
		t.Logf("a wait that %s: %v", m.name, err)
		if err == nil {
			t.Errorf("a wait that %s passes the check: it cannot tell it from ShareWait", m.name)
		}
	}
}

// waitMistake is one plausible mistake in writing condition 17; its zero
// value makes none.
type waitMistake struct {
	threshold  float64 // of the share rate from which a host is delayed (0: ShareThrottleDemand)
	rate       float64 // the wait is g / (rate × this) (0: 1)
	back       float64 // intervals counted back while catching up (0: 2; < 0: none)
	noCap      bool    // no standing window's cap
	ignoreNext bool    // count from now, or back, even before the last wait's end
}

// mistaken is condition 17 written with mistake m.
func mistaken(m waitMistake) func(Throttle) time.Time {
	threshold, rate, back := cmp.Or(m.threshold, ShareThrottleDemand), cmp.Or(m.rate, 1), cmp.Or(m.back, 2)
	return func(t Throttle) time.Time {
		if t.Granted <= 0 || t.Rate <= 0 || t.Interval <= 0 || t.Demand < threshold*t.Rate {
			return t.Next
		}
		from := t.Now
		if t.Catching && back > 0 {
			from = t.Now.Add(-min(time.Duration(back*float64(t.Interval)), t.Standing))
		}
		if t.Next.After(from) && !m.ignoreNext {
			from = t.Next
		}
		next := from.Add(time.Duration(float64(t.Granted) / (t.Rate * rate) * float64(time.Second)))
		if limit := t.Now.Add(t.Standing); next.After(limit) && !m.noCap {
			return limit
		}
		return next
	}
}

// checkShareWait checks condition 17's promises of wait, over random
// single calls and over runs of a host asking as soon as it may:
//
//   - no wait ends past a standing window from the grant;
//   - a host that is not metered, or asks less than ShareThrottleDemand ×
//     its share rate, is never delayed: its next ask is as it was;
//   - over any span between two of its asks, a delayed host was granted at
//     most its share rate × the span (a grant counted up to a standing
//     window's worth at that rate), plus, while the fleet catches up, the
//     rate × min(2 intervals, a standing window) it may count back;
//   - and at least that, less the time it spent idle after a wait ended
//     beyond what it may count back: it is held no longer than its share
//     needs.
//
// It returns the first broken promise, nil if none.
func checkShareWait(wait func(Throttle) time.Time, r *rand.Rand) error {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	for i := range 100_000 {
		th := Throttle{Now: t0.Add(time.Duration(r.Int64N(int64(time.Hour)))), Granted: r.Int64N(50_000) - 1_000,
			Rate: r.Float64()*1_000 - 100, Interval: time.Duration(r.Int64N(int64(time.Minute))),
			Catching: r.IntN(2) == 0, Standing: time.Duration(1 + r.Int64N(int64(10*time.Minute)))}
		th.Demand = max(th.Rate, 1) * ShareThrottleDemand * (0.5 + r.Float64())
		if r.IntN(2) == 0 {
			th.Next = th.Now.Add(time.Duration(r.Int64N(int64(20*time.Minute))) - 10*time.Minute)
		}
		got := wait(th)
		metered := th.Granted > 0 && th.Rate > 0 && th.Interval > 0
		switch {
		case (!metered || th.Demand < ShareThrottleDemand*th.Rate) && !got.Equal(th.Next):
			return fmt.Errorf("#%d %+v: next %v; a host not metered, or asking less than %vx its share, keeps %v", i, th, got, ShareThrottleDemand, th.Next)
		case got.After(th.Now.Add(th.Standing)) && got.After(th.Next):
			return fmt.Errorf("#%d %+v: next %v, past a standing window", i, th, got)
		}
	}
	for i := range 3_000 {
		if err := checkShareWaitRun(wait, r, t0); err != nil {
			return fmt.Errorf("run #%d: %w", i, err)
		}
	}
	return nil
}

// checkShareWaitRun simulates one host over 200 SPENDs arriving at random
// (exponential gaps of a mean interval), asking for a standing bid or fetch
// at each that comes when no wait holds it, and checks the run's promises
// (checkShareWait).
func checkShareWaitRun(wait func(Throttle) time.Time, r *rand.Rand, t0 time.Time) error {
	rate := 1 + r.Float64()*1_000
	iv := time.Duration(1+r.Int64N(int64(5*time.Minute))) / 10
	th := Throttle{Now: t0, Rate: rate, Interval: iv, Catching: r.IntN(2) == 0,
		Standing: time.Duration(1+r.Int64N(int64(10*time.Minute)/int64(time.Second))) * time.Second}
	bid := max(rate*iv.Seconds()*(0.3+1.7*r.Float64()), 1) // so that demand is 0.3x-2x its share
	th.Demand = bid / iv.Seconds()
	delayed := th.Demand >= ShareThrottleDemand*rate
	big := r.IntN(2) == 0 // grants up to three bids, else at most half a standing window's worth
	back := 0.0           // what the host may count back, seconds
	if th.Catching {
		back = min(2*iv, th.Standing).Seconds()
	}
	span := func(a, b time.Time) float64 { return b.Sub(a).Seconds() }
	var asks []time.Time
	var charged, lost float64  // Σ min(g, rate × standing) of the grants before the last ask; idle time beyond back
	lowest, first := 0.0, true // min over earlier asks of Σ charged − rate × t
	next := time.Time{}
	for now := t0; len(asks) < 200; now = now.Add(time.Duration(r.ExpFloat64() * float64(iv))) {
		if now.Before(next) {
			continue
		}
		if !first {
			lost += max(span(next, now)-back, 0)
		}
		asks = append(asks, now)
		// Every span between two asks: Σ charged over it ≤ rate × (span + back).
		if x := charged - rate*span(t0, now); first {
			lowest, first = x, false
		} else if delayed && x-lowest > rate*back+1e-6*(charged+1) {
			return fmt.Errorf("rate %.1f/s, interval %v, catching %v: granted %.0f more than its share over a span", rate, iv, th.Catching, x-lowest-rate*back)
		} else {
			lowest = min(lowest, x)
		}
		if got := span(asks[0], now); delayed && !big && charged < rate*(got-lost)*(1-1e-9)-1 {
			return fmt.Errorf("rate %.1f/s, interval %v, catching %v: granted %.0f in %.0fs of which %.0fs idle: held beyond its share", rate, iv, th.Catching, charged, got, lost)
		}
		g := bid * (0.5 + r.Float64())
		if big {
			g *= 3 * r.Float64() * 3
		} else {
			g = min(g, rate*th.Standing.Seconds()/2)
		}
		th.Now, th.Granted, th.Next = now, int64(max(g, 1)), next
		next = wait(th)
		switch {
		case !delayed && !next.Equal(th.Next):
			return fmt.Errorf("rate %.1f/s: a host asking %.2fx its share was held to %v", rate, th.Demand/rate, next)
		case next.After(now.Add(th.Standing)):
			return fmt.Errorf("next %v, past a standing window %v from %v", next, th.Standing, now)
		}
		charged += min(float64(th.Granted), rate*th.Standing.Seconds())
	}
	return nil
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

// Condition 15's share weight, over random spans: a part of the way,
// growing with the span's SPENDs, nearly the whole way for a busy span and
// at most a quarter for a span of two SPENDs or fewer. And over random
// days of a sparse campaign (a few of the fleet's SPENDs a span, each this
// host's with its share's chance), a share judged so stays near the
// host's: within 0.25 of it after 8 spans in at least 95% of days, and
// never below a fifth of it in 99%. Taken whole from the
// first slot and halfway from each after, it was 0 after a slot of one
// SPEND elsewhere, and a host with 45% of the SPENDs was metered at 5%.
func TestShareWeightProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 15))
	for i := range 200_000 {
		n := math.Exp(r.Float64()*math.Log(1e6)) - 1
		w := ShareWeight(n)
		if !(w >= 0 && w <= 1) || n <= 0 && w != 0 {
			t.Fatalf("#%d: ShareWeight(%.3g) = %v: not a part of the way", i, n, w)
		}
		if more := ShareWeight(n * (1 + r.Float64())); more < w {
			t.Fatalf("#%d: ShareWeight(%.3g) = %v, less for more SPENDs: %v", i, n, w, more)
		}
		if n >= 1000*ShareSpanSpends && w < 0.999 {
			t.Fatalf("#%d: a busy span of %.0f SPENDs moves the share %v of the way, want all of it", i, n, w)
		}
		if n <= 2 && w > 0.25 {
			t.Fatalf("#%d: a span of %.2f SPENDs moves the share %v of the way, want at most a quarter", i, n, w)
		}
	}
	if ShareWeight(math.NaN()) != 0 {
		t.Error("ShareWeight(NaN) is not 0")
	}
	const days = 4_000
	far, low := 0, 0
	for range days {
		s := 0.1 + 0.8*r.Float64()
		share := min(1, s*(1+r.Float64())) // the stand-in errs high
		for range 8 {                      // spans of a sparse campaign's flushes
			spends := 1 + r.IntN(4)
			mine := 0
			for range spends {
				if r.Float64() < s {
					mine++
				}
			}
			share += ShareWeight(float64(spends)) * (float64(mine)/float64(spends) - share)
			if share < s/5 {
				low++
				break
			}
		}
		if math.Abs(share-s) > 0.25 {
			far++
		}
	}
	t.Logf("over %d sparse days: %d ended more than 0.25 from the host's share, %d fell below a fifth of it", days, far, low)
	if far > days/20 || low > days/100 {
		t.Errorf("over %d sparse days: %d ended more than 0.25 from the host's share (at most %d), %d fell below a fifth of it (at most %d)",
			days, far, days/20, low, days/100)
	}
}
