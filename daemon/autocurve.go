package daemon

import (
	"context"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// AutoCurve is the curve name that has a campaign paced by a curve refitted
// every day from the demand its fleet recorded over the AutoCurveDays days
// before (pacerctl curve fit's method, bounded to AutoCurveMin..AutoCurveMax
// times the mean share per slot), so that traffic unlike any configured
// curve is not paced against. With too little demand recorded (fewer than
// AutoCurveMinRequests SPENDs) the day is paced flat.
const AutoCurve = "auto"

// The fit of an "auto" curve.
const (
	AutoCurveDays        = 7
	AutoCurveSlots       = 96
	AutoCurveMin         = 0.2
	AutoCurveMax         = 5
	AutoCurveMinRequests = 1000
)

// autoCurve returns day's curve for a campaign whose curve is "auto": the
// one decided for the day in the ledger (the first daemon to open the day
// fits it and records it; every other reads it), or flat when the ledger
// cannot be read or too little demand was recorded (refill loop).
func (c *campaign) autoCurve(ctx context.Context, s *settings, day bucket.Day) *bucket.Curve {
	flat := c.cfg.Curves["flat"]
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	defer cancel()
	w, ok, err := c.ledger.DayCurve(ctx, c.id, day.Key)
	if err != nil {
		c.log.Warn("cannot read the day's fitted curve; pacing flat", zap.String("day", day.Key), zap.Error(err))
		return flat
	}
	if !ok {
		fitted, requests := c.fitDemand(ctx, s, day)
		if fitted == nil {
			c.log.Info("too little demand recorded to fit the day's curve; pacing flat", zap.String("day", day.Key), zap.Int64("requests", requests))
			fitted = flat.Weights()
		}
		if w, err = c.ledger.DecideDayCurve(ctx, c.id, day.Key, fitted); err != nil {
			c.log.Warn("cannot record the day's fitted curve; pacing flat", zap.String("day", day.Key), zap.Error(err))
			return flat
		}
	}
	curve, err := bucket.NewCurve(AutoCurve, w)
	if err != nil {
		c.log.Warn("the day's fitted curve is not a curve; pacing flat", zap.String("day", day.Key), zap.Error(err))
		return flat
	}
	return curve
}

// fitDemand fits a curve to the demand recorded on the AutoCurveDays local
// days before day; nil if fewer than AutoCurveMinRequests were recorded.
func (c *campaign) fitDemand(ctx context.Context, s *settings, day bucket.Day) ([]float64, int64) {
	req := make([]float64, lease.DemandSlots)
	var total int64
	d := day
	for range AutoCurveDays {
		d = bucket.DayOf(d.Start.Add(-time.Hour), s.loc)
		dd, ok, err := c.ledger.ReadDemand(ctx, c.id, d.Key)
		if err != nil {
			c.log.Warn("cannot read recorded demand; fitting without that day", zap.String("day", d.Key), zap.Error(err))
			continue
		}
		if !ok {
			continue
		}
		for i, v := range dd.Requests {
			req[i] += float64(v)
		}
		total += dd.Total.Requests
	}
	if total < AutoCurveMinRequests {
		return nil, total
	}
	_, w, err := bucket.FitCurve(AutoCurve, req, bucket.FitOptions{Slots: AutoCurveSlots, Smooth: -1, Min: AutoCurveMin, Max: AutoCurveMax})
	if err != nil {
		c.log.Warn("cannot fit the day's curve", zap.Error(err))
		return nil, total
	}
	return w, total
}
