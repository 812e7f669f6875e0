package daemon

import (
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
)

// fetchable reports whether a lease could be fetched for the campaign now:
// a day open here and not over, not exhausted, refused or paused (a paced
// SPEND of a sparse campaign, SparseWait on).
func (c *campaign) fetchable(now time.Time) bool {
	ds := c.day.Load()
	return ds != nil && !ds.exhausted.Load() && !ds.refused.Load() && !now.Before(ds.day.Start) &&
		now.Add(c.cfg.SkewBound+time.Second).Before(ds.day.End) && c.settings.Load().State == lease.StateActive
}

// forgetDenial takes back the bucket's count of a denied SPEND that is
// decided again (after a fetch, or by a goroutine that may wait): the
// demand the refill loop measures counts each SPEND once.
func (c *campaign) forgetDenial(amount int64) {
	if ds := c.day.Load(); ds != nil {
		ds.b.ForgetDenial(amount)
	}
}

// spendAgain decides a paced SPEND again once a lease was fetched for it.
func (c *campaign) spendAgain(now time.Time, amount int64, auctionID string) pacer.Decision {
	c.forgetDenial(amount)
	return c.spend(now, amount, auctionID)
}

// fetchFor asks the ledger for a lease that covers a SPEND of amount that
// the bucket cannot, for a campaign sparse on this host (SparseWait on),
// waits for it at most SparseWait, and reports whether the bucket now holds
// amount. The lease is an ordinary grant under the shard's plan and cap, of
// what the SPEND lacks; it lasts a lease window, and what is not spent goes
// back when it ends. While the refill loop works
// on the campaign, or one fetch is already in flight, nothing is asked and
// the SPEND is paced. The ledger call itself runs to its usual timeout: cut
// short at SparseWait, a grant that landed in Redis would be lost to the
// host until the reconciler settled it as spent; finished in the background,
// it serves the campaign's next SPENDs instead.
func (c *campaign) fetchFor(now time.Time, amount int64) bool {
	if !c.fetchable(now) || !c.loopMu.TryLock() {
		return false
	}
	d := c.d
	d.workMu.Lock() // Close waits for the fetch, which may grant a lease
	if d.closed.Load() {
		d.workMu.Unlock()
		c.loopMu.Unlock()
		return false
	}
	d.work.Add(1)
	d.workMu.Unlock()
	done := make(chan struct{})
	go func() {
		defer d.work.Done()
		defer close(done)
		defer c.loopMu.Unlock()
		ds := c.day.Load()
		if ds == nil || ds.closed || now.Before(ds.callsHeldUntil) || ds.throttled(now) || ds.spendAhead() || !c.sparse() {
			return
		}
		// Past the refill loop's pacing only for a shard that said it had
		// what the SPEND lacks (callsHeldUntil says why).
		covering, known := ds.shardCovering(amount - ds.b.Stats(now).Tokens)
		if !known && now.Before(ds.nextGrantAt) {
			return
		}
		// A fetched lease is the SPEND's, not the host's drip: it does not
		// move when the next regular lease is due.
		defer func(last time.Time) { ds.lastGrantAt = last }(ds.lastGrantAt)
		// Each shard paces its own part of the day: one whose fleet has run
		// a bid ahead of its curve refuses, while another may not have.
		// pickShard takes the one asked longest ago, so each try is another.
		// All of what the SPEND lacks, or nothing: parts from several shards
		// that do not add up to it are budget the SPEND cannot use, held on
		// this host for a lease window while other hosts' SPENDs could.
		for i := range ds.shards {
			held := ds.b.Stats(now).Tokens
			if held >= amount || ds.closed || ds.refused.Load() || (i > 0 && len(ds.leases) >= bucket.MaxFeeds) {
				return // (a full bucket: grant asked nothing)
			}
			shard, ok := ds.pickShard()
			if i == 0 && known {
				shard, ok = covering, true
			}
			if !ok {
				return
			}
			d.counters.sparseFetches.Add(1)
			c.grant(d.life, now, c.settings.Load(), ds, shard, amount-held, amount-held, false, nil)
		}
	}()
	late, stop := newTimer(c.cfg.Clock, c.cfg.SparseWait)
	defer stop()
	select {
	case <-done:
	case <-late:
		d.counters.sparseFetchesLate.Add(1)
		return false
	}
	ds := c.day.Load()
	return ds != nil && ds.b.Stats(now).Tokens >= amount
}
