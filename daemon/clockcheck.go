package daemon

import (
	"context"
)

// CheckClock measures this daemon's clock (Config.Clock) against Redis TIME,
// records the offset for the pacer_ledger_clock_offset_seconds gauge, and
// returns a *lease.ClockSkewError when the offset (widened by half the round
// trip) is beyond SkewBound. pacerd adds it to its LedgerGate, so a daemon
// whose clock drifts stops taking leases until it is fixed.
func (d *Daemon) CheckClock(ctx context.Context) error {
	o, err := d.ledger.ClockOffset(ctx, d.cfg.Clock.Now)
	if err != nil {
		return err
	}
	d.metrics.clockOffset.Store(int64(o.Offset))
	d.metrics.clockMeasured.Store(true)
	return o.Check(d.cfg.SkewBound)
}
