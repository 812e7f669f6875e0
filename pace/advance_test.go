package pace

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Condition 21 over random inputs: the advance is at least AdvancePermille
// of the budget (and a micro); above that, at most the bid, and between
// MinAdvanceMeans and AdvanceBids of the mean; it grows with the SPENDs
// the mean is taken over.
func TestAdvanceProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 21))
	for range 200_000 {
		mean := r.Float64() * 10_000
		spends := r.Int64N(2_000) - 10
		bid := r.Int64N(30_000)
		budget := r.Int64N(2_000_000)
		got := Advance(mean, spends, bid, budget)
		floor := max(budget/1000*AdvancePermille, 1)
		if got < floor {
			t.Fatalf("Advance(%.0f, %d, %d, %d) = %d, below %d‰ of the budget", mean, spends, bid, budget, got, AdvancePermille)
		}
		if got > floor && (got > bid || float64(got) > AdvanceBids*mean || float64(got) < MinAdvanceMeans*mean-1 && got < bid) {
			t.Fatalf("Advance(%.0f, %d, %d, %d) = %d: want at most the bid and two means, at least %.2f means or the bid", mean, spends, bid, budget, got, MinAdvanceMeans)
		}
		if !AdvanceUsesMean(bid, budget) && got != Advance(r.Float64()*10_000, r.Int64N(2_000), bid, budget) {
			t.Fatalf("Advance(%.0f, %d, %d, %d) = %d depends on the mean, where AdvanceUsesMean says not", mean, spends, bid, budget, got)
		}
		m := AdvanceMeans(spends)
		if m < MinAdvanceMeans || m >= AdvanceBids || AdvanceMeans(spends+1) < m {
			t.Fatalf("AdvanceMeans(%d) = %.3f: want within [%.2f, %d), not falling with more SPENDs", spends, m, MinAdvanceMeans, AdvanceBids)
		}
	}
}

// What condition 21 is for: 20,000 random campaign-days whose bids are
// lognormal (σ 0.2 to 0.83, a spread at most as wide as its mean) and
// whose fleet has seen 1 to 400 SPENDs, the prior half the bids' 95th
// percentile. The advance from the fleet's mean stands above two true mean
// bids (the "ahead" bound) in at most 3% of them (1.23%); and once the
// fleet has seen 40 SPENDs, at least 1.6 true mean bids in at least 75%
// (92.4%; the SPENDs
// a campaign on its curve takes: the curve oracle lets one of up to the
// bids' 95th percentile, about two means, through). The rule before, 1.5
// of a host's own mean (a third of the fleet's SPENDs, the same prior),
// stands above two in 0.23% and reaches 1.6 in 9.8%: the half mean it kept
// for its estimate's error cost the SPENDs the ledger refused.
func TestAdvanceStaysWithinTwoMeanBids(t *testing.T) {
	fleet := func(micros, spends, bid int64) float64 {
		return AdvanceMeans(spends) * MeanSpend(micros, spends, bid)
	}
	before := func(micros, spends, bid int64) float64 {
		own := spends / 3
		return MinAdvanceMeans * MeanSpend(micros/max(spends, 1)*own, own, bid)
	}
	got, old := advanceDays(fleet), advanceDays(before)
	t.Logf("above two mean bids in %.2f%% of days (the rule before: %.2f%%); at least 1.6 once 40 SPENDs are seen in %.1f%% (%.1f%%)",
		100*got.over, 100*old.over, 100*got.near, 100*old.near)
	if got.over > 0.03 {
		t.Errorf("advance above two true mean bids in %.2f%% of days; want at most 3%%", 100*got.over)
	}
	if got.near < 0.75 {
		t.Errorf("advance at least 1.6 true mean bids in %.1f%% of days with 40 SPENDs or more; want at least 75%%", 100*got.near)
	}
}

type advanceFigures struct{ over, near float64 }

// advanceDays draws random campaign-days and measures the advance that
// rule gives (in true mean bids, the bid cap and budget floor aside).
func advanceDays(rule func(micros, spends, bid int64) float64) advanceFigures {
	r := rand.New(rand.NewPCG(21, 1))
	const days = 20_000
	var over, near, judged int
	for range days {
		sigma := 0.2 + 0.63*r.Float64()
		mu := math.Log(2_000) - sigma*sigma/2 // true mean 2,000
		p95 := math.Exp(mu + 1.645*sigma)
		spends := 1 + r.Int64N(400)
		var micros int64
		for range spends {
			micros += int64(math.Exp(mu + sigma*r.NormFloat64()))
		}
		adv := rule(micros, spends, int64(p95)) / 2_000
		if adv > AdvanceBids {
			over++
		}
		if spends >= 40 {
			judged++
			if adv >= 1.6 {
				near++
			}
		}
	}
	return advanceFigures{over: float64(over) / days, near: float64(near) / float64(judged)}
}
