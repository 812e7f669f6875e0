// Package pace is the pacing controller: from what one host knows of a
// campaign-day at one instant (where the curve stands, what the day has
// left as last seen, the host's demand and share, what its open leases
// drip), it decides how fast the fleet may take budget now, how fast this
// host may drip, and how large a lease it asks the ledger for. It does no
// I/O and reads no clock: the refill loop in package daemon gathers an
// Input, calls Plan, and carries the Decision out. The ledger's release
// rule (package lease) stays the authority on money; this package decides
// pace only, and a wrong decision here costs delivery, never budget.
//
// # The contract
//
// Let p be the curve's pace (the budget the curve releases over the next
// lease window W), k the catch-up multiple (Input.CatchUpPermille/1000, at
// least 1) and R what the day has left (Input.Remaining as the shards last
// said it, less what their curves released since, Input.Stale, unless the
// day is Catching: 22). Plan guarantees, for every input (pace_test.go
// checks each over random inputs):
//
//  1. The fleet's rate is the curve's pace, or up to k times it while the
//     campaign is behind its curve: p ≤ FleetWindow ≤ k·p while the curve
//     has a pace. Past the curve's end
//     (nothing more to release along it) the fleet may take all that is
//     left. Catching up never runs above k times the pace, however far
//     behind: a campaign that cannot catch up within k under-delivers
//     rather than bursts.
//
//  2. A host's target rate never exceeds the fleet's: HostRate ≤
//     FleetWindow/W, and for a host that knows its share s of the fleet's
//     demand (0 < s < 1), HostRate ≤ s·max(FleetWindow, h·p)/W, h ≤
//     MaxHeadroom the headroom that lets a host ride out the bunching of
//     its SPENDs. The headroom is over the curve's pace, never over a
//     catch-up: a catch-up is shared among the hosts, not multiplied by
//     each, so the targets of hosts whose shares sum to 1 add up to at most
//     the larger of the fleet's window and h·p: to at most the fleet's
//     window whenever that is at least MaxHeadroom·p (a fleet catching up
//     at k = 3). Past the curve's end a host's target is its demand
//     (with headroom): what is left goes as fast as SPENDs take it, first
//     come, first served.
//
//  3. A host's drip never exceeds its target: Ask is sized so that the
//     leases still open past this instant (Input.OpenDrip, micros a second)
//     plus the new lease dripping over its Input.Drip add up to at most HostRate — except
//     for the floor (below), which is at most a few bids.
//
//  4. A host asks only when the gap between its target and what it drips is
//     worth a ledger call: at least a quarter of its target, or nothing is
//     open at all; and while it holds an open lease, not once the shards
//     last said the day had nothing left (it asks when a lease ends). (What the day has left bounds what a shard grants, not
//     what a host asks: R is an estimate from answers read earlier.)
//
//  5. The floor: a host that asks at all asks for at least Floor, a few of
//     its largest SPENDs or a sixteenth of a window of pace, so that one
//     whose demand is not known yet gets going; but never the catch-up's
//     sliver, so an idle host behind its curve hoards nothing.
//
//  6. A host starting its supply (what is open, and the lease it renews,
//     supply less than a quarter of its target) is credited a burst window of its target at once by
//     the lease it is granted (Decision.StartCredit), or its largest recent
//     SPEND (Input.Largest) if more, so a fresh host meets its first seconds
//     of demand, and one whose target is below a SPEND (a small budget met
//     on a host by a SPEND, which the floor's lease of a few such SPENDs
//     would otherwise drip over a window) serves the SPEND that woke it;
//     the rest drips.
//
// Conditions 7 and 8, the hour's bound each ledger call asks for, are
// with Hour; 12 to 14, the refill cadence (when a host asks again, how a
// lease drips), with MayAsk, HoldAfter and Drip; 15 to 18, a host's share
// of the fleet, with ShareRate; 19, the start sweep, with SweepsOn; 20,
// when a host reports the campaign's bid, with ReportsBid; 21, the
// ledger's advance in front of the curve, with Advance; 22, what the day
// has left now, with Stale.
//
// Together 1–3 bound what one host drips at k times the curve's pace (1.25
// in the day's last hour, LastHourCatchUpPermille); the burst window (a
// couple of seconds of the target) is the only instant credit on top. And
// 2 and 3 bound what a fleet whose shares are known drips, while it
// catches up at k ≥ MaxHeadroom, at k times the pace between its hosts: on
// top of it, only what their buckets hold and their start credits.
package pace

import (
	"math"
	"time"
)

// PPB is the curve's scale: cumulative positions run from 0 to PPB (parts
// per billion of the day's budget), as bucket.PPB.
const PPB = 1_000_000_000

// LastHourCatchUpPermille bounds catch-up in the last hour of a
// campaign's local day (and a cap window before it, so that what is
// available when the hour starts was released at this multiple too): a
// campaign still behind then under-delivers a little rather than ending
// its day in a burst.
const LastHourCatchUpPermille = 1250

// MaxHeadroom bounds the headroom over a host's measured demand (Headroom).
const MaxHeadroom = 2.5

// Input is what a host knows of a campaign-day at one instant. Money is in
// micros; rates in micros a second.
type Input struct {
	Budget int64 // the day's budget
	// Remaining is the day's budget not yet leased or spent, as the shards
	// last said; Stale is what their curves have released since they said
	// it (condition 22).
	Remaining, Stale int64
	// CurveNow and CurveNext are the curve's cumulative positions (0..PPB)
	// now and one Window later.
	CurveNow, CurveNext int64
	Window              time.Duration // how long a lease lasts (W)
	// Drip is how long a new lease drips (at most Window; 0: Window): it
	// stops dripping a clock-skew bound before its end.
	Drip time.Duration
	// CatchUpPermille is the catch-up multiple in force now, ×1000
	// (CatchUpPermille below gives it from the configured one).
	CatchUpPermille int64
	Bid             int64 // the campaign's bid: its largest recent SPEND, fleet-wide
	Largest         int64 // this host's largest recent SPEND
	// DemandRate and DemandCalls are this host's measured demand: micros
	// and SPENDs a second (exponentially weighted).
	DemandRate, DemandCalls float64
	// Share is this host's share of the fleet's demand (0: not known, and
	// a host alone, ShareAlone or more, is bounded by the fleet's rate
	// only).
	Share float64
	// OpenDrip is what the leases this host keeps past this instant drip,
	// in micros a second (a lease being renewed now is not among them).
	OpenDrip int64
	// EndingDrip is what the lease being renewed now supplied, micros a
	// second: a renewal is not a start.
	EndingDrip int64
	// Burst is the bucket's burst window: how much of its target a host
	// starting its supply is credited at once.
	Burst time.Duration
}

// Decision is what the host does now.
type Decision struct {
	Pace int64 // the curve's pace over the next window (p)
	// FleetWindow is what the whole fleet may take over the next window.
	FleetWindow int64
	// FleetPace is the curve's pace, or what is left spread over the rest
	// of the curve if more, over the next window: FleetWindow with no
	// catch-up.
	FleetPace int64
	// Behind: the campaign is more than a bid behind its curve.
	Behind bool
	// Catching: behind by more than CatchingWindows of pace and a bid: the
	// share meters meter by the catch-up rate, not the curve's pace.
	Catching bool
	HostRate float64 // this host's target drip, micros a second
	Floor    int64   // the least a host that asks asks for
	Ask      int64   // the lease to ask for now; 0: none
	// Starting: what is open (and the lease renewed now) supplies less
	// than a quarter of the target (a fresh host, or one whose demand
	// just rose). A lease granted now
	// credits StartCredit at once: a burst window of the target, or the largest SPEND if more.
	Starting    bool
	StartCredit int64
}

// CatchingWindows is how many lease windows of the curve's pace, and a
// bid, the fleet must be behind for Decision.Catching.
const CatchingWindows = 4

// CatchUpPermille is the catch-up multiple in force, ×1000, given the
// configured multiple and how long is left of the day: the configured one,
// or LastHourCatchUpPermille if less, from capWindow before the day's last
// hour. Never below 1x.
func CatchUpPermille(configured int64, untilDayEnd, capWindow time.Duration) int64 {
	k := configured * 1000
	if untilDayEnd <= time.Hour+capWindow {
		k = min(k, LastHourCatchUpPermille)
	}
	return max(k, 1000)
}

// Headroom is the multiple of its measured demand a host asks for: a
// lease's tokens last only until its end, so a host with few SPENDs per
// half window needs more in hand to ride out the bunching of random
// arrivals (1.25x for thousands, about 2x for a dozen, MaxHeadroom at most).
func Headroom(callsPerSecond float64, window time.Duration) float64 {
	n := max(callsPerSecond*window.Seconds()/2, 1)
	return min(1.25+4/math.Sqrt(n), MaxHeadroom)
}

// Plan decides, from in, the fleet's and this host's pace and the lease to
// ask for now. It is pure: same input, same decision.
func Plan(in Input) Decision {
	var d Decision
	d.FleetWindow, d.FleetPace, d.Pace, d.Behind, d.Catching = fleet(in)
	w := in.Window.Seconds()
	if w <= 0 {
		return d
	}
	d.Floor = max(4*in.Largest, d.Pace/16, 1)
	h := Headroom(in.DemandCalls, in.Window)
	rate := in.DemandRate * h
	limit := float64(d.FleetWindow) / w
	switch {
	case in.CurveNow >= PPB:
		limit = math.Inf(1) // all that is left, as fast as demand takes it
	case Metered(in.Share):
		// Headroom over the pace, not over the catch-up (2).
		limit = min(limit, in.Share*max(limit, h*float64(d.Pace)/w))
	}
	d.HostRate = min(max(rate, float64(d.Floor)/w), max(limit, 0))
	gap := d.HostRate - float64(max(in.OpenDrip, 0))
	if d.Starting = float64(max(in.OpenDrip, 0)+max(in.EndingDrip, 0)) < d.HostRate/4; d.Starting {
		d.StartCredit = max(int64(min(d.HostRate*in.Burst.Seconds(), float64(math.MaxInt64/2))), max(in.Largest, 0))
	}
	if in.OpenDrip > 0 && (gap < d.HostRate/4 || in.Remaining <= 0) {
		// What is open drips near enough the target, or the shards last
		// said they had nothing left: the next ask comes when a lease ends
		// (its renewal gives back what it did not spend).
		return d
	}
	drip := w
	if in.Drip > 0 && in.Drip < in.Window {
		drip = in.Drip.Seconds()
	}
	d.Ask = max(int64(min(gap*drip, float64(math.MaxInt64/2))), d.Floor)
	return d
}

// fleet is the fleet's window: the curve's pace p, what is left spread
// over the rest of the curve (pro rata), and the catch-up over both, at
// most k·p. Past the curve's end, all that is left.
func fleet(in Input) (window, plain, p int64, behind, catching bool) {
	remaining := max(in.Remaining, 0)
	cNow, cNext := clampPPB(in.CurveNow), clampPPB(in.CurveNext)
	if cNext < cNow {
		cNext = cNow
	}
	p = mulPPB(in.Budget, cNext-cNow)
	if cNow >= PPB {
		return remaining, remaining, p, false, false
	}
	rest := mulPPB(in.Budget, PPB-cNow)
	gap := remaining - rest // > 0: behind the curve
	catching = gap > in.Bid+CatchingWindows*p
	if !catching {
		// Kept up with: judged by the answers less what is stale (22).
		remaining = max(remaining-max(in.Stale, 0), 0)
		gap = remaining - rest
	}
	proRata := int64(float64(remaining) * float64(cNext-cNow) / float64(PPB-cNow))
	k := max(in.CatchUpPermille, 1000)
	most := int64(min(float64(p)*float64(k)/1000, float64(math.MaxInt64/2)))
	plain = max(p, min(proRata, most))
	window = max(plain, min(p+max(gap, 0), most))
	behind = gap > in.Bid
	return window, plain, p, behind, catching
}

// mulPPB is v × ppb / PPB, rounded down, without overflow for any budget
// and position in range.
func mulPPB(v, ppb int64) int64 {
	return int64(float64(v) * float64(ppb) / PPB)
}

func clampPPB(v int64) int64 { return min(max(v, 0), PPB) }
