package pace

import "time"

// A host's share of the fleet: when several hosts serve a campaign, what one
// takes of the shards is metered by its share of the fleet's SPENDs, so that
// the hosts split the spend as they split the SPENDs (issue 10's fairness
// goal: within 3 points), and what other hosts hold decides when a sparse
// day is exhausted here. The rules, each checked over random inputs
// (share_test.go):
//
//  15. ShareRate: a host is metered at its share s of the fleet's rate: of
//      the curve's pace, or of the catch-up rate while the fleet catches up
//      (CatchingWindows). A host whose share is not known, or which serves
//      the campaign alone (s ≤ 0 or s ≥ ShareAlone, 99%), is not metered
//      (rate 0).
//
//      The share itself is judged on spans of whole minutes: at each of
//      its demand flushes, a host takes the span from after the latest of
//      its flushes at least 5 minutes (the sparse flush interval) before
//      its last, up to its last, and each span moves the share ShareWeight
//      of the way to the span's split, its own micros asked over the
//      fleet's, n/(n + ShareSpanSpends) for a span of n of the fleet's
//      SPENDs. The fleet's counts are those of every flush counted in the
//      span's minutes, each in the minute of its own time, whatever order
//      they reached the ledger in; every host flushes at its own second of
//      the minute, so the others' flushes in a span cover about as long as
//      the host's own, and a span holds about one flush of a host that
//      flushes every 5 minutes. A busy campaign's span moves the share the
//      whole way: a host that stops serving (its gate refuses leases, or
//      it died) counts no micros from its next flush, and the others'
//      shares follow over the next spans. A sparse campaign's span holds a
//      SPEND or two, whose split (all or nothing) says little of a host's
//      share: it moves it a little (a share taken whole from one such slot
//      metered a host with 45% of the SPENDs at 5% for hours). Until a span
//      is judged, a stand-in taken from the 15-minute slot in progress
//      (biased high: the other hosts' counts in it lag).
//
//  16. MeterCredit: a host's spend credit grows at its share rate, falls by
//      what it spent (less refunds), and never exceeds Reading.Limit, the
//      larger of four bids and a lease window at its share rate; it starts
//      at the limit, and an unmetered host's stays there. So over any run
//      of meter readings, what the host spent is at most its share rate ×
//      the time elapsed + the credit it started with − the credit it ends
//      with: a host whose credit is not positive asks the ledger for
//      nothing (of any kind) until it is, and so spends at most its share
//      of the fleet's rate, plus the limit, plus what it already held. A
//      host that spends at most its share keeps the whole limit and is
//      never held.
//
//  17. ShareWait: after a standing bid or fetched lease of g micros, a host
//      that asks at least ShareThrottleDemand × its share rate waits g / rate
//      before its next, counted from the end of its last wait if that is
//      still to come, else from now (from up to two of its SPEND intervals
//      back, at most a standing window, while the fleet catches up: the
//      wait for a SPEND after the meter let a bid through is not lost), and
//      never past a standing window from now. A host asking less than that
//      is not delayed: near its share, the bunching of its SPENDs would make
//      it miss some the fleet could serve.
//
//  18. HeldElsewhere: for a sparse campaign (standing bids), what other
//      hosts hold of the day's leased budget is what the shards say is
//      leased less what this host holds (at least 0, at most the leased
//      budget); a busy campaign counts nothing held elsewhere (what other
//      hosts hold at its end is theirs to spend, and passing crumbs round
//      would cost ledger calls). A sparse day whose shards are empty is
//      exhausted on a host only when less than one of its SPENDs is held
//      elsewhere: until then its bids are paced, not refused.

// ShareSpanSpends is the fleet's SPENDs in a judged span at which the span
// moves a host's share halfway (condition 15).
const ShareSpanSpends = 8

// ShareWeight is how far, as a part of the way, a judged span of spends of
// the fleet's SPENDs moves a host's share towards the span's split
// (condition 15): spends/(spends + ShareSpanSpends); 0 for a span of none
// (or NaN).
func ShareWeight(spends float64) float64 {
	if !(spends > 0) {
		return 0
	}
	return spends / (spends + ShareSpanSpends)
}

// ShareThrottleDemand is how far above its share rate a host's own demand
// must be for ShareWait to delay its next standing bid (condition 17).
const ShareThrottleDemand = 1.25

// MeterBids is how many of its bids a host's spend credit holds at least
// (condition 16).
const MeterBids = 4

// ShareAlone is the share at which a host counts as serving a campaign
// alone (condition 15): metering it would protect at most 1% of the
// fleet's demand, and a share judged by moving part of the way to each
// span's split reaches 1 only in the limit.
const ShareAlone = 0.99

// Alone reports whether a host of share serves its campaign alone
// (condition 15): it is not metered, and it records no demand at the
// shards, whose fair split is between hosts that share the campaign (the
// records of a host that stopped serving would otherwise hold it to their
// old split until they expire).
func Alone(share float64) bool { return share >= ShareAlone }

// Metered reports whether a host of share is metered by it (condition 15):
// its share is known (above 0) and it is not alone.
func Metered(share float64) bool { return share > 0 && !Alone(share) }

// ShareRate is a host's share rate, micros a second (condition 15): share
// of fleetRate while the fleet catches up, else of fleetPace (the curve's
// pace); 0 when the host is not metered.
func ShareRate(share, fleetPace, fleetRate float64, catching bool) float64 {
	if !Metered(share) {
		return 0
	}
	if catching {
		return share * fleetRate
	}
	return share * fleetPace
}

// Reading is one reading of a host's spend meter (condition 16).
type Reading struct {
	First   bool          // the meter's first reading of the day
	Elapsed time.Duration // since the last reading
	Spent   int64         // the host's net spend (allowed − refunded) since the last reading, micros
	Rate    float64       // its share rate (ShareRate), micros a second; ≤ 0: not metered
	Bid     int64         // its bid (the usual SPEND), micros
	Window  time.Duration // a lease window
}

// Limit is the most credit a host keeps (condition 16).
func (r Reading) Limit() float64 {
	return max(MeterBids*float64(r.Bid), r.Rate*r.Window.Seconds())
}

// MeterCredit returns a host's spend credit after reading r, credit being
// the one before (condition 16): the share rate credited for the time
// elapsed, what the host spent debited, capped at the limit; the limit at
// the first reading and at every one of an unmetered host. A host whose
// credit is negative has spent more than its share: it asks the ledger for
// nothing until its credit is back.
func MeterCredit(credit float64, r Reading) float64 {
	limit := r.Limit()
	if r.Rate <= 0 || r.First {
		return limit
	}
	return min(credit+r.Rate*max(r.Elapsed.Seconds(), 0)-float64(r.Spent), limit)
}

// Throttle is what a host knows when a standing bid or fetched lease of
// Granted micros was granted to it (condition 17).
type Throttle struct {
	Now      time.Time
	Granted  int64
	Rate     float64       // its share rate (ShareRate); ≤ 0: not metered
	Demand   float64       // its own demand: its typical SPEND over its SPEND interval, micros a second
	Interval time.Duration // the mean time between its SPENDs
	Catching bool          // the fleet catches up
	Standing time.Duration // the standing window
	Next     time.Time     // the end of its last wait (zero: none)
}

// ShareWait returns when the host's next standing bid or fetch may be asked
// (condition 17): t.Next unchanged when the host is not delayed.
func ShareWait(t Throttle) time.Time {
	if t.Granted <= 0 || t.Rate <= 0 || t.Interval <= 0 || t.Demand < ShareThrottleDemand*t.Rate {
		return t.Next
	}
	wait := time.Duration(float64(t.Granted) / t.Rate * float64(time.Second))
	from := t.Now
	if t.Catching {
		from = t.Now.Add(-min(2*t.Interval, t.Standing))
	}
	if t.Next.After(from) {
		from = t.Next
	}
	next := from.Add(wait)
	if limit := t.Now.Add(t.Standing); next.After(limit) {
		return limit
	}
	return next
}

// HeldElsewhere is what other hosts hold of a campaign-day's leased budget
// (condition 18): for a sparse campaign, leased (as the shards last said)
// less held (this host's tokens and reserve, ≥ 0), at least 0; 0 for a
// busy one.
func HeldElsewhere(sparse bool, leased, held int64) int64 {
	if !sparse {
		return 0
	}
	return max(leased-held, 0)
}
