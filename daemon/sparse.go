package daemon

import (
	"time"
)

// heldElsewhere estimates how much of leasedOut (the day's leased budget, as
// the shards last said) other hosts hold, for a sparse campaign: standing
// bids that may come back unused. Such a day whose shards are empty is
// exhausted for this host only when less than one of its SPENDs is held
// elsewhere; until then its bids are paced. A busy campaign's day is
// exhausted when its shards are (0): what other hosts hold at its end is
// theirs to spend, and passing crumbs around would only cost ledger calls.
func (c *campaign) heldElsewhere(now time.Time, ds *dayState, leasedOut int64) int64 {
	if !c.sparse() {
		return 0
	}
	st := ds.b.Stats(now)
	return max(leasedOut-st.Tokens-st.Reserve, 0)
}

// shareRate is this host's share of what the fleet may take a second, by
// which the share meters (shareThrottle, meterSpend) meter it: of the
// curve's pace, or of the catch-up rate while the fleet catches up
// (fleetCatching), as fleetWindow last computed them.
func (c *campaign) shareRate(ds *dayState) float64 {
	if ds.fleetCatching {
		return c.share * ds.fleetRate
	}
	return c.share * ds.fleetPace
}

// shareThrottleDemand is how far above its share of the fleet's rate a
// host's own demand must be for shareThrottle to meter it: near its share,
// the bunching of its SPENDs would make it miss some the fleet could serve.
const shareThrottleDemand = 1.25

// shareThrottle notes a standing bid or fetched lease of granted micros on
// a host that keeps standing bids (standsHere): its next one waits until
// its share of the fleet's demand, taken of the fleet's rate, has covered
// it. Without it such a host took a whole bid at every top-up however small
// its share: hosts with 20% of a campaign's SPENDs (one every 22 s), at 3x
// the budget, took 24% of the spend (issue 10's fairness goal is 3 points).
// A host the campaign reaches only hours apart fetches unthrottled: its
// share is too noisy to meter a few bids a day by, and what it leaves the
// others would not take.
//
// Within a bid of the curve the rate is the curve's pace, not the
// catch-up's: there the catch-up pace (the pace plus what is behind, per
// window) overstated what the fleet gets by up to 1.6x for a campaign of a
// few SPENDs a second, and its small host took a quarter of the spend with
// a fifth of the SPENDs. Catching up (ds.fleetCatching, pace.CatchingWindows)
// it is the catch-up rate, which the shards then release: unmetered there,
// a host with 35% of the SPENDs took 40-44% of a catch-up
// (TestStandingHostsCatchingUpSpendByDemand), and the family's f39 ran 2.6
// points off on average, 4.1 at worst over 8 seeds.
// Catching up, the meter also keeps up to two of the host's SPEND intervals
// of credit: a bid waits for its SPEND after the meter let it through, and
// counted from its grant each time, that wait was lost: the catch-up test
// ran 8 points off without the credit, 4.4 with one interval of it. Within a
// bid of the curve the credit gave the small host of curve: auto's family
// 1-3 points more than its share, so the wait counts from the grant there,
// as it always did.
func (c *campaign) shareThrottle(now time.Time, ds *dayState, granted int64) {
	if granted <= 0 || c.share <= 0 || c.share >= 1 || ds.fleetPace <= 0 || !c.standsHere(now, ds) {
		return
	}
	iv := c.sparseInterval()
	rate := c.shareRate(ds)
	if iv <= 0 || rate <= 0 || float64(c.typicalSpend())/iv.Seconds() < shareThrottleDemand*rate {
		return // the host asks for less than its share: nothing to meter
	}
	wait := time.Duration(float64(granted) / rate * float64(time.Second))
	from := now
	if ds.fleetCatching {
		from = now.Add(-min(2*iv, c.cfg.StandingWindow))
	}
	if ds.shareNextAt.After(from) {
		from = ds.shareNextAt
	}
	ds.shareNextAt = from.Add(wait)
	if limit := now.Add(c.cfg.StandingWindow); ds.shareNextAt.After(limit) {
		ds.shareNextAt = limit
	}
}

// meterSpend keeps ds.spendCredit, what this host may still spend before
// it has spent more than its share of the fleet's rate: credited at that
// share of the rate the shards release (the curve's pace, or the catch-up
// rate while catching up), debited with what the host spent (less
// refunds), and never more than four of its bids or a lease window of its
// share. A host without credit asks the ledger for nothing, of any kind,
// until it is back (spendAhead); one that spends less than its share keeps
// its credit whole and is never held.
//
// The shards' fair split and shareThrottle each bind one way of asking
// (ordinary leases, and standing bids), and a host whose SPENDs come every
// few seconds moves between the two with the 10-second EWMA of its
// SPENDs: with such hosts (SPENDs every 5-17 s, 4-6x the pace on the
// curve), the fleet split its spend 33/41/26% for 45/35/20% of the SPENDs,
// 8 to 14 points off (TestMixedHostsSpendByDemand). Metering what each host
// spent binds every way of asking at once. Not only while the host asks for
// more than its share (as shareThrottle): its demand, measured over a few
// SPENDs, often looked below it, and each such look restored the credit (the
// family's f48 on curve: auto stayed 2.5 points off on average).
func (c *campaign) meterSpend(now time.Time, ds *dayState) {
	st := ds.b.Stats(now)
	net := st.Spent - st.Refunded
	spent := net - ds.spendSeen
	first, dt := ds.spendAt.IsZero(), max(now.Sub(ds.spendAt).Seconds(), 0)
	ds.spendSeen, ds.spendAt = net, now
	rate := c.shareRate(ds)
	limit := max(4*float64(c.unit()), rate*c.cfg.LeaseWindow.Seconds())
	if c.share <= 0 || c.share >= 1 || rate <= 0 || first {
		ds.spendCredit = limit
		return
	}
	ds.spendCredit = min(ds.spendCredit+rate*dt-float64(spent), limit)
}

// standingIdleIntervals is how many of a sparse host's mean SPEND
// intervals its standing lease outlasts its last SPEND, when that is longer
// than StandingIdle; maxStandingIdle bounds it.
const (
	standingIdleIntervals = 3
	maxStandingIdle       = 24 * time.Hour
)

// standingIdle is how long after its last SPEND here a sparse campaign keeps
// its standing lease on this host: StandingIdle, or three of the host's mean
// intervals between its last few SPENDs if longer (at most a day). A host that sees the campaign
// every four hours let its bid lapse after six, two SPENDs in five, and met
// its next SPEND with an empty bucket while the lapsed bid, given back,
// was locked again by the shard's cap.
func (c *campaign) standingIdle() time.Duration {
	idle := c.cfg.StandingIdle
	if idle <= 0 {
		return idle
	}
	return max(idle, min(standingIdleIntervals*c.sparseInterval(), maxStandingIdle))
}

// standsHere reports whether a sparse campaign keeps a standing bid on this
// host even with SparseWait on: when its last SPENDs here came within a
// standing window of each other (four intervals seen), and more than two of
// them remain before midnight. Such a bid is spent before its renewal, so
// it costs no more ledger calls than fetching would, and fewer when it
// holds several bids (a campaign with a SPEND every 30 s on the host made
// two ledger calls a SPEND fetching, one every few SPENDs standing:
// TestWarmCampaignTopsUpEveryFewSpends); and what it holds at midnight is
// one window's worth. A rarer host fetches: a bid held for hours, or over
// midnight, is budget nobody spends. And only while they come: not once
// the last is more than standingIdleIntervals of them ago, and a standing
// window. A burst of four SPENDs in six minutes, then none, kept a 28-bid
// campaign's host standing two bids, renewed unspent every five minutes
// from 22:04 to midnight, while the other hosts' SPENDs were refused for
// want of them (family's f00, seed 27: 83.71% spent, the curve oracle
// 99.05%). A standing window alone was too short: a host whose SPENDs came
// every three or four minutes stopped at its ordinary gaps, and its next
// SPENDs fetched and were paced (family seed 9: a 109-bid campaign 92.21 ->
// 88.56%).
func (c *campaign) standsHere(now time.Time, ds *dayState) bool {
	iv := c.sparseInterval()
	quiet := now.Sub(c.lastDemandAt)
	return c.demandTickN > sparseSpends && iv > 0 && iv <= c.cfg.StandingWindow &&
		quiet <= max(c.cfg.StandingWindow, standingIdleIntervals*iv) && ds.day.End.Sub(now) > 2*iv
}

// standingBids is how many bids a sparse host's standing lease holds: as
// many as the host expects SPENDs in a quarter of a standing window, from 1
// to maxStandingBids, and together at most 1% of the day's budget. A top-up
// comes when less than a bid is left, so a host that sees a SPEND every 30 s
// calls the ledger about every fourth SPEND rather than at each (issue 13:
// such warm campaigns' top-ups were most of a large fleet's Redis load); a
// host that sees one every few minutes, or a budget of a few hundred bids,
// holds one bid as before, so small budgets keep their smoothness.
func (c *campaign) standingBids(s *settings, unit int64) int64 {
	_, calls := c.demand()
	k := int64(calls * c.cfg.StandingWindow.Seconds() / 4)
	return max(min(k, maxStandingBids, s.DailyMicros/(100*unit)), 1)
}

// maxStandingBids bounds a standing lease, in bids.
const maxStandingBids = 4
