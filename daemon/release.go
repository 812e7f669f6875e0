package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// release is a lease release not yet acknowledged by the ledger; retried every
// tick (releases are idempotent) until the ledger answers or the lease is
// long past settlement.
type release struct {
	key            lease.ShardKey
	id             string
	amount, unused int64
	expiry         time.Time // the lease's, for re-asserting it
	until          time.Time
	// refunded: bidders' refunds reported with this release (refunds.go),
	// the same on every retry: the ledger records them once, with it.
	refunded int64
	// overdue: past until, still asked for its refunds' sake (logged once).
	overdue bool
}

func (c *campaign) releaseLease(ctx context.Context, now time.Time, r release) {
	r.refunded += c.takeRefunds(now, r.key.Day)
	if !c.tryRelease(ctx, now, &r) {
		c.pending = append(c.pending, r)
	}
}

// tryRelease reports whether the release is done with (acknowledged, or
// pointless to retry).
func (c *campaign) tryRelease(ctx context.Context, now time.Time, r *release) bool {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	defer cancel()
	start := time.Now()
	ds := c.day.Load()
	if ds != nil && ds.day.Key != r.key.Day {
		ds = nil // a lease of another day
	}
	known := c.d.ran.of(r.key)
	if ds != nil {
		known = c.knownOf(ds, r.key.Shard)
	}
	sh, err := c.ledger.ReleaseRefunded(ctx, r.key, r.id, r.unused, r.refunded, now, known)
	c.d.observeLedger("release", start, err)
	if err == nil {
		c.d.ran.add(r.key, 0, r.unused)
		if sh.Diverged && ds != nil { // released; but the shard lost writes we saw
			c.lostWrites(ctx, now, ds, r.key.Shard, fmt.Sprintf("release of %s: history or totals behind ours", r.id))
		}
	}
	switch {
	case err == nil:
		c.d.counters.leasesReleased.Add(1)
		c.d.journalClosed(r.id, r.unused)
		c.gaveBack(*r)
		return true
	case errors.Is(err, lease.ErrUnknownLease):
		// A lease we held and never released: the ledger forgot its grant.
		// Re-assert it, then release it, so its spent part stays counted.
		if ds := c.day.Load(); ds != nil && ds.day.Key == r.key.Day {
			c.lostWrites(ctx, now, ds, r.key.Shard, fmt.Sprintf("release of %s: %v", r.id, err))
		}
		if !c.reassertOne(ctx, now, r.key, lease.LeaseRecord{ID: r.id, Amount: r.amount, Holder: c.cfg.Holder, Expiry: r.expiry}) {
			return now.After(r.until)
		}
		return false // released on the next retry, now that the ledger has it again
	case errors.Is(err, lease.ErrLeaseSettled), errors.Is(err, lease.ErrDayNotOpen):
		c.log.Warn("lease release refused by the ledger", zap.Stringer("shard", r.key), zap.String("lease", r.id), zap.Error(err))
		c.d.journalClosed(r.id, 0)
		c.untakeRefunds(r.key.Day, r.refunded)
		return true
	case now.After(r.until) && r.refunded > 0 && c.dayIs(r.key.Day):
		// Past settlement, but the refunds it carries are recorded only if
		// one of its tries was applied: ask again, with the same id, until
		// the ledger answers released (recorded once, with it) or settled
		// (handed to the next release above), or the day ends.
		if !r.overdue {
			r.overdue = true
			c.log.Warn("lease release unanswered past its settlement; asking again for its refunds' sake", zap.Stringer("shard", r.key),
				zap.String("lease", r.id), zap.Int64("refunded_micros", r.refunded), zap.Error(err))
		}
	case now.After(r.until):
		// Its refunds, if any, belong to a day that is over: nothing can
		// take them now. Whether they were recorded depends on whether a
		// try was applied; they are never handed on, so never recorded twice.
		c.log.Warn("giving up on a lease release; the ledger settles it", zap.Stringer("shard", r.key), zap.String("lease", r.id), zap.Error(err))
		return true
	}
	return false
}

// dayIs reports whether day is the campaign's current day.
func (c *campaign) dayIs(day string) bool {
	ds := c.day.Load()
	return ds != nil && ds.day.Key == day
}

// gaveBack notes a released lease's unused micros: a sparse campaign's
// day that this host took for exhausted has budget again if they are
// enough for one of its SPENDs (smallestSpend). Its own last lease is not
// counted as held elsewhere (its SPENDs are decided against it here), so a
// host holding a day's last two bids, asked for a SPEND of three, finds the
// shards empty and the day exhausted; when that lease ended unspent, the
// bids went back to the ledger, and the host's next SPEND, an hour later, was told the
// day was over while they waited there (tiny scenario, seed 14: 5.6% of a
// 20-bid budget). A busy campaign's last crumbs are left to the reconciler,
// as heldElsewhere says.
func (c *campaign) gaveBack(r release) {
	ds := c.day.Load()
	if ds == nil || ds.day.Key != r.key.Day || r.key.Shard >= ds.shards || !c.sparse() || r.unused < c.smallestSpend() {
		return
	}
	ds.shardEmpty[r.key.Shard] = false
	if ds.exhausted.Swap(false) {
		c.log.Info("campaign-day has budget again: a lease gave back what it held", zap.String("day", ds.day.Key),
			zap.String("lease", r.id), zap.Int64("unused_micros", r.unused))
	}
}

// smallestSpend is the smallest SPEND this host has seen of the campaign,
// once it has seen a few (sparseSpends refill ticks with one); before that,
// at most half its typical SPEND: the smallest of one or two SPENDs says
// little about the next (the host that held a day's last 2,245 micros had
// seen one SPEND, of 3,699, and its next was of 938), but crumbs of a few
// hundred micros must not end a day's exhaustion (every SPEND after it
// would be paced, and ask the ledger, rather than told the day is over).
func (c *campaign) smallestSpend() int64 {
	least := max(c.minAmount.Load(), 1)
	if c.demandTickN < sparseSpends {
		least = min(least, max(c.typicalSpend()/2, 1))
	}
	return least
}

// retryReleases retries the releases not acknowledged yet, then resolves
// the grant calls whose answers were lost (whose leases it may release).
func (c *campaign) retryReleases(ctx context.Context, now time.Time) {
	kept := c.pending[:0]
	for _, r := range c.pending {
		if !c.tryRelease(ctx, now, &r) {
			kept = append(kept, r)
		}
	}
	c.pending = kept
	c.resolveAsks(ctx, now)
}

// dropDay revokes the day's bucket and releases every lease it held.
func (c *campaign) dropDay(ctx context.Context, now time.Time, ds *dayState) {
	if (ds.reassert.Load() || ds.reassertHint.Load()) && c.d.ran.has(c.id, ds.day.Key) {
		// A re-assertion still owed for the day (a lost-writes broadcast
		// not yet acted on, or a shard that lost our writes) is not dropped
		// with it: our run's totals answer it (Step's reassertAsked), as
		// for a broadcast that finds the day gone.
		c.d.ran.ask(c.id, ds.day.Key)
	}
	c.flushDemand(ctx, now, ds, time.Time{}, demandFlush) // the day's last minute of demand
	c.releaseParked(ctx, now, ds, true)
	closed := ds.b.Revoke(now)
	st := ds.b.Stats(now)
	c.requestedBase += st.Requested
	c.allowsBase.Add(st.Allows)
	c.flushed = bucket.Stats{} // the next day's bucket counts from zero
	for _, cl := range closed {
		h := ds.leases[cl.ID]
		delete(ds.leases, cl.ID)
		c.releaseLease(ctx, now, release{
			key: lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: h.shard},
			id:  cl.ID, amount: cl.Amount, unused: cl.Unused, expiry: h.expiry, until: h.expiry.Add(c.cfg.Grace + time.Minute),
		})
	}
}

// shutdown drops the campaign's day and releases its leases, returning the
// first release that did not go through.
func (c *campaign) shutdown(ctx context.Context, now time.Time) error {
	c.loopMu.Lock()
	defer c.loopMu.Unlock()
	if ds := c.day.Load(); ds != nil {
		c.dropDay(ctx, now, ds)
		c.day.Store(nil)
	}
	c.retryReleases(ctx, now)
	if n := len(c.pending); n > 0 {
		return fmt.Errorf("campaign %q: %d lease releases not acknowledged; the ledger settles them after expiry", c.id, n)
	}
	return nil
}
