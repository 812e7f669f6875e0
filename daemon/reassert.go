package daemon

import (
	"context"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// lostWrites handles a shard of the day that lost writes the ledger had
// acknowledged (Redis restarted from an older AOF or snapshot, or failed
// over to a lagging replica): our history is not the shard's, or it forgot
// a lease we hold. We freeze the shard for a lease window plus grace, so
// that nothing is granted from it while leases it forgot may still be
// spent; re-assert every lease we hold, so their budget comes out of what
// it can grant; take no new lease for the day meanwhile (we keep spending
// what we hold); and tell the fleet, so every daemon re-asserts its own.
func (c *campaign) lostWrites(ctx context.Context, now time.Time, ds *dayState, shard int, reason string) {
	cfg := c.cfg
	key := lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: shard}
	c.d.counters.lostWrites.Add(1)
	c.log.Error("the ledger lost acknowledged writes: freezing the shard and re-asserting the leases held",
		zap.Stringer("shard", key), zap.String("detail", reason))
	until := now.Add(cfg.LeaseWindow + cfg.Grace)
	cctx, cancel := context.WithTimeout(ctx, cfg.LedgerTimeout)
	sh, err := c.ledger.Freeze(cctx, key, until, now, reason)
	cancel()
	if err != nil {
		c.log.Warn("cannot freeze the shard; re-asserting anyway", zap.Stringer("shard", key), zap.Error(err))
	} else {
		ds.known[shard] = sh.History()
	}
	ds.holdCalls(until)
	c.reassertAll(ctx, now, ds)
	c.d.publish(pacer.Event{Kind: pacer.EventLostWrites, Campaign: c.id, Day: ds.day.Key})
	// A failover that lost these writes may have lost change records too:
	// every campaign reads its settings again rather than wait for its
	// periodic full read (CampaignReread).
	c.d.campaigns.each(func(o *campaign) { o.markStale() })
}

// reassertAll re-asserts every lease the day holds, its parked releases
// (park.go) and the releases not yet acknowledged; a failure makes the next
// tick try again.
func (c *campaign) reassertAll(ctx context.Context, now time.Time, ds *dayState) {
	for id, h := range ds.leases {
		k := lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: h.shard}
		if !c.reassertOne(ctx, now, k, lease.LeaseRecord{ID: id, Amount: h.amount, Holder: c.cfg.Holder, Expiry: h.expiry}) {
			ds.reassert.Store(true)
		}
	}
	for shard, p := range ds.parked {
		if p.renewal != nil && !c.reassertOne(ctx, now, c.shardKey(ds, shard), lease.LeaseRecord{ID: p.ID, Amount: p.Amount, Holder: c.cfg.Holder, Expiry: p.expiry}) {
			ds.reassert.Store(true)
		}
	}
	for _, r := range c.pending {
		if r.key.Day == ds.day.Key && r.amount > 0 {
			if !c.reassertOne(ctx, now, r.key, lease.LeaseRecord{ID: r.id, Amount: r.amount, Holder: c.cfg.Holder, Expiry: r.expiry}) {
				ds.reassert.Store(true)
			}
		}
	}
	c.reassertRan(ctx, now, ds)
}

// reassertRan re-asserts our run's totals on each shard of the day, after
// the leases we hold (runTotals).
func (c *campaign) reassertRan(ctx context.Context, now time.Time, ds *dayState) {
	if !c.d.reassertRun(ctx, now, c.id, ds.day.Key, c.log) {
		ds.reassert.Store(true)
	}
}

// knownOf is what we pass the ledger as our history with a shard of the
// day: the shard's (seq, tip) of our last reply, and our run's totals on it.
func (c *campaign) knownOf(ds *dayState, shard int) lease.History {
	h := ds.known[shard]
	t := c.d.ran.of(lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: shard})
	h.Granted, h.Returned = t.Granted, t.Returned
	return h
}

// reassertOne re-asserts one lease and reports whether the ledger answered.
func (c *campaign) reassertOne(ctx context.Context, now time.Time, k lease.ShardKey, lr lease.LeaseRecord) bool {
	if lr.Amount <= 0 {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	defer cancel()
	start := time.Now()
	got, _, err := c.ledger.Reassert(cctx, k, lr, now)
	c.d.observeLedger("reassert", start, err)
	switch {
	case err != nil:
		c.log.Warn("cannot re-assert a lease; retrying", zap.Stringer("shard", k), zap.String("lease", lr.ID), zap.Error(err))
		return false
	case got == lease.Rerecorded:
		c.d.counters.leasesReasserted.Add(1)
		c.log.Warn("re-asserted a lease the ledger had forgotten", zap.Stringer("shard", k), zap.String("lease", lr.ID), zap.Int64("amount", lr.Amount))
	}
	return true
}
