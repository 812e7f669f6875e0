package daemon

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
)

// The campaign-day: the state of the one day this daemon spends from, and
// the small questions the refill loop asks of it.

// dayState is the campaign-day this daemon is spending from.
type dayState struct {
	day bucket.Day
	// curve is the pacing curve of this day: the campaign's, or the one
	// fitted for the day if its curve is "auto".
	curve  *bucket.Curve
	b      *bucket.Bucket
	shards int

	// exhausted: the ledger said every shard is empty. A hint, not a verdict:
	// SPEND answers -1 once the bucket is dry and the loop stops leasing, but
	// asks the ledger again every CampaignRefresh, since budget released by
	// other daemons or moved by a rebalance comes back to the shards.
	exhausted atomic.Bool
	// confirm: an exhausted broadcast arrived. It only makes the loop ask the
	// ledger sooner; a broadcast never makes this daemon answer -1.
	confirm atomic.Bool
	refused atomic.Bool // the ledger lost this day's state: never grant
	// reassert: the ledger lost writes on a shard of this day (we found
	// it): re-assert every lease held, next tick. reassertHint: a broadcast
	// said so; acted on at most once per Config.EventRecheck.
	reassert     atomic.Bool
	reassertHint atomic.Bool

	// Refill loop only.
	leases      map[string]heldLease
	rng         *rand.Rand
	nextGrantAt time.Time
	// callsHeldUntil is when the ledger may be called again for the day
	// after it failed or lost writes (nextGrantAt is at least as late).
	// A SPEND's fetch waits for it, and for nextGrantAt, the refill loop's
	// pacing, only when no shard said it had what the SPEND lacks
	// (shardAvailable): a standing bid a shard could not give whole put off
	// the host's next ask a lease window, and a smaller SPEND the shard
	// could cover was paced meanwhile (family seed 7's f14 lost its last
	// 1,292 micros so: 99.43% spent). Past nextGrantAt always, each paced
	// SPEND of a supply-constrained campaign asked the ledger: three times
	// the ledger calls of some campaigns.
	callsHeldUntil time.Time
	lastGrantAt    time.Time
	// answer is what the shard asked last granted into the bucket (refill
	// loop): a sweep goes on past a shard that granted enough.
	answer int64
	// unsplit marks the grant in progress as a sweep's ask past its
	// round's regular one (refill loop): it carries no demand for the
	// ledger's fair split (pace.SweepSplits, condition 19).
	unsplit     bool
	shardEmpty  []bool
	shardFilled []bool // the last grant on the shard was all we asked for
	// shardRead is each shard's last answer to this host: what it had not
	// leased or spent (locked+available), and where the curve stood then
	// (pace.Stale: what its curve released since, condition 22).
	shardRead []pace.ShardReading
	// shardAvailable is what each shard had available when it last refused
	// this host a lease, all or nothing, for want of more (0 since it last
	// granted one, or until it refuses). Not after a grant: what a shard
	// still holds then is the other hosts' to ask for, and fetched past
	// nextGrantAt by a host with 45% of the SPENDs, it took 50% of the spend.
	shardAvailable []int64
	// shardAskedAt is when this host last asked each shard for a lease.
	shardAskedAt []time.Time
	// shardUnspent is what each shard last said it had left (shardRead)
	// plus what it has leased out (to any host) and may come back: a day
	// whose shards are all empty is exhausted only when this is zero too;
	// until then, its bids are paced.
	shardUnspent []int64
	checkedAt    time.Time
	hintAt       time.Time // the last re-assert a broadcast triggered
	// known is each shard's history as of our last reply from it: the
	// ledger checks it on every grant, renewal and release, and tells us
	// if it lost writes we saw.
	known []lease.History
	// closed: the ledger closed the day (it is over there): no more grants.
	closed bool
	// refundsTold: of the bucket's accepted refunds, the micros handed to a
	// release or renewal for the audit stream (refunds.go).
	refundsTold int64
	// carry: micros withdrawn from the bucket with the leases that ended
	// this tick, for their successors to credit at once (refill loop only).
	carry int64
	// parked: per shard, a regular lease that ended without a successor on
	// its shard, its release waiting to ride the host's next grant there
	// (parkRelease; refill loop only).
	parked []parkedRelease
	// short: the host's last grant of the day was less than it asked
	// (its shards release less than it would take): its next regular lease
	// is granted with a park window (park.go).
	short bool
	// late: how long before this tick the latest of the leases that ended
	// this tick ended (a tick that came after a lease's end), for its
	// successor to credit the drip missed since (pace.LateCredit; refill
	// loop only).
	late time.Duration
	// fleetRate is the most the fleet may take a second along the curve
	// (its pace, or its catch-up pace when behind), as want last computed
	// it; shareNextAt, when a standing host's share of that (shareThrottle)
	// lets it take its next standing bid or fetch.
	fleetRate   float64
	fleetPace   float64 // the curve's pace alone (or pro rata, if more), a second
	fleetBehind bool    // more than a bid behind the curve: demand-bound
	// fleetCatching: behind by more than a bid and catchingWindows lease
	// windows of the curve's pace.
	fleetCatching bool
	// plan is the pacing controller's last decision (refill loop).
	plan pace.Decision
	// startLeft is what of plan.StartCredit this tick's grants have not
	// credited yet: one round of a sweep shares one start credit.
	startLeft   int64
	shareNextAt time.Time
	// spendCredit, spendSeen, spendAt: meterSpend's state.
	spendCredit float64
	spendSeen   int64
	spendAt     time.Time
}

// shardCovering returns a shard that last refused this host a lease while
// it had need available.
func (ds *dayState) shardCovering(need int64) (int, bool) {
	for s, a := range ds.shardAvailable {
		if a >= need && !ds.shardEmpty[s] {
			return s, true
		}
	}
	return 0, false
}

// holdCalls keeps the refill loop and SPENDs' fetches off the ledger
// until until (a failed call, lost writes).
func (ds *dayState) holdCalls(until time.Time) {
	if ds.callsHeldUntil.Before(until) {
		ds.callsHeldUntil = until
	}
	if ds.nextGrantAt.Before(until) {
		ds.nextGrantAt = until
	}
}

// spendAhead reports whether this host has spent its share of the fleet's
// rate (meterSpend).
func (ds *dayState) spendAhead() bool { return ds.spendCredit < 0 }

// throttled reports whether a standing host waits for its share of the
// fleet's rate before its next standing bid or fetch (shareThrottle).
func (ds *dayState) throttled(now time.Time) bool {
	return now.Before(ds.shareNextAt)
}

// heldLease is one lease this daemon holds on a shard of the day.
type heldLease struct {
	shard  int
	amount int64
	expiry time.Time
	end    time.Time // spendable until: expiry - skew bound
	drip   int64     // micros a second it supplies: amount over its span
	// fetched: granted for a SPEND (fetchFor), not sized by the
	// controller: the host's next regular grant renews it.
	fetched bool
	// swept: granted less than asked (the shard was short) while the host
	// was starting, and credited whole: it has nothing left to drip.
	swept bool
}

// supplied reports whether the leases held supply at least half the
// controller's last target: below it, a host asks again a second after a
// grant smaller than its ask (it sweeps the shards); above it, it leaves
// the shards a quarter window to release more.
func (ds *dayState) supplied(now time.Time) bool {
	return float64(ds.openDrip(now, "")) >= ds.plan.HostRate/2
}

// endingDrip is what the leases ending this tick (t: those that closed,
// and the one renewed early) supplied a second.
func (ds *dayState) endingDrip(now time.Time, t tick) int64 {
	var drip int64
	for _, cl := range t.closed {
		drip += ds.leases[cl.ID].drip
	}
	if h, ok := ds.leases[t.ending]; ok && h.end.After(now) {
		drip += h.drip
	}
	return drip
}

// openDrip is what the leases held supply a second over their lives (their
// amount over their span, however the bucket credits them), less the one
// being renewed this tick (ending, if any): what stays open past now.
func (ds *dayState) openDrip(now time.Time, ending string) int64 {
	var drip int64
	for id, h := range ds.leases {
		if id != ending && h.end.After(now) {
			drip += h.drip
		}
	}
	return drip
}

// unspent estimates the campaign-day's budget not yet spent, leased out or
// not.
func (ds *dayState) unspent() int64 {
	var sum int64
	for _, r := range ds.shardUnspent {
		sum += r
	}
	return sum
}

// remaining is the campaign-day's budget not yet leased or spent, as the
// shards last said.
func (ds *dayState) remaining() int64 {
	var sum int64
	for _, r := range ds.shardRead {
		sum += r.Left
	}
	return sum
}

// read notes a shard's answer at now: sh.Remaining() not leased or spent,
// of the budget it is to spend (sh.Target()).
func (ds *dayState) read(shard int, sh lease.Shard, now time.Time) {
	ds.shardRead[shard] = pace.ShardReading{Left: sh.Remaining(), Budget: max(sh.Target(), 0), CurveAt: ds.curve.AtTime(now, ds.day)}
}

// pickShard returns a shard to ask, at random among those not known to be
// empty. Random, not round robin: daemons rotating in lockstep would always
// reach a shard in the same order, and the first would drain what the shard
// accrued for the whole fleet.
func (ds *dayState) pickShard() (int, bool) {
	// The open shard this host asked longest ago (ties at random): a shard
	// makes budget available as its curve advances, so the one left alone
	// longest has most to give. Picked at random, a supply-constrained
	// campaign's leases took whatever a shard had gathered since its last
	// visit, anything from a fifth to twice the pace of a half window, and
	// a single daemon's 10-second spend swung from 0.25x to 1.67x its pace.
	// Hosts' rotations start at random, so a fleet still spreads its visits.
	best, n := -1, 0
	for s, empty := range ds.shardEmpty {
		if empty {
			continue
		}
		switch {
		case best < 0 || ds.shardAskedAt[s].Before(ds.shardAskedAt[best]):
			best, n = s, 1
		case ds.shardAskedAt[s].Equal(ds.shardAskedAt[best]):
			n++
			if ds.rng.IntN(n) == 0 {
				best = s
			}
		}
	}
	return best, best >= 0
}

// leaseOn returns a lease held on shard (refill loop).
func (ds *dayState) leaseOn(shard int) (string, bool) {
	var best string
	for id, h := range ds.leases {
		if h.shard == shard && (best == "" || id < best) {
			best = id
		}
	}
	return best, best != ""
}

// sweptLease returns a lease held that was granted short while the host
// was starting and credited whole (heldLease.swept): the one on shard if
// there is one, else the one ending first (refill loop).
func (ds *dayState) sweptLease(shard int) (string, bool) {
	var (
		best string
		end  time.Time
	)
	for id, h := range ds.leases {
		if !h.swept {
			continue
		}
		switch {
		case best == "":
		case (h.shard == shard) != (ds.leases[best].shard == shard):
			if h.shard != shard {
				continue
			}
		case h.end.After(end) || (h.end.Equal(end) && id > best):
			continue
		}
		best, end = id, h.end
	}
	return best, best != ""
}

// fetchedLease returns a lease held that a SPEND fetched (refill loop).
func (ds *dayState) fetchedLease() (string, bool) {
	var best string
	for id, h := range ds.leases {
		if h.fetched && (best == "" || id < best) {
			best = id
		}
	}
	return best, best != ""
}

// oldestLease returns the held lease that ends first (refill loop).
func (ds *dayState) oldestLease() (string, bool) {
	var (
		best string
		end  time.Time
	)
	for id, h := range ds.leases {
		if best == "" || h.end.Before(end) || (h.end.Equal(end) && id < best) {
			best, end = id, h.end
		}
	}
	return best, best != ""
}
