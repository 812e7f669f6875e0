package daemon

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// runTotals is this daemon run's totals on each shard-day it leased from:
// micros the shard granted it and micros it gave back unused, as the shard
// acknowledged them (lease.History's Granted and Returned). Every grant,
// renewal and release passes them back, so a shard that lost our writes
// tells us however long ago they were; after a loss we re-assert them, and
// the shard counts what our clients spent from leases it forgot we had.
//
// They outlive the campaign's state in memory (a campaign idle for
// CampaignIdle is dropped, its day's leases long given back): a restore
// found later by the reconciler's watermark, broadcast as lost-writes for a
// day no campaign here has loaded, is answered from here. Days before
// yesterday are forgotten. Safe for concurrent use.
type runTotals struct {
	mu      sync.Mutex
	byShard map[lease.ShardKey]lease.History
	// inherited: the totals of the runs before this one on this host, as
	// their journal kept them (Reclaim): re-asserted after a loss too, so a
	// restore after a restart still counts what their clients spent.
	inherited map[string]map[lease.ShardKey]lease.History
	// asked: campaign-days whose totals a lost-writes broadcast asked us
	// to re-assert while no campaign here held the day (Step does it).
	asked map[lease.ShardKey]bool // Shard -1: the whole day
	// unchecked: the shard-days whose totals changed (or were inherited)
	// and that the idle check has not called since (idlecheck.go).
	unchecked map[lease.ShardKey]*idleCheck
	// seen: each shard's history (Seq, Tip) as the start's re-assertion of
	// the inherited totals last found it (reassertPrevious), until the
	// day's first load here takes it as its known history (takeSeen).
	seen map[lease.ShardKey]lease.History
	now  func() time.Time
}

func newRunTotals(now func() time.Time) *runTotals {
	return &runTotals{byShard: map[lease.ShardKey]lease.History{}, asked: map[lease.ShardKey]bool{},
		inherited: map[string]map[lease.ShardKey]lease.History{}, unchecked: map[lease.ShardKey]*idleCheck{},
		seen: map[lease.ShardKey]lease.History{}, now: now}
}

// saw keeps h, a reply's history of shard k at start, unless a later one
// (a higher seq) is kept already.
func (t *runTotals) saw(k lease.ShardKey, h lease.History) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h.Seq > t.seen[k].Seq {
		t.seen[k] = lease.History{Seq: h.Seq, Tip: h.Tip}
	}
}

// takeSeen returns the history kept of shard k at start (zero if none) and
// forgets it: a day loaded again later starts with no known history, as
// before, rather than one a handled loss has since made stale.
func (t *runTotals) takeSeen(k lease.ShardKey) lease.History {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.seen[k]
	delete(t.seen, k)
	return h
}

// inherit keeps a previous run's totals on shard k.
func (t *runTotals) inherit(run string, k lease.ShardKey, h lease.History) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inherited[run] == nil {
		t.inherited[run] = map[lease.ShardKey]lease.History{}
	}
	t.inherited[run][k] = h
	t.wroteLocked(k)
}

// inheritedDay returns the previous runs' totals on a campaign-day's
// shards, by run and shard.
func (t *runTotals) inheritedDay(campaign, day string) map[string]map[lease.ShardKey]lease.History {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]map[lease.ShardKey]lease.History{}
	for run, shards := range t.inherited {
		for k, h := range shards {
			if k.Campaign == campaign && k.Day == day && h.Granted > 0 {
				if out[run] == nil {
					out[run] = map[lease.ShardKey]lease.History{}
				}
				out[run][k] = h
			}
		}
	}
	return out
}

// has reports whether this run or a previous one leased from the day.
func (t *runTotals) has(campaign, day string) bool {
	return len(t.day(campaign, day)) > 0 || len(t.inheritedDay(campaign, day)) > 0
}

// of returns the totals on shard k.
func (t *runTotals) of(k lease.ShardKey) lease.History {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byShard[k]
}

// add counts micros granted to us by shard k and given back to it.
func (t *runTotals) add(k lease.ShardKey, granted, returned int64) {
	if granted == 0 && returned == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.byShard[k]
	h.Granted += granted
	h.Returned += returned
	t.byShard[k] = h
	t.wroteLocked(k)
}

// day returns the totals of a campaign-day's shards, by shard.
func (t *runTotals) day(campaign, day string) map[lease.ShardKey]lease.History {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[lease.ShardKey]lease.History{}
	for k, h := range t.byShard {
		if k.Campaign == campaign && k.Day == day && h.Granted > 0 {
			out[k] = h
		}
	}
	return out
}

// ask queues a campaign-day's totals to be re-asserted by the next Step.
func (t *runTotals) ask(campaign, day string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.asked[lease.ShardKey{Campaign: campaign, Day: day, Shard: -1}] = true
}

// takeAsked returns the queued campaign-days and clears the queue.
func (t *runTotals) takeAsked() []lease.ShardKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]lease.ShardKey, 0, len(t.asked))
	for k := range t.asked {
		out = append(out, k)
	}
	clear(t.asked)
	slices.SortFunc(out, func(a, b lease.ShardKey) int {
		if a.Campaign != b.Campaign {
			return compareStrings(a.Campaign, b.Campaign)
		}
		return compareStrings(a.Day, b.Day)
	})
	return out
}

// forgetBefore drops the totals of days before day (a "2006-01-02" key).
func (t *runTotals) forgetBefore(day string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.byShard {
		if k.Day < day {
			delete(t.byShard, k)
		}
	}
	for run, shards := range t.inherited {
		for k := range shards {
			if k.Day < day {
				delete(shards, k)
			}
		}
		if len(shards) == 0 {
			delete(t.inherited, run)
		}
	}
	for k := range t.unchecked {
		if k.Day < day {
			delete(t.unchecked, k)
		}
	}
	for k := range t.seen {
		if k.Day < day {
			delete(t.seen, k)
		}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// reassertRun re-asserts our run's totals on the shards of one campaign-day
// (after the leases we hold there): what our clients spent from leases a
// shard forgot is counted spent there. It reports whether every shard
// answered.
func (d *Daemon) reassertRun(ctx context.Context, now time.Time, campaign, day string, log *zap.Logger) bool {
	runs := d.ran.inheritedDay(campaign, day)
	runs[d.cfg.Holder+"-"+d.bootID] = d.ran.day(campaign, day)
	ok := true
	for run, shards := range runs {
		for k, tot := range shards {
			cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
			added, _, err := d.ledger.ReassertRun(cctx, k, run, tot, now)
			cancel()
			switch {
			case err != nil:
				log.Warn("cannot re-assert a run's totals; retrying", zap.String("run", run), zap.Stringer("shard", k), zap.Error(err))
				ok = false
			case added > 0:
				d.ran.touch(k) // a write of ours: a restore could take it away too (idlecheck.go)
				log.Warn("re-asserted what a run's clients spent from leases the ledger forgot", zap.String("run", run), zap.Stringer("shard", k),
					zap.Int64("granted", tot.Granted), zap.Int64("returned", tot.Returned), zap.Int64("spent_added", added))
			}
		}
	}
	return ok
}

// reassertAsked re-asserts the totals of the campaign-days a lost-writes
// broadcast named while no campaign here held them; those that fail are
// asked again next Step.
func (d *Daemon) reassertAsked(ctx context.Context, now time.Time) {
	for _, k := range d.ran.takeAsked() {
		if !d.reassertRun(ctx, now, k.Campaign, k.Day, d.log) {
			d.ran.ask(k.Campaign, k.Day)
		}
	}
}
