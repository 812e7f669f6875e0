package daemon

import (
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// The hot path: SPEND, REFUND and BALANCE answer from the campaign's local
// bucket without a ledger call; they read settings and the day through atomic
// pointers and never take loopMu, so they never wait for the refill loop.

// campaign is one campaign's local state. The hot path reads settings and day
// through atomic pointers; everything else belongs to the refill loop (step),
// serialised by loopMu.
type campaign struct {
	// d is the daemon's shared services (metrics, the journal, broadcasts,
	// the auction table); what the campaign only reads is passed in here.
	d      *Daemon
	cfg    *Config       // the daemon's, with defaults applied; never changed
	ledger *lease.Ledger // the daemon's
	id     string
	log    *zap.Logger

	settings atomic.Pointer[settings]
	day      atomic.Pointer[dayState]

	// SPEND answers. Allowed ones and the demand (micros asked) are counted
	// by the day's bucket under the lock a SPEND takes anyway; these add the
	// days already dropped. Denials are counted here.
	allowsBase     atomic.Int64
	allowsReported atomic.Int64 // what metrics last reported: counters never go back
	paced          atomic.Int64
	exhausted      atomic.Int64
	maxAmount      atomic.Int64 // largest SPEND in the current window: the bucket must hold at least a few
	// The largest SPEND of the window before (refill loop only): one huge
	// SPEND sizes leases and the bucket for two windows, then is forgotten.
	prevMaxAmount int64
	maxSince      time.Time
	// The largest SPEND of each of the last few windows that had any
	// (refill loop only): a sparse campaign's bid size outlives the windows
	// without SPENDs, and sizes its standing lease and the ledger's one-bid
	// advance. Several windows, because one SPEND is a poor guess of the
	// next: a standing lease of one bid too small denies it.
	unitHistory [unitWindows]int64
	unitNext    int
	// How many SPENDs each of those windows had, and the current one so
	// far (refill loop only): a bid below the fleet's is reported only as
	// the largest of enough of them (pace.ReportsBid).
	unitSpends   [unitWindows]int64
	windowSpends int64
	// The fleet's bid size for the campaign, as the ledger had it when this
	// host last opened one of its days (refill loop only): a host's first
	// SPENDs of a sparse campaign are too few to size a bid from.
	fleetUnit int64
	// The mean SPEND asked on this host, over its last meanSpendWindow
	// SPENDs (refill loop only), and how many it is taken over.
	meanSpend  float64
	meanSpends int64
	// The fleet's latest SPENDs and their micros asked, as this host's last
	// demand flush counted them, and the day they are of (refill loop
	// only): the mean SPEND that sizes the ledger's advance (advanceMean).
	fleetSpends, fleetMicros int64
	fleetDay                 string
	minAmount                atomic.Int64 // smallest SPEND seen (0: none yet)
	requestedBase            int64        // refill loop only: demand of the days already dropped

	salt           auctionKey   // makes this campaign's auction ids its own in the daemon's memory
	replayedAllows atomic.Int64 // retries answered "allowed" from memory, without a charge
	refundMu       sync.Mutex

	// A broadcast asked to re-read the settings (recheck), and, for a
	// revoke, to give back what is held if the ledger confirms a pause or a
	// cut (cutCheck). Neither changes an answer by itself: the ledger does.
	recheck          atomic.Bool
	cutCheck         atomic.Bool
	lastEventRefresh time.Time // refill loop only: the last read an event triggered
	// eventVersion is the newest settings version an operator's event
	// named; newVersion, that one arrived since the last read. An event
	// naming a version newer than any seen is read at the next tick,
	// whatever the rate limit: a pause and a resume back to back each
	// reach the fleet within a tick. One naming none, or an old one, waits
	// for the limit (a flood of them costs a read per EventRecheck).
	eventVersion atomic.Int64
	newVersion   atomic.Bool

	// Scheduling (see Daemon.Step): the refill loop steps a campaign when
	// it was used since its last step (active: a SPEND, REFUND or BALANCE),
	// when something asked it to (wake: a broadcast, a settings change), or
	// at nextStep: the earliest time something falls due (a lease ends, the
	// next lease is due, the day ends), at most idleStep after its last step.
	active   atomic.Bool
	wake     atomic.Bool
	stale    atomic.Bool  // the change stream named it: re-read its settings
	nextStep atomic.Int64 // unix nanoseconds
	retired  atomic.Bool  // dropped from the daemon for idleness (refill loop sets it)
	// sparseNow: the refill loop found the campaign sparse on this host at
	// its last step, from SPENDs it saw or from a lease window loaded here
	// without one; its SPENDs that find the bucket short fetch a lease
	// (fetchFor) when SparseWait is on. Not before its demand is measured:
	// a busy campaign's first SPENDs on a fresh daemon fetching one lease
	// after another left its regular leasing behind
	// (TestSaturatedSpendIsSmoothPer10Seconds: a window at 0.30x the pace).
	sparseNow atomic.Bool

	loopMu        sync.Mutex
	loadedAt      time.Time // when it was loaded here
	lastActive    time.Time // the step that last found it active (or its load)
	lastLook      time.Time // when shardEmpty was last cleared
	lastRefresh   time.Time
	lastTick      time.Time
	lastRequested int64
	lastDemandAt  time.Time
	rate          float64 // EWMA of demand, micros per second
	rateWeight    float64 // the EWMAs' weight so far: 1 - exp(-t/tau)
	callRate      float64 // EWMA of SPENDs per second
	lastCalls     int64
	// demandTicks are the last refill ticks that saw a SPEND here (a ring,
	// demandTickN of them so far): a sparse host's rate, which the
	// 10-second EWMAs forget between SPENDs that come hours apart.
	demandTicks [sparseSpends]time.Time
	demandTickN int
	// recent is the demand counters at the last refill ticks (a ring,
	// recentN so far): a jump in demand (followJump).
	recent  [rampSamples]demandSample
	recentN int
	jumpAt  time.Time // when followJump last restarted the EWMAs
	// share: this host's share of the fleet's demand for the campaign (0:
	// not known yet), from the demand flushes; it caps leases when the
	// campaign is supply-constrained, so hosts get budget in proportion to
	// their demand rather than to how often they ask.
	share float64
	// shareDay and shareFlushes: the day of this host's demand flushes
	// and those of them still in the ring of recent minutes, oldest first;
	// shareJudged: share comes from spans of them (updateShare).
	shareDay     string
	shareFlushes []shareFlush
	shareJudged  bool
	standDay     string // the demand slot the stand-in share counts in
	standSlot    int
	standAsked   int64 // this host's micros asked in that slot

	flushed    bucket.Stats // demand counts at the last flush to the ledger
	bidSent    int64        // the bid size the last flush that carried one sent
	bidSentDay string       // the day it was sent for
	// flushBase: when the last demand flush was due; flushRetry, when one
	// that failed is tried again (zero: none failed); flushPhase, this
	// host's second of the minute to flush the campaign's demand at
	// (nextFlush).
	flushBase, flushRetry time.Time
	flushPhase            time.Duration
	pending               []release
	unanswered            []ask // grant calls whose answers were lost (asks.go)
	seenDays              map[string]bool
}

// settings is one version of the campaign as the ledger holds it, with its
// location and curve resolved; replaced whole, never mutated, so the hot path
// reads it through an atomic pointer.
type settings struct {
	lease.Campaign
	loc   *time.Location
	curve *bucket.Curve
}

// newCampaign returns the local state of a campaign just loaded; its day
// opens on the refill loop's first step.
func newCampaign(d *Daemon, c lease.Campaign) *campaign {
	cp := &campaign{d: d, cfg: &d.cfg, ledger: d.ledger, id: c.ID, log: d.log.With(zap.String("campaign", c.ID)), seenDays: map[string]bool{}}
	cp.settings.Store(d.settingsOf(c))
	now := d.cfg.Clock.Now()
	// The full re-read that backs up the change stream is spread over
	// CampaignReread by id, so campaigns loaded together do not all read
	// again in the same tick.
	cp.lastRefresh = now.Add(-time.Duration(hash(c.ID) % uint64(d.cfg.CampaignReread/10+1)))
	cp.lastActive, cp.lastLook, cp.loadedAt = now, now, now
	cp.flushPhase = flushPhase(d.cfg.Holder, c.ID)
	cp.salt = newSalt()
	return cp
}

// settingsOf resolves a campaign's curve by name; an unknown name paces flat
// rather than refusing the campaign: a bad name costs pacing shape, not spend.
func (d *Daemon) settingsOf(c lease.Campaign) *settings {
	curve, ok := d.cfg.Curves[c.Curve]
	if c.Curve == AutoCurve {
		// Each day's curve is fitted when the day opens (autoCurve); flat
		// until then.
		curve, ok = d.cfg.Curves["flat"], true
	}
	if !ok {
		d.log.Warn("campaign names an unknown curve; pacing it flat", zap.String("campaign", c.ID), zap.String("curve", c.Curve))
		curve = d.cfg.Curves["flat"]
	}
	return &settings{Campaign: c, loc: c.Location(), curve: curve}
}

// touch marks the campaign used since the refill loop's last step (a load
// and, after the first use in a tick, no write: the hot path stays shared).
func (c *campaign) touch() {
	if !c.active.Load() {
		c.active.Store(true)
	}
}

func (c *campaign) spend(now time.Time, amount int64, auctionID string) pacer.Decision {
	c.touch()
	if amount > c.maxAmount.Load() {
		c.maxAmount.Store(amount) // a lost race only delays the capacity bump by a tick
	}
	if m := c.minAmount.Load(); amount < m || m == 0 {
		c.minAmount.Store(amount) // likewise: a lost race delays the next look at the ledger
	}
	if auctionID == "" {
		dec, _ := c.decide(now, amount)
		return dec
	}
	return c.d.auctions.spend(c, now, amount, auctionID)
}

// countDenial counts a SPEND the bucket did not allow (allowed ones are
// counted by the bucket).
func (c *campaign) countDenial(dec pacer.Decision) {
	switch dec {
	case pacer.Paced:
		c.paced.Add(1)
	case pacer.Exhausted:
		c.exhausted.Add(1)
	}
}

// allows returns how many SPENDs the campaign allowed, over all its days.
func (c *campaign) allows(now time.Time) int64 {
	n := c.allowsBase.Load() + c.replayedAllows.Load()
	if ds := c.day.Load(); ds != nil {
		n += ds.b.Stats(now).Allows
	}
	// A day being dropped can be seen twice or not at all for an instant:
	// report a counter that never goes back.
	for {
		prev := c.allowsReported.Load()
		if n <= prev {
			return prev
		}
		if c.allowsReported.CompareAndSwap(prev, n) {
			return n
		}
	}
}

// decide answers a SPEND from the bucket, and returns the campaign-day that
// answered (nil if none).
func (c *campaign) decide(now time.Time, amount int64) (pacer.Decision, *dayState) {
	if c.settings.Load().State == lease.StatePaused {
		return pacer.Exhausted, nil
	}
	ds := c.day.Load()
	if ds == nil || now.Before(ds.day.Start) || !now.Before(ds.day.End) {
		return pacer.Paced, nil // the refill loop opens the day on its next tick
	}
	if ds.refused.Load() {
		return pacer.Exhausted, ds
	}
	if ds.b.Spend(now, amount) {
		return pacer.Allowed, ds
	}
	if ds.exhausted.Load() {
		return pacer.Exhausted, ds
	}
	return pacer.Paced, ds
}

func (c *campaign) refund(now time.Time, amount int64, auctionID string) (int64, error) {
	c.touch()
	c.refundMu.Lock()
	defer c.refundMu.Unlock()
	ds := c.day.Load()
	if ds == nil {
		return 0, fmt.Errorf("refund of %d micros for campaign %q: nothing was allowed today", amount, c.id)
	}
	st := ds.b.Stats(now)
	net := st.Spent - st.Refunded
	// With an id, the refund belongs to the campaign-day its auction was
	// allowed on: only that day's bucket may take it back. Checked first, so
	// a refund across midnight gets the error that says why.
	if auctionID != "" {
		if err := c.d.auctions.refund(c, now, auctionID, amount, ds, net); err != nil {
			return 0, fmt.Errorf("refund for campaign %q: %w", c.id, err)
		}
		return ds.b.Refund(now, amount), nil
	}
	// Without one, it can only be trusted as far as what this daemon allowed
	// on the day it is spending from: never more than that.
	if amount > net {
		return 0, fmt.Errorf("refund of %d micros exceeds the %d micros this daemon allowed for campaign %q today (net of refunds)", amount, net, c.id)
	}
	// Early in a day, an id-less refund may be for an auction of the day
	// before (refunds follow their auction by up to the dedup window):
	// crediting it to today would let today spend yesterday's money again.
	// It is accepted, and credited to no bucket (counted as unbacked).
	if now.Sub(ds.day.Start) < c.cfg.DedupWindow {
		return 0, nil
	}
	return ds.b.Refund(now, amount), nil
}

func (c *campaign) balance(now time.Time) pacer.Balance {
	c.touch()
	ds := c.day.Load()
	if ds == nil {
		return pacer.Balance{State: c.state(nil)}
	}
	st := ds.b.Stats(now)
	return pacer.Balance{Tokens: st.Tokens, Reserve: st.Reserve, PacePerSecond: st.DripPerSecond, State: c.state(ds)}
}

func (c *campaign) state(ds *dayState) string {
	switch {
	case c.settings.Load().State == lease.StatePaused:
		return "paused"
	case ds == nil:
		return "opening"
	case ds.refused.Load():
		return "refused"
	case ds.exhausted.Load():
		return "exhausted"
	}
	return "active"
}

// leaseCount is the number of leases held for the current day (for status
// and tests); it takes loopMu, so never call it from the hot path.
func (c *campaign) leaseCount() int {
	c.loopMu.Lock()
	defer c.loopMu.Unlock()
	if ds := c.day.Load(); ds != nil {
		return len(ds.leases)
	}
	return 0
}

// hash spreads per-campaign and per-host work (re-read offsets, shard
// choice seeds) deterministically, so a test run is repeatable.
func hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
