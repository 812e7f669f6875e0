package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// A grant or renewal call leases micros in the ledger before its answer
// reaches the daemon, and the daemon feeds a lease into its bucket only
// once the answer is in (and journaled, feed). Between the two, a lost
// answer (a timeout, a connection cut after the call went out) or a crash
// leaves the ledger holding a lease that no bucket drips: nothing of it can
// have been spent, and without this it would expire and be settled as
// spent, lost to the day. So the daemon journals each ask before its call
// (Journal.Asked), and an ask whose answer it did not get is resolved by
// looking the lease up by its id: if the ledger holds it, it is released
// whole, with all of it unused; if not, the grant never applied (or was
// closed already), and there is nothing to give back. This tick's daemon
// resolves its own lost answers (resolveAsks); a restarted one, its dead
// predecessor's asks (reclaimAsks).

// ask is a grant or renewal call whose answer was lost.
type ask struct {
	key    lease.ShardKey
	id     string
	expiry time.Time // the lease's, had it been granted
	until  time.Time // past this, the reconciler has settled it
}

// lostAnswer notes a grant or renewal call whose answer was lost: resolved
// at the campaign's next ledger tick (resolveAsks).
func (c *campaign) lostAnswer(req lease.GrantRequest) {
	c.unanswered = append(c.unanswered, ask{key: req.Shard, id: req.LeaseID, expiry: req.Expiry,
		until: req.Expiry.Add(c.cfg.Grace + time.Minute)})
}

// resolveAsks resolves the calls whose answers were lost: each lease the
// ledger holds is released whole; each it does not hold was never granted.
// While the ledger does not answer (an outage makes an ask of every grant
// tried), a tick spends at most one lookup on them.
func (c *campaign) resolveAsks(ctx context.Context, now time.Time) {
	done := 0
	for _, a := range c.unanswered {
		resolved, answered := c.resolveAsk(ctx, now, a)
		if resolved {
			done++
		}
		if !answered {
			break
		}
	}
	c.unanswered = append(c.unanswered[:0], c.unanswered[done:]...)
}

// resolveAsk reports whether the ask is done with, and whether the ledger
// answered its lookup.
func (c *campaign) resolveAsk(ctx context.Context, now time.Time, a ask) (resolved, answered bool) {
	if now.After(a.until) { // as a release given up on (tryRelease)
		c.log.Warn("giving up on a grant whose answer was lost; the ledger has settled it if it was granted",
			zap.Stringer("shard", a.key), zap.String("lease", a.id))
		c.d.journalClosed(a.id, 0)
		return true, true
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	rec, found, err := c.ledger.LeaseOf(cctx, a.key, a.id)
	cancel()
	switch {
	case err != nil:
		return false, false
	case !found:
		c.d.journalClosed(a.id, 0)
		return true, true
	}
	c.d.ran.add(a.key, rec.Amount, 0) // the shard recorded it
	c.log.Warn("a lease granted by a call whose answer was lost is given back whole",
		zap.Stringer("shard", a.key), zap.String("lease", a.id), zap.Int64("amount", rec.Amount))
	c.releaseLease(ctx, now, release{key: a.key, id: a.id, amount: rec.Amount, unused: rec.Amount, expiry: rec.Expiry, until: a.until})
	return true, true
}

// journalAsked records a lease asked for, before the call that may grant it.
func (d *Daemon) journalAsked(req lease.GrantRequest) {
	if d.cfg.Journal == nil {
		return
	}
	if err := d.cfg.Journal.Asked(JournalAsk{ID: req.LeaseID, Key: req.Shard, Expiry: req.Expiry}); err != nil {
		d.log.Warn("cannot journal a lease ask; a crash during its call would cost the lease", zap.String("lease", req.LeaseID), zap.Error(err))
	}
}

// reclaimAsks resolves the asks a previous run left unanswered (it died
// during the call, or before it could resolve a lost answer): a lease the
// ledger holds is released whole, since the dead run never fed it into a
// bucket (its G line would have answered the ask). It returns the micros
// given back; an ask it cannot resolve stays in the journal for the next
// run (the reconciler settles the lease meanwhile).
func (d *Daemon) reclaimAsks(ctx context.Context, j *Journal, now time.Time) (int64, error) {
	var back int64
	var errs []error
	for _, a := range j.Asks() {
		if leaseRun(a.ID) == d.cfg.Holder+"-"+d.bootID {
			continue // this run's own: resolveAsks
		}
		cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
		rec, found, err := d.ledger.LeaseOf(cctx, a.Key, a.ID)
		if err == nil && found {
			_, err = d.ledger.Release(cctx, a.Key, a.ID, rec.Amount, now)
		}
		cancel()
		switch {
		case err == nil && found:
			j.Released(a.ID, rec.Amount)
			back += rec.Amount
			d.log.Warn("gave back whole a lease the previous run was granted but had not fed (it died during the call)",
				zap.Stringer("shard", a.Key), zap.String("lease", a.ID), zap.Int64("amount", rec.Amount))
		case err == nil, errors.Is(err, lease.ErrLeaseSettled), errors.Is(err, lease.ErrUnknownLease), errors.Is(err, lease.ErrDayNotOpen):
			j.Closed(a.ID)
		default:
			errs = append(errs, err)
		}
	}
	return back, errors.Join(errs...)
}
