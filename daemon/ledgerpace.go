package daemon

import (
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
)

// catchUpPermille is how fast, in parts per thousand of the curve's pace, the
// campaign may catch up now (pace.CatchUpPermille).
func (c *campaign) catchUpPermille(now time.Time, ds *dayState) int64 {
	return pace.CatchUpPermille(c.cfg.CatchUp, ds.day.End.Sub(now), c.cfg.CapWindow)
}

// hourPermille bounds what a shard releases in one hour of the campaign's
// local day (lease.Pace.HourPermille): twice the curve's share of the hour,
// over one bid, or the catch-up multiple if less. Only for a campaign whose
// average hour is at most hourBoundBids of its bids (c.unit, its largest
// recent SPEND), where a bid is a large part of an hour: a 20-bid budget's
// bid is three hours of its plan, and its one-bid advance, refilled at every
// call, or its catch-up at 3x, ran hours of up to six bids. A larger
// campaign catches up at its own multiple (bounded at 2x, family seed 7's
// campaigns of 2,688 and 185,423 bids behind their curves lost 5 and 6
// points), and the more shards a day has, the looser its bound (a bid a
// shard): one of 285 bids, five shards, ran an hour at 2.6x bounded.
const (
	hourPermille  = 2000
	hourBoundBids = 4
)

// lastHourPermille bounds what a shard of a larger campaign releases in the
// day's last hour (hourPace), with what it held, available and leased, at
// its first call there: 1.3x the curve's share of the hour, over one bid.
// The catch-up there is 1.25x (lastHourCatchUpPermille), but a campaign
// behind its curve ended its day with the leases its hosts held at 23:00
// spent on top of that: two of 1,211 and 1,788 bids in family seed 7 ran
// their last hours at up to 1.57x and 1.58x the curve's share over eight
// seeds (the bound is 1.5x); bounded at 1.4x, 1.49x and 1.50x; at
// 1.3x, 1.40x and 1.45x, their day's spend 0.5 points lower. A campaign on
// its curve there holds a lease window's worth at 23:00 and releases at its
// pace: the bound is no nearer than 0.3x.
const lastHourPermille = 1300

// lastHourExactPermille bounds the day's last hour at 1.5x the curve's
// share of it, with no bid over that (lease.Pace.HourNoBid): the issue's
// bound, exact. For a campaign whose bid is more than a fifth of that
// hour's share, where 1.3x and a bid (lastHourPermille) is more than it,
// or whose average hour is at most hourBoundBids bids (its other hours are
// bounded at the catch-up's multiple and a bid). So bounded, a 20-bid
// budget, whose last hour is worth 0.8 of a bid, spent one SPEND of two or
// three in it: 22 of 360 days of the tiny scenario (seeds 11-40) ran their
// last hours at 1.55-3.2x the curve's share; bounded exactly, none, and 284
// of the 360 spend >= 97% (288). A 121-bid campaign on a daytime curve,
// whose last hour is worth 1.7 bids, ran it at 1.82x (family seed 8).
const lastHourExactPermille = 1500

// hourPace sets p's hour bound for a ledger call at now (after its
// CatchUpPermille and Unit): the hour of the local day now falls in and the
// curve's share of it. None outside the day, nor, but in the day's last hour,
// for a campaign of more than hourBoundBids bids an hour on average. The
// last hour's bound is the smaller of lastHourPermille and a bid, and
// lastHourExactPermille with none (for a small campaign, the latter).
func (c *campaign) hourPace(p *lease.Pace, now time.Time, s *settings, ds *dayState) {
	elapsed := now.Sub(ds.day.Start)
	if elapsed < 0 || !now.Before(ds.day.End) {
		return
	}
	hour := elapsed / time.Hour
	start := ds.day.Start.Add(hour * time.Hour)
	end := start.Add(time.Hour)
	last := !end.Before(ds.day.End)
	small := float64(s.DailyMicros) <= hourBoundBids*24*float64(p.Unit)
	if !small && !last {
		return
	}
	if last {
		end = ds.day.End
	}
	p.Hour = int64(hour)
	p.HourPPB = ds.curve.AtTime(end, ds.day) - ds.curve.AtTime(start, ds.day)
	p.HourPermille = min(p.CatchUpPermille, hourPermille)
	p.HourUnit = min(c.usualUnit(), lease.MaxBudgetMicros)
	if !last {
		return
	}
	p.HourPermille = lastHourPermille
	bid := p.HourUnit // the bid the ledger allows over the share: HourUnit, else Unit
	if bid <= 0 {
		bid = p.Unit
	}
	share := float64(s.DailyMicros) * float64(p.HourPPB) / float64(bucket.PPB)
	if small || bid <= 0 || (lastHourExactPermille-lastHourPermille)*share < 1000*float64(bid) {
		p.HourPermille, p.HourNoBid = lastHourExactPermille, true
	}
}
