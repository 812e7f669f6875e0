package daemon

import (
	"time"

	"github.com/pacer/pacer/pace"
)

// heldElsewhere is what other hosts hold of leasedOut (the day's leased
// budget, as the shards last said) for a sparse campaign: standing bids
// that may come back unused (pace.HeldElsewhere, condition 18).
func (c *campaign) heldElsewhere(now time.Time, ds *dayState, leasedOut int64) int64 {
	if !c.sparse() {
		return 0
	}
	st := ds.b.Stats(now)
	return pace.HeldElsewhere(true, leasedOut, st.Tokens+st.Reserve)
}

// shareRate is this host's share rate, by which the share meters
// (shareThrottle, meterSpend) meter it (pace.ShareRate, condition 15), as
// fleetWindow last computed the fleet's rates.
func (c *campaign) shareRate(ds *dayState) float64 {
	return pace.ShareRate(c.share, ds.fleetPace, ds.fleetRate, ds.fleetCatching)
}

// shareThrottle notes a standing bid or fetched lease of granted micros on
// a host that keeps standing bids (standsHere): its next one waits until
// its share of the fleet's rate has covered it (pace.ShareWait, condition
// 17). Without it such a host took a whole bid at every top-up however
// small its share: hosts with 20% of a campaign's SPENDs (one every 22 s),
// at 3x the budget, took 24% of the spend.
func (c *campaign) shareThrottle(now time.Time, ds *dayState, granted int64) {
	if ds.fleetPace <= 0 || !c.standsHere(now, ds) {
		return
	}
	iv := c.sparseInterval()
	var demand float64
	if iv > 0 {
		demand = float64(c.typicalSpend()) / iv.Seconds()
	}
	ds.shareNextAt = pace.ShareWait(pace.Throttle{Now: now, Granted: granted, Rate: c.shareRate(ds), Demand: demand,
		Interval: iv, Catching: ds.fleetCatching, Standing: c.cfg.StandingWindow, Next: ds.shareNextAt})
}

// meterSpend reads this host's spend meter (pace.MeterCredit, condition
// 16) into ds.spendCredit: a host without credit asks the ledger for
// nothing, of any kind, until it is back (spendAhead). The shards' fair
// split and shareThrottle each bind one way of asking (ordinary leases, and
// standing bids), and a host whose SPENDs come every few seconds moves
// between the two: with such hosts the fleet split its spend 33/41/26% for
// 45/35/20% of the SPENDs (TestMixedHostsSpendByDemand). Metering what each
// host spent binds every way of asking at once.
func (c *campaign) meterSpend(now time.Time, ds *dayState) {
	st := ds.b.Stats(now)
	net := st.Spent - st.Refunded
	r := pace.Reading{First: ds.spendAt.IsZero(), Elapsed: now.Sub(ds.spendAt), Spent: net - ds.spendSeen,
		Rate: c.shareRate(ds), Bid: c.unit(), Window: c.cfg.LeaseWindow}
	ds.spendSeen, ds.spendAt = net, now
	ds.spendCredit = pace.MeterCredit(ds.spendCredit, r)
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
// host even with SparseWait on (pace.StandsHere), and with it on, only one
// that leaves the other hosts room in front of the curve
// (pace.StandingFits).
func (c *campaign) standsHere(now time.Time, ds *dayState) bool {
	if !pace.StandsHere(c.sparseOf(now, ds)) {
		return false
	}
	s := c.settings.Load()
	return c.cfg.SparseWait <= 0 || s == nil || c.standingFits(now, ds, s)
}

// standingFits reports whether the standing lease this host would hold,
// and another host's mean SPEND, fit within the ledger's advance in front
// of the curve (pace.StandingFits): else, with fetching on, it fetches.
func (c *campaign) standingFits(now time.Time, ds *dayState, s *settings) bool {
	unit := c.unit()
	return pace.StandingFits(c.standingBids(now, s, unit)*unit, int64(c.meanBid()), c.aheadMicros(now, ds, s.DailyMicros))
}

// standingBids is how many bids a sparse host's standing lease holds
// (pace.StandingBids).
func (c *campaign) standingBids(now time.Time, s *settings, unit int64) int64 {
	return pace.StandingBids(c.sparseOf(now, nil), s.DailyMicros, unit)
}
