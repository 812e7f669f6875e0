package daemon

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// The refill loop's schedule. Daemon.Step looks at every campaign, a few
// atomic loads each, and steps only those that are due: used since their
// last step, woken (a broadcast, a settings change), or at the time their
// last step said something falls due (a lease ends, the next lease is due,
// a parked release must go (park.go), the day ends, demand is to be
// flushed), and at least every idleStep. A
// busy campaign is stepped every tick as before; an idle one about once a
// second, and not at all once CampaignIdle has dropped it. The due ones run
// on at most refillWorkers goroutines per Step, not one per campaign.

// idleStep is the longest a loaded campaign goes without a step.
const idleStep = time.Second

// refillWorkers bounds the campaigns stepped at once. A campaign waits on the
// ledger for at most LedgerTimeout per call, so a ledger shard that hangs
// delays the others by at most its campaigns / refillWorkers timeouts.
func refillWorkers() int { return max(32, 8*runtime.GOMAXPROCS(0)) }

// due reports whether the campaign's step is due at now.
func (c *campaign) due(now time.Time) bool {
	return c.active.Load() || c.wake.Load() || now.UnixNano() >= c.nextStep.Load()
}

// schedule sets when the campaign must be stepped next if it is neither used
// nor woken before (refill loop, at the end of a step).
func (c *campaign) schedule(now time.Time) {
	cfg := c.cfg
	next := now.Add(idleStep)
	soon := func(t time.Time) {
		if t.Before(next) {
			next = t
		}
	}
	// later: a time still to come (one gone by was acted on, or had nothing
	// to do: a campaign without demand asks for no lease).
	later := func(t time.Time) {
		if t.After(now) {
			soon(t)
		}
	}
	if c.recheck.Load() || c.stale.Load() || len(c.pending) > 0 {
		soon(now) // each is rate-limited where it acts
	}
	later(c.nextFlush(demandFlush))
	later(c.maxSince.Add(largestSpendWindow))
	ds := c.day.Load()
	switch {
	case ds == nil:
		if c.settings.Load().State != lease.StatePaused {
			soon(now) // a day to open (the open is retried every tick, as before)
		}
	default:
		if ds.reassert.Load() || ds.reassertHint.Load() || ds.confirm.Load() {
			soon(now)
		}
		later(ds.day.End)
		later(ds.nextGrantAt)
		later(ds.lastGrantAt.Add(cfg.LeaseWindow / 4))
		later(ds.lastGrantAt.Add(cfg.LeaseWindow / 2))
		for _, h := range ds.leases {
			later(h.end)
		}
		for _, p := range ds.parked {
			if p.renewal != nil {
				later(p.deadline)
			}
		}
	}
	c.nextStep.Store(next.UnixNano())
}

// idle reports whether the campaign has gone unused for CampaignIdle (refill
// loop).
func (c *campaign) idle(now time.Time) bool {
	// A standing lease held longer than StandingIdle (standingIdle) keeps
	// the campaign as much longer.
	return c.cfg.CampaignIdle > 0 && now.Sub(c.lastActive) >= c.cfg.CampaignIdle+max(c.standingIdle()-c.cfg.StandingIdle, 0)
}

// retire drops an idle campaign: its day's demand is flushed and its leases
// released, and once the ledger has acknowledged every release, the daemon
// forgets it. Its next SPEND loads it again, as a first use does (refill
// loop).
func (c *campaign) retire(ctx context.Context, now time.Time) {
	if ds := c.day.Load(); ds != nil {
		c.dropDay(ctx, now, ds)
		c.day.Store(nil)
	}
	c.retryReleases(ctx, now)
	if len(c.pending) > 0 {
		return // next step tries again; a SPEND meanwhile makes it busy again
	}
	c.d.retire(c, now)
}

// retire queues c to be removed from the daemon at the end of the Step.
func (d *Daemon) retire(c *campaign, now time.Time) {
	d.retiredMu.Lock()
	defer d.retiredMu.Unlock()
	d.retiring = append(d.retiring, c)
}

// removeRetired removes the campaigns queued by retire, all in one copy of
// the set, keeping their SPEND counts in the daemon's totals (counters never
// go back).
func (d *Daemon) removeRetired(now time.Time) {
	d.retiredMu.Lock()
	defer d.retiredMu.Unlock()
	if len(d.retiring) == 0 {
		return
	}
	for _, c := range d.campaigns.removeAll(d.retiring) {
		c.retired.Store(true)
		d.retiredCounts.allowed += c.allows(now)
		d.retiredCounts.paced += c.paced.Load()
		d.retiredCounts.exhausted += c.exhausted.Load()
		d.counters.campaignsDropped.Add(1)
		c.log.Info("campaign unused; dropped from memory until its next use", zap.Duration("idle", now.Sub(c.lastActive)))
	}
	clear(d.retiring)
	d.retiring = d.retiring[:0]
}

// runDue steps the campaigns due at now, at most refillWorkers at a time,
// and returns when all are done.
func (d *Daemon) runDue(ctx context.Context, now time.Time) {
	due := d.dueBuf[:0]
	d.campaigns.each(func(c *campaign) {
		if c.due(now) {
			due = append(due, c)
		}
	})
	d.dueBuf = due
	d.stepAll(ctx, now, due)
	clear(due) // no campaign kept alive by the buffer
}

// stepAll steps the campaigns at now on at most refillWorkers goroutines.
func (d *Daemon) stepAll(ctx context.Context, now time.Time, cs []*campaign) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	work := func() {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(cs) {
				return
			}
			cs[i].step(ctx, now)
		}
	}
	// The caller is one of the workers: a Step with one campaign due (most
	// ticks of a daemon with few busy campaigns) starts no goroutine.
	for range min(len(cs), refillWorkers()) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// changeFollower follows the ledger's stream of campaign changes for the
// daemon: one read per CampaignRefresh, however many campaigns are loaded,
// instead of one settings read per campaign. A campaign the stream names is
// marked stale and re-reads its settings on its next step.
type changeFollower struct {
	mu   sync.Mutex
	pos  string    // the last change record seen; "" until the first read
	last time.Time // the last followChanges (Step only)
}

// startPosition reads where the change stream ends now, if no read has yet.
// It reports whether it read it now (fresh) and whether the position is
// known. Campaigns loaded before it are marked for a re-read of their
// settings: a change stored before the position was read is not in what
// followChanges reads after it.
func (d *Daemon) startPosition(ctx context.Context) (fresh, known bool) {
	f := &d.changes
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pos != "" {
		return false, true
	}
	start := time.Now()
	_, pos, _, err := d.ledger.CampaignChanges(ctx, "", 0)
	d.observeLedger("refresh", start, err)
	if err != nil {
		return false, false
	}
	f.pos = pos
	d.campaigns.each(func(c *campaign) { c.markStale() })
	return true, true
}

func (c *campaign) markStale() {
	c.stale.Store(true)
	c.wake.Store(true)
}

// followChanges reads the change records since the last read (Step calls it
// every CampaignRefresh).
func (d *Daemon) followChanges(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
	defer cancel()
	if fresh, known := d.startPosition(ctx); fresh || !known {
		return
	}
	f := &d.changes
	f.mu.Lock()
	defer f.mu.Unlock()
	const batch = 1000
	for range 100 { // 100,000 records at most per call; the rest next time
		start := time.Now()
		ids, next, gap, err := d.ledger.CampaignChanges(ctx, f.pos, batch)
		d.observeLedger("refresh", start, err)
		if err != nil {
			d.log.Warn("cannot read the campaign change stream; campaigns keep their settings until the next read", zap.Error(err))
			return
		}
		if gap {
			d.log.Warn("campaign change records were trimmed before this daemon read them; re-reading every campaign's settings")
			d.campaigns.each(func(c *campaign) { c.markStale() })
		}
		for _, id := range ids {
			if c, ok := d.campaigns.get(id); ok {
				c.markStale()
			}
		}
		f.pos = next
		if len(ids) < batch {
			return
		}
	}
}
