package pace

// The hour's bound: what a shard releases in one hour of the campaign's
// local day (lease.Pace's Hour fields), asked by every grant for the hour
// the call falls in. Hour guarantees (hour_test.go checks each over random
// inputs):
//
//  7. A campaign whose average hour is at most HourBoundBids of its bids
//     (a bid is a large part of its hour: its catch-up at k, or a one-bid
//     advance refilled at every call, would run hours of several bids) is
//     bounded in every hour at HourPermille of the curve's share, or its
//     catch-up multiple if less, plus its usual bid. A larger campaign is
//     bounded only in its last hour: its catch-up (condition 1) bounds its
//     other hours.
//
//  8. The day's last hour spends at most the less of
//     LastHourPermille × its share plus a bid and LastHourExactPermille ×
//     its share with no bid; for a small campaign (7), the former (or its
//     catch-up multiple, if less, and its usual bid). So the last hour
//     never exceeds 1.5x its share plus a bid: no end-of-day dump, for a
//     campaign whose bid is large against its last hour too; and a small
//     campaign's last hour, worth less than a bid or two, still admits its
//     usual bid over its share, as the curve allows its other hours: with
//     no bid over it, a SPEND larger than 1.5x its share (a 20-bid
//     budget's larger third) could not be served in the hour at all.
const (
	HourPermille          = 2000
	HourBoundBids         = 4
	LastHourPermille      = 1300
	LastHourExactPermille = 1500
)

// HourInput is what the hour's bound depends on. Money is in micros.
type HourInput struct {
	Budget int64 // the day's budget
	// Bid is the campaign's bid (Input.Bid, the ledger's Unit), by which a
	// campaign is small (7); UsualBid its usual largest SPEND, the bid the
	// hour allows over its share (0: Bid).
	Bid, UsualBid int64
	// SharePPB is the curve's share of the hour (0..PPB).
	SharePPB int64
	// Last: the hour is the day's last (its end is the day's).
	Last bool
	// CatchUpPermille is the catch-up multiple in force, ×1000.
	CatchUpPermille int64
}

// HourBound is the hour's bound: the hour releases at most Permille/1000
// times the curve's share of it, plus Bid unless NoBid. Permille 0: none.
type HourBound struct {
	Permille int64
	Bid      int64
	NoBid    bool
}

// Hour decides the bound of one hour of the campaign's local day.
func Hour(in HourInput) HourBound {
	small := float64(in.Budget) <= HourBoundBids*24*float64(in.Bid)
	if !small && !in.Last {
		return HourBound{}
	}
	b := HourBound{Permille: min(in.CatchUpPermille, HourPermille), Bid: in.UsualBid}
	if !in.Last {
		return b
	}
	if small {
		b.Permille = min(in.CatchUpPermille, LastHourPermille)
		return b
	}
	b.Permille = LastHourPermille
	bid := b.Bid // the bid the ledger allows over the share: UsualBid, else Bid
	if bid <= 0 {
		bid = in.Bid
	}
	share := float64(in.Budget) * float64(clampPPB(in.SharePPB)) / PPB
	if bid <= 0 || (LastHourExactPermille-LastHourPermille)*share < 1000*float64(bid) {
		b.Permille, b.NoBid = LastHourExactPermille, true
	}
	return b
}
