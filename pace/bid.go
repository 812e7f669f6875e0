package pace

// The campaign's bid: its usual largest SPEND, which sizes a host's
// standing bids, the ledger's one-bid advance, the most a shard far behind
// its plan holds available, and every host's prior for the mean SPEND. The
// fleet's bid is the ledger's (an operator's, or a host's last report); a
// host's own is the largest SPEND of its last few 5-minute windows that had
// any. The rule, checked over random days of random bid spreads
// (bid_test.go):
//
//  20. ReportsBid: a host sends its bid as the fleet's once it has seen
//     SPENDs in ReportBidWindows windows while the fleet has none; it moves
//     the fleet's only as the largest of at least BidSpends SPENDs, over
//     ReportBidWindows windows up and LowerBidWindows down. The largest of
//     n SPENDs falls on average at the n/(n+1) quantile of their spread,
//     the 95th percentile at 19: of eight (a sparse host's eight windows,
//     a SPEND in each) it is below the 85th percentile a quarter of the
//     time, and of four, one outlier is the whole of it. A fleet's bid
//     lowered so left a shard far behind its plan a bid short of a SPEND
//     the curve had room for; raised so, it set every host's prior for the
//     mean SPEND, and the ledger's advance, at twice the usual one for the
//     rest of the day. So a host that sees a campaign a few times an hour
//     leaves the fleet's bid as it is (its own unit still follows its
//     largest SPENDs); a busy one moves it 20 to 40 minutes after its bids
//     move.
const (
	ReportBidWindows = 4
	LowerBidWindows  = 8
	BidSpends        = 19
)

// ReportsBid reports whether a host whose bid is seen, the largest of
// spends SPENDs over windows 5-minute windows that had any, may send it as
// the campaign's, which the fleet has at fleet (0: none recorded).
// Whether it moved enough to be worth a write is the caller's.
func ReportsBid(seen, fleet int64, windows, spends int) bool {
	if seen <= 0 || windows < ReportBidWindows {
		return false
	}
	switch {
	case fleet <= 0:
		return true
	case seen < fleet:
		return windows >= LowerBidWindows && spends >= BidSpends
	default:
		return spends >= BidSpends
	}
}
