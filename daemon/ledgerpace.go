package daemon

import (
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
)

// catchUpPermille is how fast, in parts per thousand of the curve's pace, the
// campaign may catch up now (pace.CatchUpPermille).
func (c *campaign) catchUpPermille(now time.Time, ds *dayState) int64 {
	return pace.CatchUpPermille(c.cfg.CatchUp, ds.day.End.Sub(now), c.cfg.CapWindow)
}

// hourPace sets p's hour bound for a ledger call at now (after its
// CatchUpPermille and Unit), as the controller decides it (pace.Hour): the
// hour of the local day now falls in and the curve's share of it. None
// outside the day.
func (c *campaign) hourPace(p *lease.Pace, now time.Time, s *settings, ds *dayState) {
	elapsed := now.Sub(ds.day.Start)
	if elapsed < 0 || !now.Before(ds.day.End) {
		return
	}
	hour := elapsed / time.Hour
	start := ds.day.Start.Add(hour * time.Hour)
	end := start.Add(time.Hour)
	last := !end.Before(ds.day.End)
	if last {
		end = ds.day.End
	}
	share := ds.curve.AtTime(end, ds.day) - ds.curve.AtTime(start, ds.day)
	b := pace.Hour(pace.HourInput{Budget: s.DailyMicros, Bid: p.Unit, UsualBid: min(c.usualUnit(), lease.MaxBudgetMicros),
		SharePPB: share, Last: last, CatchUpPermille: p.CatchUpPermille})
	if b.Permille == 0 {
		return
	}
	p.Hour, p.HourPPB = int64(hour), share
	p.HourPermille, p.HourUnit, p.HourNoBid = b.Permille, b.Bid, b.NoBid
}
