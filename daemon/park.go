package daemon

import (
	"context"
	"time"

	"github.com/pacer/pacer/lease"
)

// Parked releases. A host whose campaign's shards grant it less than it
// asks (a budget-bound campaign: its bidders ask more than its curve
// releases) asks one shard every quarter window, the one it asked longest
// ago (pace.HoldAfter, dayState.pickShard), so on 8 shards it comes back to
// a shard two windows after it was granted there, a window after that lease
// ended. Each lease used to cost a grant and, at its end, a release of its
// own. Now such a lease is granted with its ledger expiry a park window
// past the end of its spending, and when it ends spent out with no
// successor on its shard, its release waits for the host's next grant on
// that shard and rides it as a renewal: one ledger call where it took two.
//
// The rules, each for a stated reason:
//   - Only a lease granted while the host's last grant was short has the
//     park window (ds.short): a host whose shards fill its asks renews each
//     lease on its own shard as it ends, and its leases, should it crash,
//     are settled no later than before.
//   - Only a lease spent out (unused at most 1/32 of it) whose shard said
//     it had at least as much again left waits: micros worth having go back
//     to the shard at once, for any host to take, and a shard running dry
//     gets no visit to wait for (a day is exhausted only when no lease of
//     it is open anywhere).
//   - One release waits per shard; it goes on its own a tick and the skew
//     bound before its lease's ledger expiry at the latest, or when the day
//     is dropped (a new day, a pause, a budget cut, the campaign retired,
//     shutdown). The shard's idle check waits for it: that call compares
//     our history with the shard's as any lease call does (idlecheck.go).
//
// The invariant: a parked lease is closed in the bucket (nothing more is
// spent from it) and still open in the ledger and the journal; it is
// released, by a renewal or on its own, before the ledger could settle it,
// with the unused micros its bucket computed when it closed. While it
// waits, the ledger counts it leased, which every rule of pacing and money
// counts as the spent it nearly all is; a shard that lost writes has it
// re-asserted with the leases held (reassertAll); a restart finds it open
// in the journal and gives back what its drip had not (nothing: it ended).

// ParkWindow is how long past the end of its spending a lease granted to a
// host its shards grant short stays open in the ledger: a lease window and
// a half, so that a host back at the shard two windows after a grant (a
// budget-bound host on 8 shards, asking one a quarter window; a tick or two
// later on a simulator's 2-s steps) finds the lease still open.
func ParkWindow(leaseWindow time.Duration) time.Duration {
	return leaseWindow + leaseWindow/2
}

// parkedRelease is a parked lease's release: the renewal its shard's next
// grant makes, and when it must go on its own.
type parkedRelease struct {
	*renewal
	deadline time.Time
}

// parkRelease parks the release of h, a regular lease that ended without a
// successor on its shard, or releases it now (the rules above).
func (c *campaign) parkRelease(ctx context.Context, now time.Time, ds *dayState, h heldLease, r *renewal) {
	key := c.shardKey(ds, h.shard)
	deadline := h.expiry.Add(-c.cfg.SkewBound - c.cfg.TickInterval)
	if !deadline.After(now) || r.Unused > r.Amount/32 || ds.shardRead[h.shard].Left < r.Amount {
		c.releaseLease(ctx, now, r.release(key, h.expiry.Add(c.cfg.Grace+time.Minute)))
		return
	}
	if old := ds.parked[h.shard]; old.renewal != nil {
		c.releaseLease(ctx, now, old.release(key, old.expiry.Add(c.cfg.Grace+time.Minute)))
	}
	ds.parked[h.shard] = parkedRelease{renewal: r, deadline: deadline}
	c.d.ran.writesBy(key, deadline) // no idle check before it goes (idlecheck.go)
}

// takeParked returns the release parked on shard, if any, for a grant
// there to renew.
func (ds *dayState) takeParked(shard int) *renewal {
	r := ds.parked[shard].renewal
	ds.parked[shard] = parkedRelease{}
	return r
}

// releaseParked releases on their own the parked releases due by now, or
// all of them.
func (c *campaign) releaseParked(ctx context.Context, now time.Time, ds *dayState, all bool) {
	for shard, p := range ds.parked {
		if p.renewal != nil && (all || !now.Before(p.deadline)) {
			ds.parked[shard] = parkedRelease{}
			c.releaseLease(ctx, now, p.release(c.shardKey(ds, shard), p.expiry.Add(c.cfg.Grace+time.Minute)))
		}
	}
}

// shardKey names the day's shard.
func (c *campaign) shardKey(ds *dayState, shard int) lease.ShardKey {
	return lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: shard}
}
