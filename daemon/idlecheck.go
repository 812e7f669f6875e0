package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// The idle check: a restore the watermark cannot see is still found.
//
// The reconciler's watermark finds a restore of a copy taken before its last
// advance (reconcile/watermark.go). A copy taken after that advance reads as
// current; the writes made since the copy are then found only by a daemon
// whose history saw them, at its next call to that shard, and a campaign
// gone idle on a shard makes no next call. Hence the rule:
//
// Every shard-day whose totals this run changed (a grant, renewal or
// release: runTotals.add), re-asserted with effect (a re-assertion that
// raised what the shard counts spent is a write a restore can take away
// too) or inherited from an earlier run (Reclaim) is called by this run
// once more after the watermark of the shard's Redis master has moved
// since a read made after that write, unless a later write of ours there
// started the wait again. The call re-asserts this run's totals and the
// inherited ones there (lease.Ledger.ReassertRun, which writes nothing
// where the shard is current). A restore that took those writes away came
// either before the watermark moved, and the check, made after, finds it
// and counts what our clients spent; or after, and then the restored
// watermark is behind the one recorded outside Redis and the reconciler's
// next pass finds it. Either way, while the reconciler passes, a restore
// that took away writes of a living run is found, and a daemon that dies
// before its check leaves its totals to the next run on its journal, which
// inherits them and checks them in turn. (Writes of a run gone with its
// journal are found by no one: docs/GUARANTEES.md, "Spent twice".)
//
// What it costs: nothing on a shard the run keeps calling, since every lease
// call passes the run's totals and history and the ledger compares them;
// the wait starts only once the shard has had no write of ours for a lease
// window (idleCheckQuiet). Then one read of each master's watermark per
// daemon every LeaseWindow/8 while some shard waits (not per campaign), and
// once it moves one read (HMGET) of each waiting shard's record of the runs'
// totals, then a reassert_run call only for a run the shard records less of
// than the run did (which reassert_run alone would raise).

// idleCheck is a shard-day waiting for its idle check (runTotals.unchecked).
type idleCheck struct {
	last  time.Time     // our last write there (or the inheritance)
	base  watermarkSeen // its master's watermark, read idleCheckQuiet or more after last
	based bool
}

// watermarkSeen is a master's watermark as one read found it: comparable, and
// unequal to any read of another master or of the same one after an advance
// or a restore.
type watermarkSeen struct {
	master string
	w      lease.Watermark
	ok     bool
}

// idleCheckQuiet is how long a shard has had no write of ours before it
// waits for its check: a lease window, so a shard the run keeps leasing
// from (every lease is renewed or released within its window) is never
// checked on its own.
func (d *Daemon) idleCheckQuiet() time.Duration { return d.cfg.LeaseWindow }

// wroteLocked starts shard k's wait for its idle check again. t.mu is held.
func (t *runTotals) wroteLocked(k lease.ShardKey) {
	if c := t.unchecked[k]; c != nil {
		*c = idleCheck{last: t.now()}
		return
	}
	t.unchecked[k] = &idleCheck{last: t.now()}
}

// writesBy notes that a write of ours to shard k is due by at (a parked
// release, park.go, goes by its deadline): the shard's wait for its idle
// check starts from then, not from our last write, since that call passes
// our totals and history as any lease call does. A write before at starts
// the wait again from that write.
func (t *runTotals) writesBy(k lease.ShardKey, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.unchecked[k]; c != nil && at.After(c.last) {
		*c = idleCheck{last: at}
	}
}

// quietShards returns the shards waiting for their check whose last write
// was at or before quietSince.
func (t *runTotals) quietShards(quietSince time.Time) []lease.ShardKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []lease.ShardKey
	for k, c := range t.unchecked {
		if !c.last.After(quietSince) {
			out = append(out, k)
		}
	}
	return out
}

// watermarkMoved records seen as shard k's base if it has none, and reports
// whether seen differs from the base: the watermark moved since a read made
// after our last write there. A shard written after quietSince (since
// quietShards listed it) is left waiting.
func (t *runTotals) watermarkMoved(k lease.ShardKey, seen watermarkSeen, quietSince time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.unchecked[k]
	switch {
	case c == nil || c.last.After(quietSince):
		return false
	case !c.based:
		c.base, c.based = seen, true
		return false
	}
	return c.base != seen
}

// checked ends shard k's wait, unless we wrote there after quietSince.
func (t *runTotals) checked(k lease.ShardKey, quietSince time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.unchecked[k]; c != nil && !c.last.After(quietSince) {
		delete(t.unchecked, k)
	}
}

// runsOn returns the totals on shard k of this run (named current) and of
// the runs it inherited, by run.
func (t *runTotals) runsOn(k lease.ShardKey, current string) map[string]lease.History {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]lease.History{}
	if h := t.byShard[k]; h.Granted > 0 {
		out[current] = h
	}
	for run, shards := range t.inherited {
		if h := shards[k]; h.Granted > 0 {
			out[run] = h
		}
	}
	return out
}

// checkIdleShards runs the idle check (Step calls it): at most every
// LeaseWindow/8, it reads the watermarks if a quiet shard waits, and checks
// each waiting shard whose master's watermark moved.
func (d *Daemon) checkIdleShards(ctx context.Context, now time.Time) {
	if now.Before(d.nextWatermarkRead) {
		return
	}
	d.nextWatermarkRead = now.Add(d.cfg.LeaseWindow / 8)
	quietSince := now.Add(-d.idleCheckQuiet())
	waiting := d.ran.quietShards(quietSince)
	if len(waiting) == 0 {
		return
	}
	seen, err := d.readWatermarks(ctx)
	if err != nil {
		d.log.Warn("cannot read the watermark for the idle check; retrying", zap.Error(err))
		return
	}
	for _, k := range waiting {
		if s, ok := seen(k); ok && d.ran.watermarkMoved(k, s, quietSince) {
			d.checkShard(ctx, now, k, quietSince)
		}
	}
}

// readWatermarks reads every master's watermark and returns the one of the
// master that holds a shard.
func (d *Daemon) readWatermarks(ctx context.Context) (func(lease.ShardKey) (watermarkSeen, bool), error) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
	defer cancel()
	start := time.Now()
	masters, err := d.ledger.Masters(cctx)
	seen := make([]watermarkSeen, len(masters))
	for i := 0; err == nil && i < len(masters); i++ {
		var w lease.Watermark
		var ok bool
		w, ok, err = d.ledger.ReadWatermark(cctx, masters[i])
		seen[i] = watermarkSeen{master: masters[i].Name, w: w, ok: ok}
	}
	d.observeLedger("watermark", start, err)
	if err != nil {
		return nil, err
	}
	return func(k lease.ShardKey) (watermarkSeen, bool) {
		for i, m := range masters {
			if m.Owns(k) {
				return seen[i], true
			}
		}
		return watermarkSeen{}, false
	}, nil
}

// checkShard is shard k's idle check: our run's totals and the inherited
// ones re-asserted there. One that raises what the shard counts spent found
// a loss: the shard is frozen, and the fleet (this daemon too) told to
// re-assert, as a call that finds the shard's history diverged does.
func (d *Daemon) checkShard(ctx context.Context, now time.Time, k lease.ShardKey, quietSince time.Time) {
	runs := d.ran.runsOn(k, d.cfg.Holder+"-"+d.bootID)
	// The shard's record of those runs first, in one read: a shard no
	// restore touched (nearly every one) costs no script call.
	cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
	start := time.Now()
	behind, err := d.ledger.RunsBehind(cctx, k, runs)
	cancel()
	d.observeLedger("read", start, err)
	if err != nil {
		d.log.Warn("idle check of a shard failed; retrying", zap.Stringer("shard", k), zap.Error(err))
		return // still waiting: checked at the next read
	}
	var found int64
	for _, run := range behind {
		tot := runs[run]
		cctx, cancel := context.WithTimeout(ctx, d.cfg.LedgerTimeout)
		start := time.Now()
		added, _, err := d.ledger.ReassertRun(cctx, k, run, tot, now)
		cancel()
		d.observeLedger("reassert", start, err)
		switch {
		case errors.Is(err, lease.ErrDayNotOpen): // the day's keys are gone: nothing to find
		case err != nil:
			d.log.Warn("idle check of a shard failed; retrying", zap.Stringer("shard", k), zap.Error(err))
			return // still waiting: checked at the next read
		case added > 0:
			found += added
			d.log.Error("the idle check found a shard that lost a run's writes: re-asserted what its clients spent",
				zap.String("run", run), zap.Stringer("shard", k), zap.Int64("granted", tot.Granted),
				zap.Int64("returned", tot.Returned), zap.Int64("spent_added", added))
		}
	}
	d.ran.checked(k, quietSince)
	if found == 0 {
		return
	}
	d.counters.lostWrites.Add(1)
	d.ran.touch(k) // the re-assertion is a write of ours too
	until := now.Add(d.cfg.LeaseWindow + d.cfg.Grace)
	cctx, cancel = context.WithTimeout(ctx, d.cfg.LedgerTimeout)
	_, err = d.ledger.Freeze(cctx, k, until, now, "idle check: the shard lost writes a run had acknowledged")
	cancel()
	if err != nil {
		d.log.Warn("cannot freeze the shard", zap.Stringer("shard", k), zap.Error(err))
	}
	e := pacer.Event{Kind: pacer.EventLostWrites, Campaign: k.Campaign, Day: k.Day}
	d.HandleEvent(e)
	d.publish(e)
}

// touch starts shard k's wait for its idle check again.
func (t *runTotals) touch(k lease.ShardKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wroteLocked(k)
}
