package daemon

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/pace"
	"go.uber.org/zap"
)

// The refill and lease loop: each tick (step) opens the day, sizes the next
// lease (want), asks the ledger for it (grant), renews and releases leases,
// re-asserts leases a shard lost (reassert, lostWrites) and re-reads
// settings. Everything here runs under loopMu, off the hot path.

// step is one round of the refill loop at now, in four phases: settings
// and housekeeping, the campaign-day, what the host knows (observe), and
// the ledger calls the pacing controller's decision asks for (lease).
func (c *campaign) step(ctx context.Context, now time.Time) {
	c.loopMu.Lock()
	defer c.loopMu.Unlock()
	if c.active.Swap(false) {
		c.lastActive = now
	}
	c.wake.Store(false)
	defer c.schedule(now)
	c.housekeep(ctx, now)
	if c.idle(now) {
		c.retire(ctx, now)
		return
	}
	s := c.settings.Load()
	ds := c.currentDay(ctx, now, s)
	if ds == nil {
		return
	}
	t := c.observe(ctx, now, s, ds)
	// Size the bucket after this tick's grants, from the drip they set up.
	defer func() { ds.b.SetCapacity(c.capacity(ds.b.Stats(now).DripPerSecond)) }()
	c.lease(ctx, now, s, ds, t)
}

// housekeep re-reads the settings when a broadcast or the reread interval
// says to, forgets which shards looked empty every CampaignRefresh (a
// rebalance may have refilled them), and retries pending releases.
func (c *campaign) housekeep(ctx context.Context, now time.Time) {
	cfg := c.cfg
	fresh := c.recheck.Load() && c.newVersion.Swap(false)
	if c.recheck.Load() && (fresh || c.lastEventRefresh.IsZero() || now.Sub(c.lastEventRefresh) >= cfg.EventRecheck) {
		c.eventRefresh(ctx, now)
	} else if (c.stale.Load() && now.Sub(c.lastRefresh) >= cfg.EventRecheck) || now.Sub(c.lastRefresh) >= cfg.CampaignReread {
		c.stale.Store(false)
		if !c.refresh(ctx, now) {
			c.stale.Store(true)
		}
	}
	if now.Sub(c.lastLook) >= cfg.CampaignRefresh {
		c.lastLook = now
		if ds := c.day.Load(); ds != nil {
			clear(ds.shardEmpty)
		}
	}
	c.retryReleases(ctx, now)
	if ds := c.day.Load(); ds != nil {
		c.releaseParked(ctx, now, ds, false)
	}
}

// currentDay returns the campaign-day to lease from now, opening it (and
// dropping the one before) as the local day rolls; nil while the campaign
// is paused, the day cannot be opened, or it is refused. A day whose
// shards lost writes has its leases re-asserted first.
func (c *campaign) currentDay(ctx context.Context, now time.Time, s *settings) *dayState {
	ds := c.day.Load()
	if s.State == lease.StatePaused {
		if ds != nil {
			c.dropDay(ctx, now, ds)
			c.day.Store(nil)
		}
		return nil
	}
	day := bucket.DayOf(now, s.loc)
	if ds != nil && ds.day.Key != day.Key {
		c.dropDay(ctx, now, ds)
		c.day.Store(nil)
		ds = nil
	}
	if ds == nil {
		if ds = c.openDay(ctx, now, s, day); ds == nil {
			return nil
		}
		c.day.Store(ds)
	}
	if ds.refused.Load() {
		return nil
	}
	hinted := ds.reassertHint.Load() && (ds.hintAt.IsZero() || now.Sub(ds.hintAt) >= c.cfg.EventRecheck)
	if hinted {
		ds.reassertHint.Store(false)
		ds.hintAt = now
	}
	if ds.reassert.Swap(false) || hinted {
		c.reassertAll(ctx, now, ds)
	}
	return ds
}

// tick is what one step observed: the leases that ended, the one to renew
// now (if any), and the controller's decision.
type tick struct {
	closed []bucket.Closed
	ending string
	d      pace.Decision
}

// observe gathers what the host knows at now (exhaustion, ended leases,
// demand, the share meter), flushes demand to the ledger when due, and
// asks the pacing controller (plan).
//
// A lease that ends before the next tick is renewed at this one, so its
// successor is in place when it ends; at most a sixteenth of a window
// early, so long ticks do not cut leases short. Only a lease whose shard
// filled the last ask there is renewed on it: a shard that could not is
// running dry, and its successor should come from another.
func (c *campaign) observe(ctx context.Context, now time.Time, s *settings, ds *dayState) tick {
	cfg := c.cfg
	c.recheckExhaustion(ctx, now, ds)
	t := tick{closed: ds.b.Expire(now)}
	if len(t.closed) == 0 {
		horizon := now.Add(min(cfg.TickInterval, cfg.LeaseWindow/16))
		var endingAt time.Time
		for id, h := range ds.leases {
			if h.end.Before(horizon) && ds.shardFilled[h.shard] && (t.ending == "" || h.end.Before(endingAt)) {
				t.ending, endingAt = id, h.end
			}
		}
	}
	// Demand first: the window rotateLargestSpend closes counts the SPENDs
	// updateDemand has just seen.
	c.updateDemand(now, ds)
	c.rotateLargestSpend(now)
	// Before the share meter: it meters by the fleet's rates plan notes.
	t.d = c.plan(now, s, ds, t)
	c.meterSpend(now, ds)
	// A campaign loaded here a lease window ago (Warm, at a restart or the
	// day's first use) and not asked for since is as sparse as one seen
	// hours apart: its first SPEND here fetches too.
	c.sparseNow.Store(c.sparse() && (!c.lastDemandAt.IsZero() || now.Sub(c.loadedAt) >= cfg.LeaseWindow))
	flushEvery := demandFlush
	if c.sparse() {
		flushEvery = sparseDemandFlush
	}
	if due := c.nextFlush(flushEvery); !now.Before(due) {
		c.flushDemand(ctx, now, ds, due, flushEvery)
	}
	return t
}

// lease carries out the controller's decision: it sizes the ask (want),
// renews the ending lease in the same ledger call, releases the others
// that ended, and asks a shard for the rest.
//
// The tokens a lease that ended took with it (dripped, unspent, backed by
// no other lease) are credited at once by its successor (carry), so a
// renewal does not empty the bucket of a slow campaign; what it forwent
// while the bucket was full is not (credited, it would be forgone again).
// What this tick's grants do not take is not carried on. A tick that came
// after a lease's end (late) has its successor credit the drip missed
// since, at most a burst window of it (pace.LateCredit).
func (c *campaign) lease(ctx context.Context, now time.Time, s *settings, ds *dayState, t tick) {
	want, standing := c.want(now, s, ds, t)
	closed := t.closed
	ds.late = 0
	for _, cl := range t.closed {
		if h, ok := ds.leases[cl.ID]; ok && now.After(h.end) {
			ds.late = max(ds.late, now.Sub(h.end))
		}
	}
	defer func() { ds.late = 0 }()
	if t.ending != "" && want > 0 {
		if cl, ok := ds.b.CloseFeed(now, t.ending); ok {
			closed = append(closed, cl)
		}
	}
	if want > 0 && standing && len(closed) == 0 {
		// A standing top-up renews the oldest lease rather than opening
		// another beside it, so the ledger counts its spent bid at once
		// (what it still holds is withdrawn with it, and the new one is
		// that much larger).
		if id, ok := ds.oldestLease(); ok {
			if cl, ok := ds.b.CloseFeed(now, id); ok {
				closed = append(closed, cl)
				want += cl.Unused
				ds.shardFilled[ds.leases[id].shard] = true // renew on its shard
			}
		}
	}
	if want > 0 && !standing && len(closed) == 0 {
		// The host's first regular lease after SPENDs fetched theirs (a
		// campaign turning busy) renews one of them: the ledger counts its
		// spent at once, and it costs no release of its own.
		if id, ok := ds.fetchedLease(); ok {
			if cl, ok := ds.b.CloseFeed(now, id); ok {
				closed = append(closed, cl)
				want += cl.Unused
				ds.shardFilled[ds.leases[id].shard] = true
			}
		}
	}
	ds.carry = 0
	for _, cl := range closed {
		ds.carry += cl.Unused - cl.Forgone
	}
	defer func() { ds.carry = 0 }()
	for _, cl := range closed {
		h := ds.leases[cl.ID]
		delete(ds.leases, cl.ID)
		if want > 0 && ds.shardFilled[h.shard] {
			c.grant(ctx, now, s, ds, h.shard, want, 0, standing, &renewal{Closed: cl, expiry: h.expiry})
			want = 0
			continue
		}
		c.parkRelease(ctx, now, ds, h, &renewal{Closed: cl, expiry: h.expiry})
	}
	if want > 0 && !standing && c.sweeping(now, ds) {
		c.sweep(ctx, now, s, ds, want)
		return
	}
	if want > 0 {
		if shard, ok := ds.pickShard(); ok {
			ending, more := c.mergeIfFull(ctx, now, ds, shard)
			c.grant(ctx, now, s, ds, shard, want+more, 0, standing, ending)
		}
	}
}

// mergeIfFull makes room for a grant on shard in the day's first two
// lease windows (a start sweep and its leases' lives) when the bucket's
// feeds are all open (bucket.MaxFeeds) and one of them was granted short
// while the host was starting and credited whole (nothing left to drip):
// the one on shard if there is one, which the grant renews, else the one
// ending first, which makeRoom releases on its own shard. Otherwise the
// bucket would refuse the new lease, the host would give it back and wait
// an eighth of a window, while those leases, their tokens spent, hold its
// feeds until they end.
func (c *campaign) mergeIfFull(ctx context.Context, now time.Time, ds *dayState, shard int) (*renewal, int64) {
	if len(ds.leases) < bucket.MaxFeeds || now.Sub(ds.day.Start) >= 2*c.cfg.LeaseWindow {
		return nil, 0
	}
	id, ok := ds.sweptLease(shard)
	if !ok {
		return nil, 0
	}
	return c.makeRoom(ctx, now, ds, shard, id)
}

// makeRoom closes the feed of lease id for a grant on shard: a lease on
// shard is renewed by that grant (renewEarly); a lease on another shard is
// released there on its own (condition 13's full bucket), so that the grant
// goes to the shard due, the one asked longest ago, and not back to a shard
// the host asked a moment ago. Renewing the lease on its own shard instead
// kept a host whose campaign has more shards than its bucket has feeds on
// the first eight shards it swept, each giving a tick of its release: one
// host on 16 shards spent half its pace for the day's first minute. It
// returns the renewal, if any, and the micros the grant asks for again on
// top of its own ask (the closed lease's unused micros).
func (c *campaign) makeRoom(ctx context.Context, now time.Time, ds *dayState, shard int, id string) (*renewal, int64) {
	on := ds.leases[id].shard
	ending, more := c.renewEarly(now, ds, id)
	if ending == nil || on == shard {
		return ending, more
	}
	key := lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: on}
	c.releaseLease(ctx, now, ending.release(key, ending.expiry.Add(c.cfg.Grace+time.Minute)))
	return nil, more
}

// renewEarly closes the feed of lease id, before its end, for a grant on
// its shard to renew it: the renewal, and the micros it gives back (its
// unused micros), which the grant asks for again on top of its own ask.
// What it had dripped and not spent is credited at once by its successor
// (ds.carry); what it had not dripped yet drips with the successor.
func (c *campaign) renewEarly(now time.Time, ds *dayState, id string) (*renewal, int64) {
	before := ds.b.Stats(now).Tokens
	cl, ok := ds.b.CloseFeed(now, id)
	if !ok {
		return nil, 0
	}
	h := ds.leases[id]
	delete(ds.leases, id)
	ds.carry += max(before-ds.b.Stats(now).Tokens, 0)
	return &renewal{Closed: cl, expiry: h.expiry}, cl.Unused
}

// sweeping reports whether the host sweeps the shards (pace.Sweeps).
func (c *campaign) sweeping(now time.Time, ds *dayState) bool {
	return pace.Sweeps(ds.plan.Starting, now.Sub(ds.day.Start), c.cfg.LeaseWindow)
}

// sweep is one round of a host's start sweep (pace.SweepsOn): it asks the
// shard asked longest ago for want (the regular ask), then the next shard
// not asked for a pace.MinGrantGap for what the round still lacks of a gap
// (or a tick) of the host's target (pace.SweepAsk), and so on while that is
// not filled, the round is within the host's share of the shards, and, past
// the regular ask, the shard asked last granted it its part of the curve's
// release. Only the regular ask carries the host's demand for the ledger's
// fair split (pace.SweepSplits). A shard where the host holds a lease
// renews it in the same call, so a sweep holds one lease a shard; when the
// bucket's feeds are all open, a swept lease credited whole makes room
// (sweepRenewal).
func (c *campaign) sweep(ctx context.Context, now time.Time, s *settings, ds *dayState, want int64) {
	gathers := pace.ShardGathers(ds.plan.FleetWindow, c.cfg.LeaseWindow, ds.shards)
	taper := 1 - now.Sub(ds.day.Start).Seconds()/c.cfg.LeaseWindow.Seconds()
	need := pace.SweepAsk(ds.plan, ds.b.Stats(now).Tokens, c.cfg.TickInterval)
	for asked := 0; ; asked++ {
		shard, ok := ds.pickShard()
		if !ok || ds.exhausted.Load() || ds.closed || (asked > 0 && now.Sub(ds.shardAskedAt[shard]) < pace.MinGrantGap) {
			return
		}
		ending, more, ok := c.sweepRenewal(ctx, now, ds, shard)
		if !ok {
			return
		}
		ds.answer, ds.unsplit = 0, !pace.SweepSplits(asked+1)
		ask := want
		if asked > 0 {
			ask = min(want, need)
		}
		c.grant(ctx, now, s, ds, shard, ask+more, 0, false, ending)
		ds.unsplit = false
		want -= ds.answer - more
		need -= ds.answer - more
		round := pace.SweepRound{Shards: ds.shards, Share: c.share, Asked: asked + 1, Left: min(want, need),
			Gathered: ds.answer - more, Gathers: gathers, Taper: taper}
		if !pace.SweepsOn(round) {
			return
		}
	}
}

// sweepRenewal makes room for a sweep's grant on shard: it renews the
// lease held there (renewing), else, when every feed of the bucket is open,
// it closes a lease swept earlier and credited whole (makeRoom: renewed if
// on shard, else released on its own; the full bucket's rule, condition
// 13, as mergeIfFull keeps it). ok is false when the sweep cannot ask: the
// bucket is full and no lease qualifies.
func (c *campaign) sweepRenewal(ctx context.Context, now time.Time, ds *dayState, shard int) (*renewal, int64, bool) {
	if ending, more := c.renewing(now, ds, shard); ending != nil || len(ds.leases) < bucket.MaxFeeds {
		return ending, more, true
	}
	id, ok := ds.sweptLease(shard)
	if !ok {
		return nil, 0, false
	}
	ending, more := c.makeRoom(ctx, now, ds, shard, id)
	return ending, more, ending != nil || len(ds.leases) < bucket.MaxFeeds
}

// renewing closes the feed of a lease held on shard, if any, for the
// sweep's grant there to renew (renewEarly).
func (c *campaign) renewing(now time.Time, ds *dayState, shard int) (*renewal, int64) {
	if id, ok := ds.leaseOn(shard); ok {
		return c.renewEarly(now, ds, id)
	}
	return nil, 0
}

// eventRefresh re-reads the settings because a broadcast asked to, at most
// once per EventRecheck (step checks). A revoke whose cut the ledger
// confirms (a new version with a smaller daily budget) gives back the
// tokens and leases held, as a pause does; a forged or stale one costs this
// one read. A ledger that cannot be read leaves the request pending.
func (c *campaign) eventRefresh(ctx context.Context, now time.Time) {
	c.lastEventRefresh = now
	c.recheck.Store(false)
	revoked := c.cutCheck.Swap(false)
	old := c.settings.Load()
	if !c.refresh(ctx, now) {
		c.recheck.Store(true)
		if revoked {
			c.cutCheck.Store(true)
		}
		return
	}
	fresh := c.settings.Load()
	if ds := c.day.Load(); ds != nil && fresh.Version != old.Version {
		// The operator changed the campaign (a resume, a new budget): a
		// hold for shards that had nothing ends with the news.
		ds.nextGrantAt = time.Time{}
	}
	if revoked && fresh.Version != old.Version && fresh.State == lease.StateActive && fresh.DailyMicros < old.DailyMicros {
		if ds := c.day.Load(); ds != nil {
			c.log.Info("budget cut confirmed by the ledger; giving back the leases held", zap.Int64("daily_micros", fresh.DailyMicros))
			c.dropDay(ctx, now, ds)
			c.day.Store(nil)
		}
	}
}

// refresh re-reads the campaign's settings from the ledger and reports
// whether it could.
func (c *campaign) refresh(ctx context.Context, now time.Time) bool {
	c.lastRefresh = now
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	defer cancel()
	start := time.Now()
	fresh, err := c.ledger.GetCampaign(ctx, c.id)
	c.d.observeLedger("refresh", start, err)
	if err != nil {
		c.log.Warn("campaign refresh failed; keeping the settings we have", zap.Error(err))
		return false
	}
	old := c.settings.Load()
	if ds := c.day.Load(); ds != nil {
		for i := range ds.shardEmpty {
			ds.shardEmpty[i] = false // a rebalance may have refilled them: look again
		}
	}
	c.lastLook = now
	if fresh.Version == old.Version {
		return true
	}
	c.settings.Store(c.d.settingsOf(fresh))
	if ds := c.day.Load(); ds != nil && ds.exhausted.Swap(false) {
		// A raise, a resume: whatever changed, lease again; the shards say
		// again if they are empty.
		c.log.Info("campaign settings changed; asking the ledger for budget again", zap.String("day", ds.day.Key))
	}
	c.log.Info("campaign settings changed", zap.Int64("version", fresh.Version), zap.String("state", fresh.State),
		zap.Int64("daily_micros", fresh.DailyMicros), zap.String("curve", fresh.Curve))
	return true
}

// openDay opens (or joins) the campaign-day in the ledger and returns a fresh
// local state for it; nil when the ledger could not be reached (retried next
// tick).
func (c *campaign) openDay(ctx context.Context, now time.Time, s *settings, day bucket.Day) *dayState {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.LedgerTimeout)
	defer cancel()
	ds := &dayState{day: day, b: c.d.newDayBucket(c.id, day.Key, c.capacity(0)), leases: map[string]heldLease{}, curve: s.curve}
	start := time.Now()
	n, err := c.ledger.OpenDay(ctx, s.Campaign, day.Key, day.Start, now)
	c.d.observeLedger("open", start, err)
	switch {
	case errors.Is(err, lease.ErrLedgerLost):
		c.log.Error("ledger lost this campaign-day's state; refusing to spend from it", zap.String("day", day.Key), zap.Error(err))
		ds.refused.Store(true)
		return ds
	case err != nil:
		c.log.Warn("cannot open campaign-day", zap.String("day", day.Key), zap.Error(err))
		return nil
	}
	c.seenDays[day.Key] = true
	if s.Curve == AutoCurve {
		ds.curve = c.autoCurve(ctx, s, day)
	}
	if bid, err := c.ledger.Bid(ctx, c.id); err == nil {
		c.fleetUnit = bid
	} else {
		c.log.Debug("cannot read the campaign's bid size; using what this host saw", zap.Error(err))
	}
	ds.shards = n
	ds.shardEmpty = make([]bool, n)
	ds.shardFilled = make([]bool, n)
	ds.shardRead = make([]pace.ShardReading, n)
	ds.shardAvailable = make([]int64, n)
	ds.shardAskedAt = make([]time.Time, n)
	ds.parked = make([]parkedRelease, n)
	ds.shardUnspent = make([]int64, n)
	ds.known = make([]lease.History, n)
	for i := range ds.known {
		// The history the start's re-assertion saw (reassertPrevious).
		ds.known[i] = c.d.ran.takeSeen(lease.ShardKey{Campaign: c.id, Day: day.Key, Shard: i})
	}
	for i, part := range lease.Split(s.DailyMicros, n) {
		// Until a shard answers, assume it holds its part as of now.
		ds.shardRead[i] = pace.ShardReading{Left: part, Budget: part, CurveAt: ds.curve.AtTime(now, day)}
		ds.shardUnspent[i] = part
	}
	ds.rng = rand.New(rand.NewPCG(hash(c.cfg.Holder), uint64(day.Start.Unix())))
	return ds
}

// want sizes the next lease, or returns 0 when no lease is needed now: the
// pacing controller's ask (d, package pace), once the gates below let this
// host ask at all.
//
// A campaign too sparse on this host for that (fewer than two SPENDs per
// half window) is given a standing lease instead: one bid, held for a
// StandingWindow and renewed, for as long as StandingIdle after its last
// SPEND here, so its next SPEND finds a bid in the bucket rather than an
// empty one (standing is then true).
func (c *campaign) want(now time.Time, s *settings, ds *dayState, t tick) (int64, bool) {
	cfg := c.cfg
	if ds.exhausted.Load() || ds.closed || now.Before(ds.nextGrantAt) {
		return 0, false
	}
	if !now.Add(cfg.SkewBound + time.Second).Before(ds.day.End) {
		return 0, false // too close to midnight for a lease worth having
	}
	if cfg.SparseWait > 0 && c.sparseNow.Load() && !c.lastDemandAt.IsZero() && !c.standsHere(now, ds) {
		// Its SPENDs fetch their leases (fetchFor): nothing is held here
		// for a SPEND that may not come. (One never used here still gets
		// its first lease below, as Warm primes it.)
		return 0, false
	}
	if ds.spendAhead() {
		return 0, false
	}
	unit := c.unit()
	if unit > 0 && cfg.StandingIdle > 0 && !c.lastDemandAt.IsZero() && now.Sub(c.lastDemandAt) < c.standingIdle() &&
		c.sparse() {
		if ds.throttled(now) {
			return 0, false
		}
		st := ds.b.Stats(now)
		if held := st.Tokens + st.Reserve; held < unit {
			return c.standingBids(now, s, unit)*unit - held, true
		}
		return 0, false
	}
	if c.lastDemandAt.IsZero() || now.Sub(c.lastDemandAt) > 2*cfg.LeaseWindow {
		// Idle: let held leases run out, keep no budget from busier hosts.
		// A campaign never used here (loaded by Warm at start) gets one
		// lease a day to start from, not one every half window for ever.
		if len(ds.leases) > 0 || !c.lastDemandAt.IsZero() || !ds.lastGrantAt.IsZero() {
			return 0, false
		}
	}
	gate := pace.Gate{SinceGrant: now.Sub(ds.lastGrantAt), Holding: len(ds.leases) > 0, Jumped: c.jumpAt.After(ds.lastGrantAt)}
	gate.Renewing = t.ending != "" || (len(t.closed) > 0 && len(ds.leases)-len(t.closed) <= 1)
	if !pace.MayAsk(gate) {
		return 0, false // a ledger call a pace.MinGrantGap at most while leases drip
	}
	return t.d.Ask, false
}

// plan is the pacing controller's decision for the campaign now (package
// pace), given what the leases this host holds supply, and those that end
// this tick (t). It notes the
// fleet's rates for the share meters (shareThrottle, meterSpend).
func (c *campaign) plan(now time.Time, s *settings, ds *dayState, t tick) pace.Decision {
	window := c.cfg.LeaseWindow
	rate, calls := c.demand()
	cNow := ds.curve.AtTime(now, ds.day)
	d := pace.Plan(pace.Input{
		Budget: s.DailyMicros, Remaining: ds.remaining(), Stale: pace.Stale(ds.shardRead, cNow),
		CurveNow: cNow, CurveNext: ds.curve.AtTime(now.Add(window), ds.day),
		Window: window, Drip: window - c.cfg.SkewBound, CatchUpPermille: c.catchUpPermille(now, ds),
		Bid: c.unit(), Largest: c.largestSpend(),
		DemandRate: rate, DemandCalls: calls, Share: c.share, OpenDrip: ds.openDrip(now, t.ending), EndingDrip: ds.endingDrip(now, t), Burst: c.cfg.BurstWindow,
	})
	ds.plan, ds.startLeft = d, d.StartCredit
	ds.fleetRate, ds.fleetPace, ds.fleetBehind, ds.fleetCatching = 0, 0, false, false
	if cNow < bucket.PPB {
		ds.fleetRate = float64(d.FleetWindow) / window.Seconds()
		ds.fleetPace = float64(d.FleetPace) / window.Seconds()
		ds.fleetBehind, ds.fleetCatching = d.Behind, d.Catching
	}
	return d
}
