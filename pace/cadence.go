package pace

import (
	"math"
	"math/bits"
	"time"
)

// The refill cadence: when a host calls the ledger for a campaign-day's
// next lease, and how a granted lease drips into its bucket. Conditions
// 12 to 14 of the contract (cadence_test.go checks each over random
// inputs); the refill loop in package daemon asks these and does the I/O.
//
//  12. At most one grant a MinGrantGap while a host holds leases, except
//      an ask that renews a lease ending now (the same call gives it
//      back) or replaces one that ended this tick while at most one other
//      still drips (waiting, the host's supply would stop or halve for
//      the rest of the gap), and the first ask after a jump in the host's
//      demand (its estimate restarted since its last grant: the lease
//      sized from it is due now, not a gap after one sized before the
//      jump was seen). Each exception follows a lease's end or a jump, so
//      a host's grants stay bounded by its leases.
//
//  13. After a shard's answer, a host waits before its next regular ask:
//      nothing after a grant of all it asked; after none, a lease window
//      for a standing bid (the fleet holds what the curve allows), a
//      MinGrantGap for a host sweeping the shards at its day's start from
//      a shard whose curve has budget still to release (condition 19),
//      and an eighth of a window otherwise (a day's last crumbs do not pass
//      from host to host at every sweep); after part of it, a quarter window
//      when its leases supply at least half its target or it was a
//      standing bid (the shard releases more along the curve), and only
//      the gap otherwise (a host short of half its target sweeps the
//      other shards first). A host whose bucket has every feed open asks
//      for no new lease (only a renewal, which frees the feed it fills)
//      and waits as after none: the bucket would refuse it.
//
//  14. A lease drips evenly from its grant to its end, except that it
//      credits at once, by starting its drip as far back as needed, what
//      it carries on of the leases that ended this tick and, for a host
//      starting its supply, its start credit (condition 6); a lease no
//      larger than a bid or a standing bid is credited whole (a burst
//      window back, ending now), and so is one whose part credited at once
//      would be nearly all of it, unless it is a shard's last; a shard's
//      last lease drips in full a quarter window before its end (nothing
//      comes after it to spend its last micros), from a burst window back
//      if nearly all of it is credited at once, or at once if that end is
//      already past.

// MinGrantGap is the least time between two of a host's grants for a
// campaign-day while it holds leases (condition 12): the controller asks
// again as soon as its target outgrows what drips by a quarter, but not at
// every tick.
const MinGrantGap = time.Second

// Gate is what a host knows when it may ask the ledger for a regular
// lease.
type Gate struct {
	SinceGrant time.Duration // since its last grant of the day
	Holding    bool          // it holds leases of the day
	Jumped     bool          // its demand estimate jumped since its last grant
	// Renewing: a lease ends now (this ask renews it), or one ended this
	// tick while at most one other still drips (this ask replaces it).
	Renewing bool
}

// MayAsk reports whether a host may ask now (condition 12).
func MayAsk(g Gate) bool {
	return !g.Holding || g.SinceGrant >= MinGrantGap || g.Jumped || g.Renewing
}

// Answer is what a shard granted of a host's ask.
type Answer struct {
	Want, Granted int64
	Standing      bool // a standing bid
	// Supplied: with the lease granted, the host's open leases supply at
	// least half its target.
	Supplied bool
	Window   time.Duration // the lease window W
	// Starting: the host sweeps the shards (Sweeps), and the shard has
	// budget its curve has not released yet.
	Starting bool
}

// HoldAfter is how long a host waits after a shard's answer before its
// next regular ask (condition 13); 0: no longer than MinGrantGap.
func HoldAfter(a Answer) time.Duration {
	switch {
	case a.Granted >= a.Want:
		return 0
	case a.Granted <= 0 && a.Standing:
		return a.Window
	case a.Granted <= 0 && a.Starting:
		return MinGrantGap
	case a.Granted <= 0:
		return a.Window / 8
	case a.Standing || a.Supplied:
		return a.Window / 4
	}
	return 0
}

// DripInput is what decides how a granted lease drips.
type DripInput struct {
	Granted int64
	// AtOnce is what the lease credits at once: what it carries on of the
	// leases that ended this tick, or the start credit if larger.
	AtOnce   int64
	Bid      int64 // the campaign's bid
	Standing bool  // a standing bid
	// LastOfShard: the shard said it has nothing left after this lease.
	LastOfShard bool
	// Span is from the grant to the lease's end (its expiry less the
	// clock-skew bound).
	Span          time.Duration
	Window, Burst time.Duration
}

// wholeShare is the share credited at once from which a lease is credited
// whole (condition 14).
const wholeShare = 0.99

// Drip is when a granted lease drips, relative to its grant: from from
// (≤ 0) to to (0 ≤ to ≤ Span, from < to); the part of the drip before the
// grant is credited at once (condition 14).
func Drip(in DripInput) (from, to time.Duration) {
	span := max(in.Span, 0)
	whole := func() (time.Duration, time.Duration) { return -max(in.Burst, time.Nanosecond), 0 }
	if in.Granted <= in.Bid || in.Standing || span == 0 {
		return whole()
	}
	to = span
	if in.AtOnce > 0 {
		f := float64(min(in.AtOnce, in.Granted)) / float64(in.Granted)
		if f >= wholeShare {
			from, to = whole()
		} else {
			from = -atOnceSpan(min(in.AtOnce, in.Granted), in.Granted, span)
		}
	}
	if in.LastOfShard {
		full := span - in.Window/4
		if full <= 0 {
			return whole()
		}
		to = full
	}
	return from, to
}

// LateCredit is what a lease granted late credits at once (condition 14):
// one whose predecessor ended late before the grant (a refill loop that ran
// late, a step that came after a lease's end), which the host's drip
// missed. It is what the lease would have dripped before the grant had its
// drip started at that end, at most a burst window before the grant, at
// the rate it drips over the rest of its span: granted × l / (span + l),
// l = min(late, burst), rounded down. So a late successor's drip over the
// predecessor's end to its own end is what an on-time one's would have
// been, never more than its grant, and never more than a burst window of
// its rate at once.
func LateCredit(granted int64, late, burst, span time.Duration) int64 {
	l := min(late, burst)
	if granted <= 0 || l <= 0 || span < 0 {
		return 0
	}
	// l ≤ span + l (both below 2^63: no overflow), so the quotient is at
	// most granted.
	q, _, _ := mulDiv(uint64(granted), uint64(l), uint64(span)+uint64(l))
	return int64(q)
}

// atOnceSpan is how far before its grant a lease of granted micros that
// drips over span from then must start for the drip before the grant to be
// at least atOnce micros (0 ≤ atOnce < granted): ceil(atOnce × span /
// (granted − atOnce)), in integers, so that the bucket, which rounds its
// drip down, credits not a micro less.
func atOnceSpan(atOnce, granted int64, span time.Duration) time.Duration {
	q, rem, ok := mulDiv(uint64(atOnce), uint64(span), uint64(granted-atOnce))
	if !ok {
		return math.MaxInt64
	}
	if rem {
		q++
	}
	return time.Duration(min(q, math.MaxInt64))
}

// mulDiv is a × b / den (den > 0) rounded down, in 128-bit arithmetic, and
// whether it left a remainder; ok is false when the quotient does not fit
// in 64 bits.
func mulDiv(a, b, den uint64) (q uint64, rem, ok bool) {
	hi, lo := bits.Mul64(a, b)
	if hi >= den {
		return 0, false, false
	}
	q, r := bits.Div64(hi, lo, den)
	return q, r > 0, true
}
