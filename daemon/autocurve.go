package daemon

import (
	"context"
	"fmt"
	"math"
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

// The fit of an "auto" curve. A campaign of a few hundred SPENDs a week is
// fitted too: in the simulator's family, campaigns of 260 to 1,000 SPENDs a
// day spend as much or more fitted than flat, and a wider moving average
// would only blur their spikes.
const (
	AutoCurveDays        = 7
	AutoCurveSlots       = 96
	AutoCurveMin         = 0.2
	AutoCurveMax         = 5
	AutoCurveMinRequests = 200
)

// AutoCurveSlotRequests is how many recorded SPENDs a slot's share is
// estimated from, at least, where the data allows: a Poisson count of 256
// is within 1/16 of its mean about two times in three.
const AutoCurveSlotRequests = 256

// AutoCurveSmooth is the half-width of the fit's moving average for total
// SPENDs recorded over n slots: the narrowest whose window weighs at least
// AutoCurveSlotRequests of them (a triangular window of half-width h
// weighs about h+1 slots' worth), and never wider than bucket.DefaultSmooth.
// A moving average spreads a step in the traffic over its width, and each
// slot of the spread is a slot where the curve releases budget the traffic
// does not ask for: a day whose first hour takes a fifth of its SPENDs ran
// 2.2% behind its curve after 01:00 at the default half-width of two slots.
// Where the counts are large the average has no noise to remove, and the
// curve follows the steps; a campaign of a few hundred SPENDs a day keeps the
// default's width.
func AutoCurveSmooth(total int64, n int) int {
	if n <= 0 || total <= 0 {
		return bucket.DefaultSmooth(max(n, 1))
	}
	perSlot := float64(total) / float64(n)
	h := int(math.Ceil(AutoCurveSlotRequests/perSlot)) - 1
	return min(max(h, 0), bucket.DefaultSmooth(n))
}

// autoCurve returns day's curve for a campaign whose curve is "auto" (see
// DayAutoCurve), or flat when the ledger cannot be read or written (refill
// loop).
func (c *campaign) autoCurve(ctx context.Context, s *settings, day bucket.Day) *bucket.Curve {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	defer cancel()
	curve, err := DayAutoCurve(ctx, c.ledger, c.id, day, s.loc, c.log)
	if err != nil {
		c.log.Warn("cannot decide the day's fitted curve; pacing flat", zap.String("day", day.Key), zap.Error(err))
		return c.cfg.Curves["flat"]
	}
	return curve
}

// DayAutoCurve returns day's curve for a campaign whose curve is "auto": the
// one decided for the day in the ledger, or, if none was, the fit of the
// demand recorded on the AutoCurveDays local days before day (flat when
// fewer than AutoCurveMinRequests SPENDs were), recorded as the day's
// decision unless another daemon's came first. The first daemon to open the
// day decides; every other reads. An error means the ledger could not be
// read or written; the caller paces flat. The simulator calls it too, to
// judge a run against the curve the fleet paced by.
func DayAutoCurve(ctx context.Context, l *lease.Ledger, campaign string, day bucket.Day, loc *time.Location, log *zap.Logger) (*bucket.Curve, error) {
	w, ok, err := l.DayCurve(ctx, campaign, day.Key)
	if err != nil {
		return nil, err
	}
	if !ok {
		fitted, requests := fitDemand(ctx, l, campaign, day, loc, log)
		if fitted == nil {
			log.Info("too little demand recorded to fit the day's curve; pacing flat", zap.String("day", day.Key), zap.Int64("requests", requests))
			fitted = bucket.Flat(24).Weights()
		}
		if w, err = l.DecideDayCurve(ctx, campaign, day.Key, fitted); err != nil {
			return nil, err
		}
	}
	curve, err := bucket.NewCurve(AutoCurve, w)
	if err != nil {
		return nil, fmt.Errorf("ledger %s/%s: the day's fitted curve is not a curve: %w", campaign, day.Key, err)
	}
	return curve, nil
}

// fitDemand fits a curve to the demand recorded on the AutoCurveDays local
// days before day; nil if fewer than AutoCurveMinRequests were recorded.
func fitDemand(ctx context.Context, l *lease.Ledger, campaign string, day bucket.Day, loc *time.Location, log *zap.Logger) ([]float64, int64) {
	req := make([]float64, lease.DemandSlots)
	var total int64
	d := day
	for range AutoCurveDays {
		d = bucket.DayOf(d.Start.Add(-time.Hour), loc)
		dd, ok, err := l.ReadDemand(ctx, campaign, d.Key)
		if err != nil {
			log.Warn("cannot read recorded demand; fitting without that day", zap.String("day", d.Key), zap.Error(err))
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
	_, w, err := bucket.FitCurve(AutoCurve, req, bucket.FitOptions{Slots: AutoCurveSlots, Smooth: AutoCurveSmooth(total, len(req)), Min: AutoCurveMin, Max: AutoCurveMax})
	if err != nil {
		log.Warn("cannot fit the day's curve", zap.Error(err))
		return nil, total
	}
	return w, total
}
