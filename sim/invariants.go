package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/pace"
)

// The pacing invariants every run is judged by, as internal/history judges
// money: each is checked on every campaign of every run, and a run that
// breaks one reports it (Results.Violations) and pacersim exits 1. The
// bounds are the controller's contract (package pace) seen from outside,
// by the generator's own count of what was allowed:
//
//   - catch-up: one host spends in every window of CatchUpWindow at most
//     CatchUpSlack times the catch-up multiple in force (pace.CatchUpPermille,
//     with the daemons' default multiple) of the curve's plan for the window,
//     plus a bucket's worth: four of the campaign's largest bids. One host's
//     drip is bounded by the controller alone. A fleet's hosts may also draw
//     down at once what the shards banked while demand was low (available,
//     up to a cap window), and within the last hour the ledger bounds the
//     hour, not its minutes; so a fleet is judged over FleetCatchUpWindow,
//     by the configured multiple, with a bucket's worth per host (the last
//     hour by its own invariant, below);
//   - hour: an hour the campaign entered no more than a bid behind its
//     curve spends at most twice the curve's share of it, plus the hour's
//     bid (hourBid: the bid the ledger's hour bound adds, condition 7 of
//     package pace);
//   - last hour: the day's last hour spends at most LastHourBound times the
//     curve's share of it, plus the hour's bid: no end-of-day dump;
//   - ahead: at every CatchUpWindow of the local day, what the campaign
//     spent is at most AheadBids of its mean bids, or AheadShare of its
//     budget if more, above what its curve has due: no front-loading,
//     whatever the demand (a campaign never has to run ahead to spend its
//     day);
//   - behind: at every CatchUpWindow, what the campaign spent is at most
//     as much below the less of its curve's due and the curve oracle's
//     spend (what its demand offered, paced by the curve: oracleSpend):
//     demand short of the curve is not the controller's fault; what the
//     fleet loses to its own cold start, leases, shares or catch-up is;
//   - cold start: a fleet of fresh daemons (a run without a warm-up)
//     spends, over the CatchUpWindow from ColdStartWithin after the
//     campaign's day start, at least ColdStartShare of what it could have
//     (coldStart), where that window could take ColdStartBids mean bids.
const (
	CatchUpWindow      = 10 * time.Second
	FleetCatchUpWindow = defaultCapWindow
	CatchUpSlack       = 1.1
	LastHourBound      = 1.5
	AheadBids          = 2
	AheadShare         = 0.02
	// A fleet of fresh daemons (a run without a warm-up, at a campaign's
	// day start) is measured over the CatchUpWindow from ColdStartWithin
	// on: what it spent over what it could have, the less of the curve's
	// plan for that window and what the curve oracle spent in it
	// (CampaignResult.ColdStartRatio). Measured where that is at least
	// ColdStartBids mean bids: fewer SPENDs say nothing of a rate; judged
	// there by ColdStartShare.
	ColdStartWithin = 2 * time.Second
	ColdStartShare  = 0.8
	ColdStartBids   = 50
	// defaultCatchUp is the daemons' default catch-up multiple (the
	// simulator runs them with it).
	defaultCatchUp = 3
	// defaultCapWindow is the daemons' default cap window, from which the
	// last hour's catch-up applies.
	defaultCapWindow = 5 * time.Minute
	// leaseWindow is the daemons' default lease window.
	leaseWindow = 30 * time.Second
)

// Violation is a pacing invariant a run broke: which, the campaign, the
// local time of day it was broken at, and the figures.
type Violation struct {
	Invariant string `json:"invariant"`
	Campaign  string `json:"campaign"`
	At        string `json:"at"` // local time, HH:MM:SS
	Detail    string `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: campaign %s at %s: %s", v.Invariant, v.Campaign, v.At, v.Detail)
}

// violations checks c's pacer spend against the invariants.
func violations(c *campaignRT, hosts int) []Violation {
	if c.curve == nil || c.budget <= 0 {
		return nil
	}
	var out []Violation
	out = append(out, catchUpViolations(c, hosts)...)
	out = append(out, hourViolations(c)...)
	out = append(out, aheadViolations(c)...)
	out = append(out, behindViolations(c)...)
	out = append(out, coldStartViolations(c)...)
	return out
}

// coldStartViolations reports a fresh fleet that spent less than
// ColdStartShare of what it could have over its cold-start window
// (coldStart), at the window's start.
func coldStartViolations(c *campaignRT) []Violation {
	spent, could, judged := c.coldStart()
	if !judged || spent >= ColdStartShare*could {
		return nil
	}
	return []Violation{{Invariant: "cold start", Campaign: c.spec.ID, At: c.at(c.cold[0].t),
		Detail: fmt.Sprintf("a fresh fleet spent %.0f micros in %s, %.2f of the %.0f it could have (the less of the curve's plan and the curve oracle's spend); bound %.2f",
			spent, CatchUpWindow, spent/could, could, ColdStartShare)}}
}

// aheadBound is how far ahead of its curve a campaign may run, micros:
// AheadBids mean bids, or AheadShare of its budget if more.
func (c *campaignRT) aheadBound() float64 {
	return max(AheadBids*c.meanBid, AheadShare*float64(c.budget))
}

// aheadViolations lists each spell the campaign ran further ahead of its
// curve than aheadBound, at the 10-second sample it began, with the
// furthest it went in that spell.
func aheadViolations(c *campaignRT) []Violation {
	ahead := func(s tenSample) float64 { return float64(s.cum) - c.plan(c.day.Start, s.t) }
	return spells(c, "ahead", ahead, "ran up to %.0f micros ahead of its curve")
}

// behindViolations lists each spell the campaign fell further behind what
// it could have spent than aheadBound: at every CatchUpWindow, the less of
// its curve's due and the curve oracle's spend (what demand offered, paced
// by the curve: oracleSpend), minus what it spent.
func behindViolations(c *campaignRT) []Violation {
	return spells(c, "behind", c.behind, "fell up to %.0f micros behind the less of its curve and what its demand offered")
}

// spells lists each spell in which distance, at the campaign's 10-second
// samples, exceeded aheadBound: a violation of invariant at the sample it
// began, with the furthest it went (what, a format of it in micros).
func spells(c *campaignRT, invariant string, distance func(tenSample) float64, what string) []Violation {
	var out []Violation
	bound := c.aheadBound()
	var from time.Time
	var most float64
	report := func() {
		out = append(out, Violation{Invariant: invariant, Campaign: c.spec.ID, At: c.at(from),
			Detail: fmt.Sprintf(what+" (%.1f%% of the budget); bound %.0f: %d mean bids of %.0f or %.0f%% of the budget",
				most, 100*most/float64(c.budget), bound, AheadBids, c.meanBid, 100*AheadShare)})
	}
	for _, s := range c.tens {
		d := distance(s)
		switch {
		case d > bound && from.IsZero():
			from, most = s.t, d
		case d > bound:
			most = max(most, d)
		case !from.IsZero():
			report()
			from = time.Time{}
		}
		if len(out) >= maxViolationsEach {
			return out
		}
	}
	if !from.IsZero() {
		report()
	}
	return out
}

// behind is how far the campaign's spend at s is below the less of its
// curve's due and the curve oracle's spend, micros (negative: not behind).
func (c *campaignRT) behind(s tenSample) float64 {
	return min(c.plan(c.day.Start, s.t), float64(s.oracle)) - float64(s.cum)
}

// behindMax is the furthest the campaign fell behind (behind), micros.
func (c *campaignRT) behindMax() float64 {
	most := 0.0
	for _, s := range c.tens {
		most = max(most, c.behind(s))
	}
	return most
}

// coldStart is what a fresh fleet spent over the cold-start window and
// what it could have (the less of the curve's plan and the oracle's spend
// over it), micros, and whether the window is judged.
func (c *campaignRT) coldStart() (spent, could float64, judged bool) {
	if len(c.cold) != 2 {
		return 0, 0, false
	}
	from, to := c.cold[0], c.cold[1]
	could = min(c.plan(from.t, to.t), float64(to.oracle-from.oracle))
	return float64(to.cum - from.cum), could, could >= ColdStartBids*c.meanBid
}

// coldStartRatio is coldStart's spent over could, 0 where not judged.
func (c *campaignRT) coldStartRatio() float64 {
	spent, could, judged := c.coldStart()
	if !judged {
		return 0
	}
	return spent / could
}

// plan is the curve's plan for the campaign between two instants, micros.
func (c *campaignRT) plan(from, to time.Time) float64 {
	return float64(c.budget) * float64(c.curve.AtTime(to, c.day)-c.curve.AtTime(from, c.day)) / float64(bucket.PPB)
}

func (c *campaignRT) at(t time.Time) string {
	return t.In(c.loc).Format("15:04:05")
}

func catchUpViolations(c *campaignRT, hosts int) []Violation {
	var out []Violation
	c.catchUpWindows(hosts, func(from time.Time, window time.Duration, spent, plan, k, bound float64) bool {
		if spent > bound {
			out = append(out, Violation{Invariant: "catch-up", Campaign: c.spec.ID, At: c.at(from),
				Detail: fmt.Sprintf("spent %.0f micros in %s, %.2fx the curve's plan of %.0f (bound %.1fx and four bids a host: %.0f)",
					spent, window, spent/max(plan, 1), plan, CatchUpSlack*k, bound)})
		}
		return len(out) < maxViolationsEach
	})
	return out
}

// catchUpMax is the most the campaign spent in a window the "catch-up"
// invariant judges, over that window's bound (above 1: broken).
func (c *campaignRT) catchUpMax(hosts int) float64 {
	most := 0.0
	c.catchUpWindows(hosts, func(_ time.Time, _ time.Duration, spent, _, _, bound float64) bool {
		most = max(most, spent/bound)
		return true
	})
	return most
}

// catchUpWindows calls each with every window the "catch-up" invariant
// judges (CatchUpWindow for one host, FleetCatchUpWindow for a fleet, one
// starting at every 10-second sample): its start and length, what the
// campaign spent in it, the curve's plan for it, the catch-up multiple in
// force and the bound; it stops when each returns false.
func (c *campaignRT) catchUpWindows(hosts int, each func(from time.Time, window time.Duration, spent, plan, k, bound float64) bool) {
	window, slack := CatchUpWindow, 4*float64(c.maxBid)
	if hosts > 1 {
		window, slack = FleetCatchUpWindow, float64(hosts)*slack
	}
	n := int(window / CatchUpWindow)
	for i := n; i < len(c.tens); i++ {
		from, to := c.tens[i-n], c.tens[i]
		if to.t.Sub(from.t) != window {
			continue
		}
		k := float64(defaultCatchUp)
		if hosts == 1 {
			k = float64(pace.CatchUpPermille(defaultCatchUp, c.day.End.Sub(from.t), defaultCapWindow)) / 1000
		}
		// A lease drips over a window what was decided at its grant: the
		// plan is the curve's over the window or over the window a lease
		// window earlier, whichever is more.
		plan := max(c.plan(from.t, to.t), c.plan(from.t.Add(-leaseWindow), to.t.Add(-leaseWindow)))
		if !each(from.t, window, float64(to.cum-from.cum), plan, k, CatchUpSlack*k*plan+slack) {
			return
		}
	}
}

// maxViolationsEach bounds the violations of one invariant reported per
// campaign: the first few name the minute; the rest add nothing.
const maxViolationsEach = 5

// sampleAt is the campaign's last minute sample not after t (the zero
// sample if none).
func (c *campaignRT) sampleAt(t time.Time) sample {
	var v sample
	for _, s := range c.samples {
		if s.t.After(t) {
			break
		}
		v = s
	}
	return v
}

// hourBid is the bid the hour invariants add to an hour ending at end,
// micros: the campaign's typical largest (the 95th-percentile bid, which
// the simulator records as its bid), or the largest SPEND any host was
// asked for it by end if more. It bounds the bid the ledger's hour bound
// adds (pace's condition 7: the campaign's recorded bid, which hosts keep
// at their largest recent SPEND, or a host's own largest recent SPEND),
// and no more: a SPEND asked after the hour does not loosen it.
func (c *campaignRT) hourBid(end time.Time) float64 {
	return float64(max(c.maxBid, c.sampleAt(end).largest))
}

func hourViolations(c *campaignRT) []Violation {
	var out []Violation
	cumAt := func(t time.Time) float64 { return float64(c.sampleAt(t).cum[sPacer]) }
	for h := c.day.Start; h.Before(c.day.End); h = h.Add(time.Hour) {
		end := h.Add(time.Hour)
		if end.After(c.day.End) {
			end = c.day.End
		}
		plan := c.plan(h, end)
		spent := cumAt(end) - cumAt(h)
		last := !end.Before(c.day.End)
		behind := c.plan(c.day.Start, h) - cumAt(h)
		bid := c.hourBid(end)
		switch {
		case last && spent > LastHourBound*plan+bid:
			out = append(out, Violation{Invariant: "last hour", Campaign: c.spec.ID, At: c.at(h),
				Detail: fmt.Sprintf("spent %.0f micros, %.2fx the curve's share %.0f (bound %.1fx and a bid of %.0f)", spent, spent/max(plan, 1), plan, LastHourBound, bid)})
		case !last && behind <= float64(c.maxBid) && spent > 2*plan+bid:
			out = append(out, Violation{Invariant: "hour", Campaign: c.spec.ID, At: c.at(h),
				Detail: fmt.Sprintf("entered %.0f micros behind its curve and spent %.0f, %.2fx the curve's share %.0f (bound 2x and a bid of %.0f)", behind, spent, spent/max(plan, 1), plan, bid)})
		}
		if len(out) >= maxViolationsEach {
			break
		}
	}
	return out
}

// expectViolations judges c's pacer spend by the bounds its scenario
// declares (Spec.Expect), spent being what pacer allowed over the day:
//
//   - tracking: each spell in which the tracking error, at the campaign's
//     minute samples, exceeded TrackingMax, at the minute it began, with
//     the furthest it went;
//   - utilisation: a day that spent less than the less of Utilisation and
//     the curve oracle's utilisation less BelowIdeal, at the day's end.
func expectViolations(c *campaignRT, spent int64) []Violation {
	e := c.spec.Expect
	if e == nil || c.curve == nil || c.budget <= 0 {
		return nil
	}
	var out []Violation
	if e.TrackingMax > 0 {
		out = trackingViolations(c, e.TrackingMax)
	}
	if e.Utilisation > 0 {
		ideal := float64(c.oracleSpent) / float64(c.budget)
		bound := min(e.Utilisation, ideal-e.BelowIdeal)
		if u := float64(spent) / float64(c.budget); u < bound {
			out = append(out, Violation{Invariant: "utilisation", Campaign: c.spec.ID, At: "24:00:00",
				Detail: fmt.Sprintf("spent %.2f%% of its budget; bound %.2f%%: the less of %.2f%% and the curve oracle's %.2f%% less %.2f pt",
					100*u, 100*bound, 100*e.Utilisation, 100*ideal, 100*e.BelowIdeal)})
		}
	}
	return out
}

// trackingViolations lists each spell in which c's tracking error, at its
// minute samples, exceeded bound (a share of the budget), at the minute it
// began, with the furthest it went and which way.
func trackingViolations(c *campaignRT, bound float64) []Violation {
	var out []Violation
	var from time.Time
	var most, signed float64
	for _, s := range c.samples {
		d := float64(s.cum[sPacer])/float64(c.budget) - float64(c.curve.AtTime(s.t, c.day))/float64(bucket.PPB)
		switch {
		case math.Abs(d) > bound && from.IsZero():
			from, most, signed = s.t, math.Abs(d), d
		case math.Abs(d) > bound:
			if math.Abs(d) > most {
				most, signed = math.Abs(d), d
			}
		case !from.IsZero():
			out = append(out, trackingViolation(c, from, signed, bound))
			from = time.Time{}
		}
		if len(out) >= maxViolationsEach {
			return out
		}
	}
	if !from.IsZero() {
		out = append(out, trackingViolation(c, from, signed, bound))
	}
	return out
}

func trackingViolation(c *campaignRT, from time.Time, d, bound float64) Violation {
	way := "behind"
	if d > 0 {
		way = "ahead of"
	}
	return Violation{Invariant: "tracking", Campaign: c.spec.ID, At: c.at(from),
		Detail: fmt.Sprintf("ran up to %.2f%% of its budget %s its curve; bound %.2f%% (expect.tracking_max)", 100*math.Abs(d), way, 100*bound)}
}
