package pace

import "math"

// The advance: how far in front of its curve a host asks the ledger to let
// the fleet run (lease.Pace.Ahead), so that a campaign whose curve releases
// less than a bid between its SPENDs still spends. The pacing goal allows
// AdvanceBids of the campaign's mean bids in front of the curve; the fleet
// fills what the ledger lets out, so an advance above that goal's bound
// runs the campaign over it, and one below leaves SPENDs that fit the goal
// refused, and the campaign behind. The rule, checked over random spreads
// of bids (advance_test.go):
//
//  21. Advance: a host asks for AdvanceBids of the campaign's mean SPEND,
//     less one and a half standard errors of that mean: the mean M of n
//     SPENDs has a standard error of at most M/√n for bids whose spread
//     (standard deviation) is at most as large as their mean (lognormal
//     bids of σ up to 0.83), so the advance is AdvanceBids × M ×
//     (1 − 1.5/√n), never less than MinAdvanceMeans × M (a quarter of it
//     kept for the error), nor more than the bid, nor less than
//     AdvancePermille of the day's budget. M is the fleet's mean SPEND as
//     the demand flushes count it (its latest lease.FleetSpends SPENDs,
//     and the host's own since its last flush), drawn towards half the
//     campaign's bid as MeanPriorSpends SPENDs would; n counts the SPENDs
//     only. The fleet fills what the ledger lets out, so an advance above
//     AdvanceBids true means runs the campaign over the goal (at 2.15 of
//     them every seed of the tiny scenario did), and the margin is what a
//     campaign on its curve cannot spend; the fleet's SPENDs, not the
//     host's own, since a host that sees a third of a campaign's SPENDs
//     knows its mean within 1.7 times the error.
const (
	AdvanceBids     = 2
	MinAdvanceMeans = 1.5
	AdvancePermille = 15
	MeanPriorSpends = 8
	// advanceStdErrors is the margin, in standard errors of the mean of
	// bids as spread as their mean.
	advanceStdErrors = 1.5
)

// AdvanceUsesMean reports whether a campaign's advance depends on its mean
// SPEND at all: for a day's budget whose AdvancePermille is at least its
// bid, Advance is that share of the budget whatever the mean (the advance
// is at most the bid and at least the share), so a host need not count the
// fleet's SPENDs for it.
func AdvanceUsesMean(bid, budget int64) bool {
	return budget/1000*AdvancePermille < bid
}

// Advance is the ledger's advance in front of the curve (21), in micros,
// for a campaign whose mean SPEND is mean over spends SPENDs (the prior
// included in mean, not in spends), whose bid is bid, with a day of budget.
func Advance(mean float64, spends, bid, budget int64) int64 {
	bids := int64(AdvanceMeans(spends) * max(mean, 0))
	return max(min(bid, bids), budget/1000*AdvancePermille, 1)
}

// AdvanceMeans is the advance in mean SPENDs for a mean taken over spends
// SPENDs (21): AdvanceBids less advanceStdErrors standard errors, at
// least MinAdvanceMeans.
func AdvanceMeans(spends int64) float64 {
	if spends <= 0 {
		return MinAdvanceMeans
	}
	return max(AdvanceBids*(1-advanceStdErrors/math.Sqrt(float64(spends))), MinAdvanceMeans)
}

// MeanSpend is the campaign's mean SPEND from micros asked over spends
// SPENDs, drawn towards half its bid as MeanPriorSpends SPENDs would (21):
// the typical largest SPEND is about twice the mean for the spreads of
// bids auctions see, and two or three SPENDs say little of the mean.
func MeanSpend(micros, spends, bid int64) float64 {
	n := float64(max(spends, 0))
	return (float64(max(micros, 0)) + MeanPriorSpends*float64(max(bid, 0))/2) / (n + MeanPriorSpends)
}
