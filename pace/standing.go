package pace

import "time"

// Standing bids: a campaign too sparse on a host to keep leases dripping
// (fewer than two SPENDs per half lease window) is served by a standing
// lease of a few bids, renewed every standing window while its SPENDs come,
// or by fetching a lease per SPEND. The rules, each checked over random
// inputs (standing_test.go):
//
//  9. StandsHere: with fetching on, a host keeps a standing bid only while
//     its last StandingSpends SPENDs came within a standing window of each
//     other (more than StandingSpends seen), the last no more than a
//     standing window, or StandingIdleIntervals of their intervals if
//     longer, ago, and more than two intervals remain before the day's
//     end: what it holds at midnight is one window's worth, and a host the
//     campaign reaches hours apart holds nothing between its SPENDs.
//
//     With fetching on, StandingFits also: it keeps one only while the
//     lease it would hold and a mean bid more fit within the ledger's
//     advance in front of the curve (Ahead). The ledger counts what hosts
//     hold against Ahead, so a standing bid larger than Ahead less a bid
//     leaves every other host's SPEND without room until the campaign
//     falls behind by it; the host fetches instead.
//
//  10. StandingIdle: a standing lease outlasts the host's last SPEND by
//     the configured idle, or StandingIdleIntervals of its intervals if
//     longer, at most MaxStandingIdle; none when the configured idle is
//     off (≤ 0).
//
//  11. StandingBids: a standing lease holds as many bids as the host
//     expects SPENDs in a quarter of a standing window, from 1 to
//     MaxStandingBids, and together at most 1% of the day's budget (one
//     bid at least).
const (
	StandingSpends        = 4
	StandingIdleIntervals = 3
	MaxStandingIdle       = 24 * time.Hour
	MaxStandingBids       = 4
)

// Sparse is what a host knows of a sparse campaign's SPENDs on it.
type Sparse struct {
	// Seen is how many SPENDs (refill ticks with one) the host has
	// recorded; Interval, the mean time between its last StandingSpends
	// (0: fewer than two); Quiet, the time since its last.
	Seen     int
	Interval time.Duration
	Quiet    time.Duration
	// UntilDayEnd is what is left of the campaign's day.
	UntilDayEnd time.Duration
	// Calls is the host's SPENDs a second (exponentially weighted).
	Calls float64
	// Window and Idle are the configured standing window and idle
	// (lease.standing_window, lease.standing_idle; Idle ≤ 0: off).
	Window, Idle time.Duration
}

// StandsHere reports whether the host keeps a standing bid with fetching
// on (9).
func StandsHere(in Sparse) bool {
	iv := in.Interval
	return in.Seen > StandingSpends && iv > 0 && iv <= in.Window &&
		in.Quiet <= max(in.Window, StandingIdleIntervals*iv) && in.UntilDayEnd > 2*iv
}

// StandingFits reports whether a standing lease of lease micros leaves room
// within ahead (the ledger's advance in front of the curve; 0: none asked)
// for another host's SPEND of meanBid (9).
func StandingFits(lease, meanBid, ahead int64) bool {
	return ahead <= 0 || lease+meanBid <= ahead
}

// StandingIdle is how long after its last SPEND the host keeps its
// standing lease (10).
func StandingIdle(in Sparse) time.Duration {
	if in.Idle <= 0 {
		return in.Idle
	}
	return max(in.Idle, min(StandingIdleIntervals*in.Interval, MaxStandingIdle))
}

// StandingBids is how many bids of bid a standing lease holds for a day of
// budget (11).
func StandingBids(in Sparse, budget, bid int64) int64 {
	k := int64(in.Calls * in.Window.Seconds() / 4)
	return max(min(k, MaxStandingBids, budget/(100*max(bid, 1))), 1)
}
