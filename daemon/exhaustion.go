package daemon

import (
	"context"
	"slices"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// shardDrained marks a shard of the day empty and, when every shard is, the
// day exhausted for this host, once nothing that could come back unused is
// leased out either; until then the next settings refresh has the shards
// looked at again (refill loop).
func (c *campaign) shardDrained(ctx context.Context, now time.Time, ds *dayState, shard int) {
	ds.shardEmpty[shard] = true
	if slices.Contains(ds.shardEmpty, false) || c.heldElsewhere(now, ds, ds.unspent()-ds.remaining()) >= max(c.minAmount.Load(), 1) {
		return
	}
	if !ds.exhausted.Swap(true) {
		ds.checkedAt = now
		c.log.Info("campaign-day exhausted", zap.String("day", ds.day.Key))
		c.publishExhausted(ctx, ds)
	}
}

// publishExhausted broadcasts that the day is exhausted if this daemon is
// the fleet's first to find it (one event per campaign-day, not one per
// daemon); if the ledger cannot say, it broadcasts anyway: a duplicate hint
// costs a shard read, a missing one only a later look (refill loop).
func (c *campaign) publishExhausted(ctx context.Context, ds *dayState) {
	if c.cfg.Publisher == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	first, err := c.ledger.ClaimExhausted(cctx, c.id, ds.day.Key, c.cfg.Holder)
	cancel()
	if err == nil && !first {
		return
	}
	c.d.publish(pacer.Event{Kind: pacer.EventExhausted, Campaign: c.id, Day: ds.day.Key})
}

// recheckExhaustion asks the ledger whether the campaign-day has budget left,
// when this daemon believes it has none (every CampaignRefresh, while bids
// for the campaign keep coming: a bidder that stops on -1 stops the reads
// too) or a broadcast says so (at most every Config.EventRecheck, so a flood of broadcasts
// costs a few reads, never a -1). Only the ledger's answer sets or clears
// exhausted. It reads the shards (HMGET: no script, no audit entry) rather
// than asking one shard for a grant: budget released by another daemon sits
// on the shard its lease came from, which a grant on a random shard would
// find one time in N.
func (c *campaign) recheckExhaustion(ctx context.Context, now time.Time, ds *dayState) {
	cfg := c.cfg
	switch {
	case ds.exhausted.Load():
		if now.Sub(ds.checkedAt) < cfg.CampaignRefresh || !c.lastDemandAt.After(ds.checkedAt) {
			return
		}
	case ds.confirm.Load():
		if now.Sub(ds.checkedAt) < cfg.EventRecheck {
			return
		}
	default:
		return
	}
	ds.confirm.Store(false)
	ds.checkedAt = now
	ctx, cancel := context.WithTimeout(ctx, cfg.LedgerTimeout)
	defer cancel()
	answers := make([]lease.Shard, ds.shards)
	unspent := int64(0)
	for i := range answers {
		start := time.Now()
		sh, err := c.ledger.ReadShard(ctx, lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: i})
		c.d.observeLedger("read", start, err)
		if err != nil {
			c.log.Warn("cannot read the campaign-day's shards; keeping what we believe", zap.Error(err))
			return
		}
		answers[i] = sh
		ds.shardUnspent[i] = sh.Unspent()
		unspent += sh.Unspent() - sh.Remaining()
	}
	// A shard's leftover smaller than any SPEND this daemon has seen cannot
	// be spent from one lease: leasing it would only pass it from daemon to
	// daemon, one lease window at a time. Such crumbs count as nothing (the
	// reconciler's rebalance can gather them).
	spendable := int64(0)
	smallest := max(c.minAmount.Load(), 1)
	for i, sh := range answers {
		r := sh.Remaining()
		ds.read(i, sh, now)
		ds.shardEmpty[i] = r == 0
		if r >= smallest {
			spendable += r
		}
	}
	// Budget leased out may come back unused (a sparse campaign's standing
	// bids, the last leases of a day): until it is spent, bids are paced,
	// not told the day is over.
	elsewhere := c.heldElsewhere(now, ds, unspent)
	switch {
	case (spendable > 0 || elsewhere >= smallest) && ds.exhausted.Swap(false):
		ds.nextGrantAt = time.Time{} // a hold for shards that had nothing ends with the news
		c.log.Info("campaign-day has budget again; leasing", zap.String("day", ds.day.Key),
			zap.Int64("spendable_micros", spendable), zap.Int64("leased_elsewhere_micros", elsewhere))
	case spendable == 0 && elsewhere < smallest && !ds.exhausted.Swap(true):
		c.log.Info("campaign-day exhausted (read from the ledger)", zap.String("day", ds.day.Key))
	}
}
