package daemon

import (
	"time"

	"github.com/pacer/pacer/pace"
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

// sparseOf is what this host knows of the campaign's sparse SPENDs at now,
// for the controller's standing-bid rules (pace.StandsHere, StandingIdle,
// StandingBids).
func (c *campaign) sparseOf(now time.Time, ds *dayState) pace.Sparse {
	_, calls := c.demand()
	in := pace.Sparse{Seen: c.demandTickN, Interval: c.sparseInterval(), Quiet: now.Sub(c.lastDemandAt),
		Calls: calls, Window: c.cfg.StandingWindow, Idle: c.cfg.StandingIdle}
	if ds != nil {
		in.UntilDayEnd = ds.day.End.Sub(now)
	}
	return in
}

// standingIdle is how long after its last SPEND here a sparse campaign keeps
// its standing lease on this host (pace.StandingIdle).
func (c *campaign) standingIdle() time.Duration {
	return pace.StandingIdle(c.sparseOf(time.Time{}, nil))
}

// standsHere reports whether a sparse campaign keeps a standing bid on this
// host even with SparseWait on (pace.StandsHere).
func (c *campaign) standsHere(now time.Time, ds *dayState) bool {
	return pace.StandsHere(c.sparseOf(now, ds))
}

// standingBids is how many bids a sparse host's standing lease holds
// (pace.StandingBids).
func (c *campaign) standingBids(now time.Time, s *settings, unit int64) int64 {
	return pace.StandingBids(c.sparseOf(now, nil), s.DailyMicros, unit)
}
