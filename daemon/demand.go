package daemon

import (
	"context"
	"math"
	"slices"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
	"go.uber.org/zap"
)

// Demand accounting: what SPENDs on this host ask for (EWMAs, the largest
// SPEND, the bid size), flushed to the ledger in batches so the fleet can
// split the day's pace by demand (fairDemand) and size buckets (capacity).
// Refill loop only, except the atomics the hot path bumps.

// largestSpendWindow is how long the largest SPEND seen keeps sizing the
// campaign's leases and bucket (between one and two windows).
const largestSpendWindow = 5 * time.Minute

// largestSpend is the largest SPEND of this window and the one before.
func (c *campaign) largestSpend() int64 { return max(c.maxAmount.Load(), c.prevMaxAmount) }

// rotateLargestSpend starts a new window for the largest SPEND (refill loop).
func (c *campaign) rotateLargestSpend(now time.Time) {
	if c.maxSince.IsZero() {
		c.maxSince = now
	}
	if now.Sub(c.maxSince) >= largestSpendWindow {
		c.prevMaxAmount = c.maxAmount.Swap(0)
		if c.prevMaxAmount > 0 {
			c.unitHistory[c.unitNext] = c.prevMaxAmount
			c.unitSpends[c.unitNext] = max(c.windowSpends, 1)
			c.unitNext = (c.unitNext + 1) % unitWindows
			c.windowSpends = 0
		}
		c.maxSince = now
	}
}

// unitWindows is how many windows with SPENDs the bid size is taken over
// (pace.LowerBidWindows: a bid below the fleet's is reported only from a
// full history).
const unitWindows = pace.LowerBidWindows

// seenUnit is the campaign's bid size as this host saw it (refill loop): the
// largest SPEND of this window and of the last unitWindows that had any; 0
// before any. (The second largest, which drops one outlier, was tried: it
// cost a 786-bid campaign with a midnight spike 1.4-2.6 points of its
// budget, its standing bids and one-bid advances being smaller.)
func (c *campaign) seenUnit() int64 { return max(c.largestSpend(), slices.Max(c.unitHistory[:])) }

// unitWindowsSeen is how many windows seenUnit is taken over: those of the
// last unitWindows that had a SPEND, and this one if it has.
func (c *campaign) unitWindowsSeen() int {
	n := 0
	if c.maxAmount.Load() > 0 {
		n++
	}
	for _, u := range c.unitHistory {
		if u > 0 {
			n++
		}
	}
	return n
}

// unitSpendsSeen is how many SPENDs seenUnit is the largest of: those of
// the windows it is taken over.
func (c *campaign) unitSpendsSeen() int {
	n := c.windowSpends
	for _, k := range c.unitSpends {
		n += k
	}
	return int(min(n, math.MaxInt32))
}

// unit is the bid size that sizes standing leases and the ledger's one-bid
// advance: what this host saw, or the fleet's if larger.
func (c *campaign) unit() int64 { return max(c.seenUnit(), c.fleetUnit) }

// usualUnit is the bid the hour's bound allows over its share
// (lease.Pace.HourUnit): the campaign's usual largest bid, not one SPEND
// asked now. The fleet's bid (the ledger's, as an operator set it or a host
// last reported it) when known; else the largest SPEND of the earlier
// windows here, so that one SPEND of several bids is not its own allowance;
// unit while neither is known.
func (c *campaign) usualUnit() int64 {
	if c.fleetUnit > 0 {
		return c.fleetUnit
	}
	if seen := slices.Max(c.unitHistory[:]); seen > 0 {
		return seen
	}
	return c.unit()
}

// updateDemand folds the SPEND demand since the last tick into the EWMAs.
func (c *campaign) updateDemand(now time.Time, ds *dayState) {
	st := ds.b.Stats(now)
	req := c.requestedBase + st.Requested
	calls := st.Allows + st.Denials
	if calls < c.lastCalls {
		c.lastCalls = 0 // a new day's bucket counts from zero
	}
	c.windowSpends += calls - c.lastCalls
	if req != c.lastRequested {
		c.lastDemandAt = now
		c.demandTicks[c.demandTickN%sparseSpends] = now
		c.demandTickN++
	}
	c.foldMeanSpend(req-c.lastRequested, calls-c.lastCalls)
	if !c.lastTick.IsZero() {
		if dt := now.Sub(c.lastTick).Seconds(); dt > 0 {
			alpha := 1 - math.Exp(-dt/demandTau.Seconds())
			c.rate += alpha * (float64(req-c.lastRequested)/dt - c.rate)
			c.callRate += alpha * (float64(calls-c.lastCalls)/dt - c.callRate)
			c.rateWeight += alpha * (1 - c.rateWeight)
		}
	}
	c.lastTick, c.lastRequested, c.lastCalls = now, req, calls
	c.followJump(now, req, calls)
}

// rampWindow is how far back followJump compares demand; rampSpends, the
// fewest SPENDs in it that can be a jump; rampSamples, how many refill
// ticks it keeps (a second of them at the default 100-ms tick, and more).
const (
	rampWindow  = time.Second
	rampSpends  = 4
	rampSamples = 16
)

// demandSample is a campaign's demand counters at one refill tick.
type demandSample struct {
	at               time.Time
	requested, calls int64
}

// followJump restarts the demand EWMAs from the last second's demand when
// it jumped (refill loop). The 10-second EWMAs follow a campaign turning
// busy in tens of seconds: from idle to its demand, the leases sized from
// them (pace.Input.DemandRate) drip a tenth of it after a second, so its
// SPENDs are paced below the pace and every tick asks for a larger lease.
// A jump is at least rampSpends SPENDs in the last rampWindow (at least a
// quarter of it measured), more than twice the EWMA's count for that time by
// four standard deviations of a Poisson count: a sparse campaign's SPENDs
// or a busy one's random bunching are no jump.
func (c *campaign) followJump(now time.Time, req, calls int64) {
	c.recent[c.recentN%rampSamples] = demandSample{at: now, requested: req, calls: calls}
	c.recentN++
	if c.rateWeight <= 0 {
		return // no EWMA yet: demand() is already what was seen
	}
	var from demandSample
	for i := 1; i < min(c.recentN, rampSamples); i++ {
		s := c.recent[(c.recentN-1-i)%rampSamples]
		if now.Sub(s.at) > rampWindow {
			break
		}
		from = s
	}
	span := now.Sub(from.at).Seconds()
	k := float64(calls - from.calls)
	if from.at.IsZero() || span < rampWindow.Seconds()/4 || k < rampSpends || req < from.requested {
		return
	}
	_, callRate := c.demand()
	if e := callRate * span; k <= 2*e+4*math.Sqrt(e) {
		return
	}
	c.rate = float64(req-from.requested) / span * c.rateWeight
	c.callRate = k / span * c.rateWeight
	c.jumpAt = now
}

// meanSpendWindow is how many of a host's last SPENDs its mean SPEND is
// taken over.
const meanSpendWindow = 64

// foldMeanSpend adds calls SPENDs asking micros in all to the mean SPEND.
func (c *campaign) foldMeanSpend(micros, calls int64) {
	if calls <= 0 || micros < 0 {
		return
	}
	c.meanSpends = min(c.meanSpends+calls, meanSpendWindow)
	c.meanSpend += (float64(micros) - float64(calls)*c.meanSpend) / float64(c.meanSpends)
	c.meanSpend = max(c.meanSpend, 0)
}

// meanBid is the campaign's mean SPEND on this host, drawn towards half its
// usual bid (usualUnit) as pace.MeanPriorSpends SPENDs would
// (pace.MeanSpend).
func (c *campaign) meanBid() float64 {
	n := c.meanSpends
	return pace.MeanSpend(int64(c.meanSpend*float64(n)), n, c.usualUnit())
}

// advanceMean is the campaign's mean SPEND that sizes the ledger's advance
// and how many SPENDs it is taken over, the prior's aside (pace.Advance,
// condition 21): the fleet's latest SPENDs as this host's last demand flush
// of the day counted them, with its own since; before any such flush, its
// own last meanSpendWindow (meanBid).
func (c *campaign) advanceMean(now time.Time, ds *dayState) (float64, int64) {
	if ds == nil || c.fleetDay != ds.day.Key || c.fleetSpends <= 0 {
		return c.meanBid(), c.meanSpends
	}
	st := ds.b.Stats(now)
	calls := max(st.Allows+st.Denials-c.flushed.Allows-c.flushed.Denials, 0)
	micros := max(st.Requested-c.flushed.Requested, 0)
	n := c.fleetSpends + calls
	return pace.MeanSpend(c.fleetMicros+micros, n, c.usualUnit()), n
}

// aheadMicros is how far the ledger may let the fleet run ahead of the
// curve (lease.Pace.Ahead): the controller's advance (pace.Advance,
// condition 21) from the campaign's mean SPEND (advanceMean), at most its
// bid (unit), and pace.AdvancePermille of its daily budget if more.
func (c *campaign) aheadMicros(now time.Time, ds *dayState, daily int64) int64 {
	mean, n := c.advanceMean(now, ds)
	return pace.Advance(mean, n, c.unit(), daily)
}

// demand returns the EWMAs of demand (micros a second) and of SPENDs a
// second, corrected for their start at zero (refill loop): a fresh daemon's
// first leases are sized from what it has seen, not from a tenth of it.
func (c *campaign) demand() (microsPerSecond, callsPerSecond float64) {
	if c.rateWeight <= 0 {
		return 0, 0
	}
	return c.rate / c.rateWeight, c.callRate / c.rateWeight
}

// sparseSpends is how many of a host's last SPENDs sparseInterval is taken
// over.
const sparseSpends = 4

// sparseInterval is the mean time between the last sparseSpends refill
// ticks that saw a SPEND on this host (refill loop); 0 before two of them.
// The 10-second EWMAs of demand fall to nothing between SPENDs an hour
// apart (the lead computed from them overflowed a Duration into minus 292
// years); this holds a sparse host's rate across them. A busy host's
// interval is a tick.
func (c *campaign) sparseInterval() time.Duration {
	n := min(c.demandTickN, sparseSpends)
	if n < 2 {
		return 0
	}
	newest := c.demandTicks[(c.demandTickN-1)%sparseSpends]
	oldest := c.demandTicks[(c.demandTickN-n)%sparseSpends]
	return newest.Sub(oldest) / time.Duration(n-1)
}

// typicalSpend is the mean SPEND on this host (the demand EWMAs' ratio), or
// the bid when no SPEND has been seen.
func (c *campaign) typicalSpend() int64 {
	rate, calls := c.demand()
	if calls <= 0 || rate <= 0 {
		return c.unit()
	}
	return max(int64(math.Ceil(rate/calls)), 1)
}

// sparse reports whether the campaign's SPENDs on this host are too few to
// keep leases dripping: fewer than two per half lease window (refill loop).
func (c *campaign) sparse() bool {
	_, calls := c.demand()
	return calls*c.cfg.LeaseWindow.Seconds()/2 < 2
}

// reportsBid reports whether a demand flush sends u, this host's bid size
// (seenUnit), as the campaign's: when the controller's rule lets it
// (pace.ReportsBid, condition 20: after a few windows with SPENDs while the
// fleet has no bid; a move of the fleet's bid as this host last read it
// only as the largest of enough SPENDs), on the day's first flush or when
// u moved by more than an eighth since it last sent one.
func (c *campaign) reportsBid(u int64, day string) bool {
	if !pace.ReportsBid(u, c.fleetUnit, c.unitWindowsSeen(), c.unitSpendsSeen()) {
		return false
	}
	return c.bidSentDay != day || u > c.bidSent+c.bidSent/8 || u < c.bidSent-c.bidSent/8
}

// demandFlush is how often a campaign's observed demand goes to the ledger
// (for pacerctl curve fit, its bid size and the host's share of its demand):
// batched, never a write per SPEND; sparseDemandFlush, a sparse campaign's.
const (
	demandFlush       = time.Minute
	sparseDemandFlush = 5 * time.Minute
)

// flushPhase is the second of the minute at which holder flushes campaign's
// demand: spread over 5 to 55 s by their names, so that the hosts' flushes
// do not come together, and each falls in the minute of its clock by 5 s
// or more, wider than the default skew bound (1 s), so hosts' clocks agree
// on its minute (the ring of recent minutes counts it there: updateShare);
// a larger skew only moves a flush to a neighbouring minute, which a span
// of five or more minutes mostly holds too.
func flushPhase(holder, campaign string) time.Duration {
	const spread = 50 * time.Second
	return 5*time.Second + time.Duration(hash(holder+"\x00"+campaign)%uint64(spread/time.Millisecond))*time.Millisecond
}

// flushAt is the first instant at phase past a whole minute at or after
// from.
func flushAt(from time.Time, phase time.Duration) time.Time {
	t := from.Truncate(time.Minute).Add(phase)
	if t.Before(from) {
		t = t.Add(time.Minute)
	}
	return t
}

// nextFlush is when the campaign's demand is flushed next, every apart
// (demandFlush, or sparseDemandFlush for a sparse campaign): the first time
// every after the campaign was loaded here, at the retry's time after a
// flush failed, else at its phase of the minute at least every after the
// last was due (flushAt): the first two flushes at least every apart,
// those after on the minute's phase. A flush with nothing to count is not
// made, and moves nothing. Not sooner the first time: a fresh daemon's
// first flush takes its share from the slot in progress, where the counts
// of its previous run (or of the hosts that served it before) stand
// beside its own few, and metered by that a restarted host spent 12% of
// the pace in its first 2 s (TestFreshRestartsReachPaceWithinTwoSeconds).
func (c *campaign) nextFlush(every time.Duration) time.Time {
	switch {
	case c.flushBase.IsZero():
		return c.loadedAt.Add(every)
	case !c.flushRetry.IsZero():
		return c.flushRetry
	}
	return flushAt(c.flushBase.Add(every), c.flushPhase)
}

// flushDone notes a demand flush that was due at due (nextFlush) and ran
// at now: the next is counted from due if that was on the minute's phase
// and less than an interval ago, else from now.
func (c *campaign) flushDone(now, due time.Time, every time.Duration) {
	c.flushBase = due
	if due.IsZero() || !c.flushRetry.IsZero() || !due.After(now.Add(-every)) {
		c.flushBase = now
	}
	c.flushRetry = time.Time{}
}

// flushDemand adds the demand seen since the last flush to the current slot
// of the day.
func (c *campaign) flushDemand(ctx context.Context, now time.Time, ds *dayState, due time.Time, every time.Duration) {
	st := ds.b.Stats(now)
	slot := int(int64(now.Sub(ds.day.Start)) * lease.DemandSlots / int64(ds.day.Length()))
	d := lease.Demand{
		Slot:        min(max(slot, 0), lease.DemandSlots-1),
		Allowed:     st.Allows - c.flushed.Allows,
		Denied:      st.Denials - c.flushed.Denials,
		MicrosAsked: st.Requested - c.flushed.Requested,
	}
	d.Requests = d.Allowed + d.Denied
	if d.Requests <= 0 {
		// Nothing to count: no flush, and none skipped (the next SPENDs
		// are flushed at the first step that sees them, if the last flush
		// was an interval ago or more).
		return
	}
	// The bid only when it moved by more than an eighth since this host
	// last sent it, or on the day's first flush: it sizes the shard counts
	// of days to come, which need no precision, and an unchanged write
	// every flush would double the flush's commands.
	//
	// Not before the host has seen SPENDs in pace.ReportBidWindows windows: a
	// sparse host's first SPEND or two (after a start, or after the
	// campaign was retired here) are no bid, and reported they overwrote
	// the fleet's (or the operator's) with whatever one SPEND happened to
	// be, so every host held standing bids that the next, slightly larger
	// SPEND did not fit (reportsBid).
	if u := c.seenUnit(); c.reportsBid(u, ds.day.Key) {
		d.BidMicros = u
	}
	// The fleet's latest SPENDs only for a budget whose advance they size
	// (pace.AdvanceUsesMean): counting them reads slots back to the day's
	// start for a campaign with few SPENDs in each.
	if s := c.settings.Load(); s != nil {
		d.Fleet = pace.AdvanceUsesMean(c.unit(), s.DailyMicros)
	}
	if c.d.ledgerRefusal(ctx) != nil {
		// A host that may take no lease (its gate refuses: clock skewed,
		// ledger not durable) serves none of what it is asked: its SPENDs
		// count for the curve's fit (requests, denials), but their micros
		// are no part of the fleet's demand that the hosts which serve
		// share (updateShare).
		d.MicrosAsked = 0
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	defer cancel()
	start := time.Now()
	rc := c.shareSpan(ds.day.Key, unixMinute(now))
	fleet, err := c.ledger.AddDemand(ctx, c.id, ds.day.Key, ds.day.Start, rc, d)
	c.d.observeLedger("demand", start, err)
	if err != nil {
		c.log.Warn("demand flush failed; will retry with the counts added up", zap.Error(err))
		// Again in an eighth of a lease window, not every tick: a ledger
		// that is down gets no flood of flushes from every campaign.
		c.flushBase, c.flushRetry = now, now.Add(c.cfg.LeaseWindow/8)
		return
	}
	c.flushed = st
	c.flushDone(now, due, every)
	c.fleetDay, c.fleetSpends, c.fleetMicros = ds.day.Key, fleet.Spends, fleet.Micros
	if d.BidMicros > 0 {
		c.bidSent, c.bidSentDay = d.BidMicros, ds.day.Key
	}
	c.updateShare(ds.day.Key, d.Slot, rc, d.MicrosAsked, fleet)
}

// unixMinute is t's minute since the Unix epoch.
func unixMinute(t time.Time) int64 { return t.Unix() / 60 }

// shareFlush is one of this host's demand flushes of a campaign-day: the
// minute it was counted in and its micros asked.
type shareFlush struct{ minute, asked int64 }

// shareSpanMinutes is the least span of whole minutes a host judges its
// share on: the sparse flush interval, so that a span holds about one
// flush of each host that flushes that seldom (condition 15).
const shareSpanMinutes = int64(sparseDemandFlush / time.Minute)

// shareSpan is what a demand flush of day at minute asks of the ring of
// recent minutes (lease.Recent): to count its micros in minute, and the
// fleet's micros asked over the span this host judges next (judgedSpan), if
// the ring still holds it.
func (c *campaign) shareSpan(day string, minute int64) lease.Recent {
	rc := lease.Recent{Minute: minute}
	if from, to, _, ok := c.judgedSpan(day, minute); ok {
		rc.From, rc.To = from, to
	}
	return rc
}

// judgedSpan is the span of whole minutes a flush of day at minute judges
// this host's share on, and its own micros asked there: from after the
// latest of its flushes at least shareSpanMinutes before its last, up to
// its last, if the ring of recent minutes holds all of them at minute.
func (c *campaign) judgedSpan(day string, minute int64) (from, to, own int64, ok bool) {
	fs := c.shareFlushes
	if c.shareDay != day || len(fs) < 2 || fs[len(fs)-1].minute >= minute {
		return 0, 0, 0, false
	}
	to = fs[len(fs)-1].minute
	for i := len(fs) - 2; i >= 0; i-- {
		if fs[i].minute <= to-shareSpanMinutes {
			from = fs[i].minute + 1
			if minute-from >= lease.RecentMinutes {
				return 0, 0, 0, false
			}
			for _, f := range fs[i+1:] {
				own += f.asked
			}
			return from, to, own, true
		}
	}
	return 0, 0, 0, false
}

// updateShare folds this host's share of the campaign's demand into
// c.share (refill loop only), from what a demand flush of day just added
// (asked, in slot, counted in rc.Minute) and returned (the fleet's).
//
// The share is judged on spans of whole minutes, each flush counted in the
// minute of its own time (condition 15): a span holds every flush the
// fleet counted in its minutes, whatever order they reached the ledger in,
// and this host's own of them. Spans of at least shareSpanMinutes, ending
// at this host's last flush before this one (so every flush of the span's
// last minute is in): each host flushes at its own second of the minute
// (flushPhase), so the others' flushes in a span cover about as long as the
// host's own, and a span holds about one flush of each host whose campaign
// is sparse (flushing every sparseDemandFlush). Where the 15-minute slots
// took up to half an hour, a host whose gate closed (or that died), and so
// counts no micros from its next flush on, leaves the others' spans within
// shareSpanMinutes of that flush.
//
// Until a span is judged, a stand-in comes from the slot in progress, which
// errs high since the other hosts' counts in it are up to their flush
// interval behind this host's own: a fresh daemon's share is needed before
// its first span.
func (c *campaign) updateShare(day string, slot int, rc lease.Recent, asked int64, fleet lease.FleetAsked) {
	if from, to, own, ok := c.judgedSpan(day, rc.Minute); ok && rc.From == from && rc.To == to && fleet.Span > 0 {
		inst := min(float64(own)/float64(fleet.Span), 1)
		// The span's SPENDs, by the host's mean SPEND.
		spends := float64(fleet.Span) / max(c.meanBid(), 1)
		c.share += pace.ShareWeight(spends) * (inst - c.share)
		c.shareJudged = true
	}
	if day != c.shareDay {
		c.shareDay, c.shareFlushes = day, c.shareFlushes[:0]
	}
	switch fs := c.shareFlushes; {
	case len(fs) > 0 && fs[len(fs)-1].minute >= rc.Minute: // a second flush in a minute (one retried)
		fs[len(fs)-1].asked += asked
	default:
		// Only flushes the ring still holds, and the one before them (a
		// span starts after it).
		keep := 0
		for keep+1 < len(fs) && fs[keep+1].minute <= rc.Minute-lease.RecentMinutes {
			keep++
		}
		c.shareFlushes = append(fs[keep:], shareFlush{minute: rc.Minute, asked: asked})
	}
	if day != c.standDay || slot != c.standSlot {
		c.standDay, c.standSlot, c.standAsked = day, slot, 0
	}
	c.standAsked += asked
	if c.shareJudged || fleet.Slot <= 0 || c.standAsked <= 0 {
		return
	}
	inst := min(float64(c.standAsked)/float64(fleet.Slot), 1)
	if c.share == 0 {
		c.share = inst
		return
	}
	c.share += 0.3 * (inst - c.share)
}

// fairDemand is what a grant tells the shard of this host's demand (micros
// a second, rounded up: a sparse host's counts too) and how long the shard
// should remember it: several times the host's mean interval between
// visits to one shard (it asks a random shard about every half window), so
// that a host is not forgotten between its visits while it is busy
// (refill loop). None from a host alone (pace.Alone): a host that stopped
// serving (its gate closed, or it died) leaves records that would hold the
// one that serves to their old split until they expire (4 × shards × half
// a window after its last grant there: 16 minutes at 8 shards and a
// minute's window).
func (c *campaign) fairDemand(ds *dayState) (int64, time.Duration) {
	rate, _ := c.demand()
	if rate <= 0 || pace.Alone(c.share) {
		return 0, 0
	}
	ttl := 4 * time.Duration(max(ds.shards, 2)) * c.cfg.LeaseWindow / 2
	return int64(min(math.Ceil(rate), float64(lease.MaxBudgetMicros))), min(ttl, lease.MaxDemandTTL)
}

// demandTau is the EWMA's time constant: long enough to smooth Poisson
// arrivals, short enough to follow a traffic ramp within a lease window.
const demandTau = 10 * time.Second

// capacity sizes the local bucket: a burst window of the drip, and room
// for the largest recent SPENDs.
func (c *campaign) capacity(dripPerSecond int64) int64 {
	burst := float64(dripPerSecond) * c.cfg.BurstWindow.Seconds()
	// Room for a burst of the largest recent SPENDs: a slow campaign's
	// random arrivals bunch (a bucket of four bids lost 15% of the SPENDs of
	// a campaign at 1 a second whose drip was 1.2x its demand; sixteen, 2%),
	// and for two bids of a sparse campaign (its standing lease and a bid
	// more), whose largest recent SPEND may be long forgotten. The fleet's
	// pace is the ledger's to keep: this bounds only one host's burst.
	return max(int64(burst), 16*c.largestSpend(), 2*c.unit(), 1)
}
