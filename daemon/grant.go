package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
	"go.uber.org/zap"
)

// renewal is the lease a grant renews: closed in the bucket and gone from
// the day's leases, released by the renewal's ledger call.
type renewal struct {
	bucket.Closed
	expiry   time.Time
	refunded int64 // bidders' refunds the renewal reports (refunds.go)
}

// release returns the ending lease's release, to be done on its own.
func (r *renewal) release(key lease.ShardKey, until time.Time) release {
	return release{key: key, id: r.ID, amount: r.Amount, unused: r.Unused, expiry: r.expiry, until: until, refunded: r.refunded}
}

// grantCall is one grant on its way: the request, and what answering it
// needs.
type grantCall struct {
	req      lease.GrantRequest
	shard    int
	standing bool
	least    int64
	ending   *renewal
	end      time.Time // the lease's spending ends (its bucket feed's end)
}

// release is the call's lease given straight back, unspent.
func (g *grantCall) release(c *campaign, amount int64) release {
	return release{key: g.req.Shard, id: g.req.LeaseID, amount: amount, unused: amount, expiry: g.req.Expiry,
		until: g.req.Expiry.Add(c.cfg.Grace + time.Minute)}
}

// grant asks the ledger for a new lease on shard of up to want micros, and
// at least least (0: any part of it); with ending set, it renews: the ending
// lease is released in the same call. Three phases: the request
// (grantRequest), the answer (answered: errors and what the shard said),
// and the bucket (feed).
func (c *campaign) grant(ctx context.Context, now time.Time, s *settings, ds *dayState, shard int, want, least int64, standing bool, ending *renewal) {
	cfg := c.cfg
	key := lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: shard}
	ds.shardAskedAt[shard] = now
	if ending == nil && len(ds.leases) >= bucket.MaxFeeds {
		// Every feed of the bucket is open: the bucket would refuse a new
		// lease (bucket.ErrTooManyFeeds) and the host give it straight
		// back, a grant and a release that move no money. Nothing is
		// asked; the host waits as after a shard's answer of nothing, and
		// the shard's turn passes as if asked (condition 13).
		c.d.counters.unaskedBucketFull.Add(1)
		ds.holdCalls(now.Add(pace.HoldAfter(pace.Answer{Want: want, Window: cfg.LeaseWindow})))
		return
	}
	if ending == nil {
		ending = ds.takeParked(shard) // its release rides this grant (park.go)
	}
	if c.d.ledgerRefusal(ctx) != nil { // the gate logs why; retried next tick, from memory
		if ending != nil { // the ending lease's unused micros still go back
			c.releaseLease(ctx, now, ending.release(key, now.Add(cfg.LeaseWindow+cfg.Grace+time.Minute)))
		}
		return
	}
	call := &grantCall{shard: shard, standing: standing, least: least, ending: ending,
		req: c.grantRequest(now, s, ds, key, want, least, standing)}
	call.end = c.spendEnd(now, ds, standing).Add(-cfg.SkewBound)
	c.d.journalAsked(call.req) // answered by the G line (feed) or a C line
	cctx, cancel := context.WithTimeout(ctx, cfg.LedgerTimeout)
	defer cancel()
	var g lease.Grant
	var err error
	if ending != nil {
		g, err = c.renew(ctx, cctx, now, ds, key, ending, call.req)
	} else {
		start := time.Now()
		g, err = c.ledger.Grant(cctx, call.req)
		c.d.observeLedger("grant", start, err)
	}
	switch {
	case c.answered(ctx, now, ds, call, g, err):
		c.feed(ctx, now, ds, call, g)
	case errors.Is(err, lease.ErrNoAnswer):
		c.lostAnswer(call.req) // maybe granted: looked up next tick
	case g.Granted == 0:
		c.d.journalClosed(call.req.LeaseID, 0) // answered: nothing granted
	}
}

// spendEnd is when a lease granted now may be spent until, before the
// skew bound is taken off: a lease window on (a standing window for a
// standing bid), midnight at the latest.
func (c *campaign) spendEnd(now time.Time, ds *dayState, standing bool) time.Time {
	end := now.Add(c.cfg.LeaseWindow)
	if standing {
		end = now.Add(c.cfg.StandingWindow)
	}
	if last := ds.day.End.Add(c.cfg.SkewBound); end.After(last) {
		end = last // spendable until midnight at the latest
	}
	return end
}

// grantRequest is the ledger request for a lease of want micros on key:
// where the curve stands now and a cap window on for the shard's release
// rule, how far ahead of it the shard may let the fleet run (aheadMicros),
// the catch-up and hour bounds, the fair share.
func (c *campaign) grantRequest(now time.Time, s *settings, ds *dayState, key lease.ShardKey, want, least int64, standing bool) lease.GrantRequest {
	cfg := c.cfg
	expiry := c.spendEnd(now, ds, standing)
	if !standing && least == 0 && ds.short {
		// A regular lease of a host its shards grant short stays open a
		// park window more in the ledger, for its release to ride the
		// host's next grant on its shard (park.go); it is spent until
		// spendEnd, less the skew bound.
		expiry = expiry.Add(ParkWindow(cfg.LeaseWindow))
		if last := ds.day.End.Add(cfg.SkewBound); expiry.After(last) {
			expiry = last
		}
	}
	id := cfg.Holder + "-" + c.d.bootID + "-" + strconv.FormatUint(c.d.leaseSeq.Add(1), 36)
	req := lease.GrantRequest{
		Shard: key, LeaseID: id, Holder: cfg.Holder, Want: want, Expiry: expiry, Now: now,
		Pace: lease.Pace{Now: ds.curve.AtTime(now, ds.day), Cap: ds.curve.AtTime(now.Add(cfg.CapWindow), ds.day),
			Unit: min(c.unit(), lease.MaxBudgetMicros), Ahead: min(c.aheadMicros(now, ds, s.DailyMicros), lease.MaxBudgetMicros), CatchUpPermille: c.catchUpPermille(now, ds), Shards: int64(ds.shards)},
		Grace: cfg.Grace, DayStart: ds.day.Start, Known: c.knownOf(ds, key.Shard),
	}
	c.hourPace(&req.Pace, now, s, ds)
	if !ds.unsplit {
		req.Demand, req.DemandTTL = c.fairDemand(ds)
	}
	if standing {
		// A typical SPEND or nothing: a sliver serves no SPEND, and slivers
		// held on several hosts keep a campaign's last bids where none can
		// be spent. Not the whole bid (the largest recent SPEND): all of it
		// or nothing starves hosts the shard could serve.
		req.Min = min(want, c.typicalSpend())
	}
	if least > 0 {
		req.Min = least
	}
	return req
}

// answered handles the ledger's answer to call: errors, what the shard
// said of itself, a grant of nothing. It reports whether a lease was
// granted to feed into the bucket.
func (c *campaign) answered(ctx context.Context, now time.Time, ds *dayState, call *grantCall, g lease.Grant, err error) bool {
	cfg, key, shard := c.cfg, call.req.Shard, call.shard
	c.d.ran.add(key, g.Granted, 0) // the shard recorded it, whatever follows
	if errors.Is(err, lease.ErrNotDurable) && g.Granted > 0 {
		c.log.Warn("lease not acknowledged by the replicas; releasing it unspent", zap.String("lease", call.req.LeaseID), zap.Error(err))
		c.releaseLease(ctx, now, call.release(c, g.Granted))
	}
	switch {
	case errors.Is(err, lease.ErrLedgerDiverged):
		c.lostWrites(ctx, now, ds, shard, err.Error())
		return false
	case errors.Is(err, lease.ErrDayClosed):
		c.log.Info("the ledger has closed this campaign-day; no more leases from it", zap.String("day", ds.day.Key))
		ds.closed = true
		return false
	case g.Shard.Seq > 0 && !g.Shard.Diverged:
		ds.known[shard] = g.Shard.History()
	}
	if errors.Is(err, lease.ErrDayNotOpen) && c.seenDays[ds.day.Key] {
		c.log.Error("ledger lost an open campaign-day; refusing to spend from it", zap.String("day", ds.day.Key))
		ds.refused.Store(true)
		return false
	}
	if err != nil {
		c.log.Warn("lease grant failed", zap.Stringer("shard", key), zap.Error(err))
		ds.holdCalls(now.Add(cfg.LeaseWindow / 8))
		return false
	}
	ds.shardFilled[shard] = g.Granted == call.req.Want
	ds.short = g.Granted < call.req.Want
	ds.read(shard, g.Shard, now)
	ds.shardUnspent[shard] = g.Shard.Unspent()
	ds.shardAvailable[shard] = 0
	if g.Granted == 0 {
		ds.shardAvailable[shard] = g.Shard.Available // less than we asked for
		if g.Shard.Remaining() == 0 {
			c.shardDrained(ctx, now, ds, shard)
		}
		ds.nextGrantAt = now.Add(pace.HoldAfter(pace.Answer{Want: call.req.Want, Standing: call.standing, Window: cfg.LeaseWindow,
			Starting: c.sweeping(now, ds) && g.Shard.Locked > 0}))
		return false
	}
	c.d.counters.leasesGranted.Add(1)
	if held := ds.b.Stats(now); !call.standing && !c.sparse() &&
		g.Granted+g.Shard.Remaining()+held.Tokens+held.Reserve < max(c.minAmount.Load(), 1) {
		// The shard's last crumbs, with what this host holds, are less than
		// any SPEND seen here: as good as empty for a busy campaign.
		c.shardDrained(ctx, now, ds, shard)
	}
	return true
}

// feed puts a granted lease into the bucket: journaled first, so a crash
// from then on gives back what was not dripped (Reclaim).
func (c *campaign) feed(ctx context.Context, now time.Time, ds *dayState, call *grantCall, g lease.Grant) {
	cfg, id := c.cfg, call.req.LeaseID
	end := call.end
	dripFrom, dripEnd, carried := c.dripSpan(now, ds, call, g, end)
	// Size the bucket for the new drip, and what it credits at once, before
	// it starts: what arrives while the bucket is full is forgone.
	st := ds.b.Stats(now)
	rate := float64(g.Granted) / dripEnd.Sub(dripFrom).Seconds()
	atOnce := int64(min(rate*now.Sub(dripFrom).Seconds(), float64(g.Granted)))
	ds.b.SetCapacity(max(st.Capacity, c.capacity(st.DripPerSecond+int64(min(rate, math.MaxInt64/2))), min(st.Tokens, math.MaxInt64-atOnce)+atOnce))
	c.d.journalGranted(JournalLease{ID: id, Key: call.req.Shard, Amount: g.Granted, DripStart: dripFrom, DripEnd: dripEnd, Expiry: call.req.Expiry})
	if err := ds.b.AddGrant(now, bucket.Grant{ID: id, Amount: g.Granted, Start: dripFrom, End: end, DripEnd: dripEnd}); err != nil {
		// Cannot happen with a well-formed grant into a bucket with a feed
		// free (grant asks for none into a full one); give it straight back.
		c.log.Error("bucket refused a lease; releasing it", zap.String("lease", id), zap.Error(err))
		ds.holdCalls(now.Add(cfg.LeaseWindow / 8)) // not again next tick
		c.releaseLease(ctx, now, call.release(c, g.Granted))
		return
	}
	held := heldLease{shard: call.shard, amount: g.Granted, expiry: call.req.Expiry, end: end, fetched: call.least > 0 && !call.standing}
	if span := end.Sub(now).Seconds(); span > 0 {
		held.drip = int64(min(float64(g.Granted)/span, math.MaxInt64/2))
	}
	held.swept = ds.plan.Starting && g.Granted < call.req.Want && !dripEnd.After(now)
	ds.leases[id] = held
	ds.lastGrantAt = now
	ds.answer = g.Granted
	if call.standing || call.least > 0 { // a standing bid, or a fetch
		c.shareThrottle(now, ds, g.Granted-carried)
	}
	if hold := pace.HoldAfter(pace.Answer{Want: call.req.Want, Granted: g.Granted, Standing: call.standing, Supplied: ds.supplied(now), Window: cfg.LeaseWindow}); hold > 0 {
		ds.nextGrantAt = now.Add(hold)
	}
}

// dripSpan is when a granted lease drips, from dripFrom to dripEnd (its
// end, end, at the latest), and how much of it carries on what an ended
// lease took with it (ds.carry): the controller's rule (pace.Drip), given
// what the lease credits at once: what it carries on and, when the tick
// came after the ended lease's end (ds.late), the drip missed since
// (pace.LateCredit), or the start credit of a host starting its supply
// (the controller's StartCredit) if more.
// The leases of one tick (a sweep's round) share one start credit.
func (c *campaign) dripSpan(now time.Time, ds *dayState, call *grantCall, g lease.Grant, end time.Time) (dripFrom, dripEnd time.Time, carried int64) {
	carried = min(ds.carry, g.Granted)
	ds.carry -= carried
	atOnce := min(carried+pace.LateCredit(g.Granted, ds.late, c.cfg.BurstWindow, end.Sub(now)), g.Granted)
	ds.late = 0 // the first successor's alone
	if ds.plan.Starting {
		credit := min(ds.startLeft, g.Granted)
		ds.startLeft -= credit
		atOnce = max(atOnce, credit)
	}
	from, to := pace.Drip(pace.DripInput{Granted: g.Granted, AtOnce: atOnce, Bid: c.unit(), Standing: call.standing,
		LastOfShard: g.Shard.Remaining() == 0, Span: end.Sub(now), Window: c.cfg.LeaseWindow, Burst: c.cfg.BurstWindow})
	return now.Add(from), now.Add(to), carried
}

// renew asks the ledger for req in the call that releases the ending lease
// (one script: both halves happen or neither), and sees to the ending lease:
// released, or to be released on its own. A renewal whose release half
// finds the ending lease unknown means the ledger forgot it, though it was
// ours and unsettled (in our bucket until now): as a release that finds it
// unknown (tryRelease), it is re-asserted, by lostWrites, which re-asserts
// the releases pending, and then released, so that the part our SPENDs took
// stays counted spent. The error returned is the grant half's.
func (c *campaign) renew(ctx, cctx context.Context, now time.Time, ds *dayState, key lease.ShardKey, ending *renewal, req lease.GrantRequest) (lease.Grant, error) {
	ending.refunded += c.takeRefunds(now, key.Day)
	req.Refunded = ending.refunded
	start := time.Now()
	g, err := c.ledger.Renew(cctx, ending.ID, ending.Unused, req)
	c.d.observeLedger("renew", start, err)
	until := now.Add(c.cfg.LeaseWindow + c.cfg.Grace + time.Minute)
	unknown := errors.Is(err, lease.ErrUnknownLease)
	if unknown {
		c.pending = append(c.pending, ending.release(key, until))
	}
	if unknown || g.Shard.Diverged {
		c.lostWrites(ctx, now, ds, key.Shard, fmt.Sprintf("renewal of %s: %v", ending.ID, err))
	}
	switch {
	case unknown:
		return g, nil // the grant half is the script's answer
	case err == nil || errors.Is(err, lease.ErrLeaseSettled) || errors.Is(err, lease.ErrNotDurable) ||
		errors.Is(err, lease.ErrDayClosed) || errors.Is(err, lease.ErrShardFrozen) || errors.Is(err, lease.ErrLedgerDiverged):
		// The release half happened whatever became of the grant.
		c.d.counters.leasesReleased.Add(1)
		c.d.journalClosed(ending.ID, returnedBy(err, ending.Unused))
		if !errors.Is(err, lease.ErrLeaseSettled) {
			c.d.ran.add(key, 0, ending.Unused)
		}
		if errors.Is(err, lease.ErrLeaseSettled) {
			c.log.Warn("lease was settled before we released it", zap.String("lease", ending.ID), zap.Error(err))
			c.untakeRefunds(key.Day, ending.refunded) // the release entry was the settlement's
			err = nil
		}
	default:
		c.pending = append(c.pending, ending.release(key, until)) // neither half happened
	}
	return g, err
}
