package daemon

import (
	"github.com/pacer/pacer/transport"
	"go.uber.org/zap"
)

// Publisher sends fleet broadcasts; *transport.Broadcaster satisfies it.
type Publisher interface {
	Publish(transport.Event) error
}

var _ Publisher = (*transport.Broadcaster)(nil)

func (d *Daemon) publish(e transport.Event) {
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
func (d *Daemon) HandleEvent(e transport.Event) {
	c, ok := d.campaigns.get(e.Campaign)
	if !ok {
		return
	}
	switch e.Kind {
	case transport.EventExhausted:
		// A hint, never a verdict: anyone on the bus can send it, and a stale
		// one must not stop a campaign that has budget again. The loop reads
		// the shards on its next tick; only their answer sets exhausted.
		if ds := c.day.Load(); ds != nil && ds.day.Key == e.Day {
			ds.confirm.Store(true)
		}
	case transport.EventRevoked:
		// Deny at once; the loop drops the tokens, releases the leases and
		// re-reads the settings, and lifts this once it has.
		c.revoked.Store(true)
		c.forceRefresh.Store(true)
	case transport.EventChanged:
		c.forceRefresh.Store(true)
	case transport.EventLostWrites:
		// Re-asserting is idempotent and costs one call per lease held, so
		// a forged event costs little; a true one keeps the fleet's leases
		// out of what the ledger can grant again.
		if ds := c.day.Load(); ds != nil && ds.day.Key == e.Day {
			ds.reassert.Store(true)
		}
	}
}
