package daemon

import (
	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"go.uber.org/zap"
)

// Publisher sends fleet broadcasts; *broadcast.Broadcaster satisfies it.
type Publisher interface {
	Publish(pacer.Event) error
}

var _ Publisher = (*broadcast.Broadcaster)(nil)

func (d *Daemon) publish(e pacer.Event) {
	if d.cfg.Publisher == nil {
		return
	}
	e.From = d.cfg.Holder
	e.AtMillis = d.cfg.Clock.Now().UnixMilli()
	if err := d.cfg.Publisher.Publish(e); err != nil {
		d.log.Warn("broadcast failed; other daemons learn it from the ledger", zap.String("kind", e.Kind),
			zap.String("campaign", e.Campaign), zap.Error(err))
	}
}

// HandleEvent applies a fleet broadcast. Events for campaigns this daemon has
// not loaded are ignored: it reads their state from the ledger on first use.
// It never blocks on the network: the refill loop does the ledger work.
//
// Every event is a hint, never a verdict: it only makes the loop ask the
// ledger sooner, and the ledger's answer decides. Anyone who can publish on
// the bus (or replay a signed event within its max age) can send one, and a
// stale one must not stop a campaign that has budget again. The loop reads
// at most once per campaign per Config.EventRecheck for events, so a flood
// of them cannot amplify into Redis calls.
func (d *Daemon) HandleEvent(e pacer.Event) {
	c, ok := d.campaigns.get(e.Campaign)
	if !ok {
		if e.Kind == pacer.EventLostWrites && d.ran.has(e.Campaign, e.Day) {
			// A day we leased from and no longer hold in memory: our
			// totals there are re-asserted by the next Step.
			d.ran.ask(e.Campaign, e.Day)
		}
		return
	}
	switch e.Kind {
	case pacer.EventExhausted:
		// The loop reads the shards on its next tick (rate-limited); only
		// their answer sets exhausted.
		if ds := c.day.Load(); ds != nil && ds.day.Key == e.Day {
			ds.confirm.Store(true)
		}
	case pacer.EventRevoked:
		// Paused or cut, says the sender: re-read the settings; a pause
		// the ledger confirms denies and releases the leases, a confirmed
		// cut releases them (see campaign.eventRefresh).
		c.cutCheck.Store(true)
		newer := c.noteVersion(e.Version)
		c.recheck.Store(true)
		defer d.kickIf(newer)
	case pacer.EventChanged:
		newer := c.noteVersion(e.Version)
		c.recheck.Store(true)
		defer d.kickIf(newer)
	case pacer.EventLostWrites:
		// Re-asserting is idempotent and costs one call per lease held, so
		// a forged event costs little; a true one keeps the fleet's leases
		// out of what the ledger can grant again.
		if ds := c.day.Load(); ds != nil && ds.day.Key == e.Day {
			ds.reassertHint.Store(true)
		} else if d.ran.has(e.Campaign, e.Day) {
			d.ran.ask(e.Campaign, e.Day) // a day of ours no longer held
		}
	}
	c.wake.Store(true) // whatever it asked, the next tick looks
}

// kickIf wakes Run to step the campaigns an operator's event named a newer
// version of (stepEvents), if newer; it never blocks.
func (d *Daemon) kickIf(newer bool) {
	if !newer {
		return
	}
	select {
	case d.eventKick <- struct{}{}:
	default: // a kick is pending: it steps this campaign too
	}
}

// noteVersion notes the settings version an operator's event names and
// reports whether it is newer than any this campaign has seen: then it is
// read at once (Run's stepEvents), or at the next Step.
func (c *campaign) noteVersion(v int64) bool {
	for {
		cur := c.eventVersion.Load()
		if v <= max(cur, c.settings.Load().Version) {
			return false
		}
		if c.eventVersion.CompareAndSwap(cur, v) {
			c.newVersion.Store(true)
			return true
		}
	}
}
