package reconcile

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// The full pass. A new leader knows nothing of what its predecessor left
// half done (a move between shards, a budget change, a day to close), so
// its term begins with a full look at every campaign (campaign). At 100,000
// campaigns that is minutes of work, longer than a loaded host may keep an
// etcd session: a pass that started again from the first campaign after
// every lost term might never finish. So the pass goes through the
// campaigns in id order, passChunk at a time, and records after each chunk
// how far it got (lease.PassCursor, in Redis, fenced: a deposed leader
// cannot move it); the next leader goes on from there, and only a pass that
// reached the end makes the next one start again from the first id. Under
// Run it runs beside the steps, which keep settling, rebalancing and
// opening days from the indexes meanwhile; the slow sweep waits for it.

// errGateClosed stops a full pass while Config.Gate refuses (it logged why).
var errGateClosed = errors.New("reconciler: the ledger gate is closed")

// passChunk is how many campaigns the full pass looks at between two
// records of its cursor.
const passChunk = 1024

// load reads every campaign into the term (and the change stream's
// position, first, so that no change is missed), unless the term has them
// already and force is false.
func (r *Reconciler) load(ctx context.Context, force bool) error {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.mu.Lock()
	loaded := r.term.loaded
	r.mu.Unlock()
	if loaded && !force {
		return nil
	}
	_, pos, _, err := r.ledger.CampaignChanges(ctx, "", 0)
	if err != nil {
		return err
	}
	campaigns, err := r.ledger.ListCampaigns(ctx)
	if err != nil {
		return err
	}
	ids := make([]string, len(campaigns))
	byID := make(map[string]lease.Campaign, len(campaigns))
	for i, c := range campaigns {
		ids[i] = c.ID
		byID[c.ID] = c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cursor := r.term.roster.cursor
	r.term.campaigns, r.term.roster, r.term.calm = byID, newRoster(ids), map[string]int64{}
	r.term.roster.cursor = cursor % max(len(ids), 1)
	r.term.changes, r.term.loaded = pos, true
	return nil
}

// passLoop runs the term's full pass beside Run's steps until it is done,
// retrying after a failure, and marks the term's pass done. A newer
// leader's fence ends the term (stop).
func (r *Reconciler) passLoop(ctx context.Context, fence int64, stop func()) {
	defer func() {
		r.mu.Lock()
		r.term.passing = false
		r.mu.Unlock()
	}()
	for ctx.Err() == nil {
		err := r.checkWatermarks(ctx, fence)
		if err == nil {
			err = r.load(ctx, false)
		}
		if err == nil {
			err = r.fullPass(ctx, fence, true)
		}
		switch {
		case errors.Is(err, lease.ErrFenced):
			r.log.Warn("fenced off by a newer leader during the full pass; stepping down", zap.Error(err))
			stop()
			return
		case err == nil && r.passDone():
			return
		case err != nil && ctx.Err() == nil:
			r.log.Warn("full reconciler pass failed; retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(r.cfg.Interval):
		}
	}
}

func (r *Reconciler) passDone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.term.full
}

// passIDs returns the term's campaign ids, sorted: the full pass's order.
func (r *Reconciler) passIDs() []string {
	r.mu.Lock()
	ids := make([]string, 0, r.term.roster.len())
	r.term.roster.all(func(id string) bool { ids = append(ids, id); return true })
	r.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// fullPass gives every campaign of the term its full look, in id order,
// from the first or (resume) from the recorded cursor, recording the cursor
// after each chunk. A campaign that fails is logged, counted and left for
// the next pass; only a fence or the end of ctx stop the pass. The term's
// pass is done once one reached the last campaign with the gate open.
func (r *Reconciler) fullPass(ctx context.Context, fence int64, resume bool) error {
	var cmds atomic.Int64
	ctx = lease.WithCommandCount(ctx, &cmds)
	start := time.Now()
	ids := r.passIDs()
	cur := lease.PassCursor{Started: r.cfg.Clock.Now(), Campaigns: len(ids), Fence: fence}
	if resume {
		if last, ok, err := r.ledger.LoadPassCursor(ctx); err != nil {
			r.stats.errors.Inc()
			return err
		} else if ok && !last.Done {
			cur.After, cur.Started = last.After, last.Started
			r.log.Info("resuming the full reconciler pass", zap.String("after", last.After),
				zap.Time("started", last.Started), zap.Int64("previous_fence", last.Fence))
		}
	}
	i, _ := slices.BinarySearch(ids, cur.After)
	if i < len(ids) && cur.After != "" && ids[i] == cur.After {
		i++
	}
	looked := len(ids) - i
	pe := &passErrs{r: r, ctx: ctx}
	for first := true; first || i < len(ids); first = false {
		if !r.gateOpen(ctx) {
			pe.keep(errGateClosed)
			break
		}
		chunk := ids[i:min(i+passChunk, len(ids))]
		err := r.campaigns(ctx, r.termCampaigns(chunk), fence)
		if pe.keep(cmp.Or(err, ctx.Err())) {
			break // the chunk may be unfinished: the cursor stays before it
		}
		i += len(chunk)
		cur.Done = i >= len(ids)
		if len(chunk) > 0 {
			cur.After = chunk[len(chunk)-1]
		}
		r.stats.passProgress.Set(float64(i) / float64(max(len(ids), 1)))
		if pe.keepOne(r.ledger.SavePassCursor(ctx, cur)) || cur.Done {
			break
		}
	}
	if cur.Done && ctx.Err() == nil && !errors.Is(pe.err(), lease.ErrFenced) {
		r.mu.Lock()
		r.term.full = true
		r.mu.Unlock()
		r.stats.fullPasses.Inc()
	}
	r.stats.observe(passFull, start, cmds.Load(), looked, len(ids))
	return pe.err()
}

// termCampaigns returns the term's campaigns of ids (one removed since the
// pass began is left out).
func (r *Reconciler) termCampaigns(ids []string) []lease.Campaign {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs := make([]lease.Campaign, 0, len(ids))
	for _, id := range ids {
		if c, ok := r.term.campaigns[id]; ok {
			cs = append(cs, c)
		}
	}
	return cs
}

// failures is how many failures err joins (one if it joins none).
func failures(err error) int {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return max(len(j.Unwrap()), 1)
	}
	return 1
}

// indexPlan is what a step reads of a Redis Cluster's indexes: the slots
// whose due and low index keys it reads (nil: every slot), the anchors that
// listed them, and the slots it reanchors after its work.
type indexPlan struct {
	read     []int
	listed   map[int][]string
	reanchor []int
}

// planIndex decides a step's index reads (lease/index.go, "Anchors"). On a
// single server there is one index key of each kind: nothing to plan. On a
// Cluster a step reads the slots the 64 anchors say need it by now, and
// reanchors those and a rotating slice of all slots, so that every slot is
// looked at once per SweepPeriod (all of them in a term's first step): an
// entry no anchor records is found there. While one was found in the last
// SweepPeriod (a daemon of the previous release writes entries without
// anchors), a step reads every slot's index keys as that release did. So
// the index reads cost 64 commands, one a rotating slot and two a slot
// with work, not 2 × 16,384.
func (r *Reconciler) planIndex(ctx context.Context, now time.Time) (indexPlan, error) {
	if !r.ledger.IsCluster() {
		return indexPlan{}, nil
	}
	listed, err := r.ledger.AnchoredSlots(ctx, now.Add(-r.cfg.Grace))
	if err != nil {
		return indexPlan{}, err
	}
	set := maps.Clone(listed)
	plan := indexPlan{read: slices.AppendSeq(make([]int, 0, len(listed)), maps.Keys(listed)), listed: listed}
	slices.Sort(plan.read) // never nil: nil reads every slot
	r.mu.Lock()
	defer r.mu.Unlock()
	k := int((int64(lease.Slots)*int64(r.cfg.Interval) + int64(r.cfg.SweepPeriod) - 1) / int64(r.cfg.SweepPeriod))
	if !r.term.anchored {
		k = lease.Slots
	}
	for range min(k, lease.Slots) {
		set[r.term.slot] = nil
		r.term.slot = (r.term.slot + 1) % lease.Slots
	}
	if now.UnixMilli() < r.term.readAll {
		plan.read = nil
	}
	plan.reanchor = slices.Sorted(maps.Keys(set))
	return plan, nil
}

// reanchor reanchors the plan's slots and those where the step found due
// entries, once the step has dealt with them. An entry no anchor recorded
// makes the steps of the next SweepPeriod read every slot.
func (r *Reconciler) reanchor(ctx context.Context, plan indexPlan, due []lease.IndexEntry, now time.Time) error {
	if plan.reanchor == nil {
		return nil
	}
	slots := plan.reanchor
	if plan.read == nil {
		set := map[int]bool{}
		for _, s := range slots {
			set[s] = true
		}
		for _, e := range due {
			set[lease.Slot(e.Shard.String())] = true
		}
		slots = slices.Sorted(maps.Keys(set))
	}
	found, err := r.ledger.Reanchor(ctx, slots, plan.listed)
	if err != nil {
		return err
	}
	var unrecorded []int
	for _, a := range found {
		if _, listed := plan.listed[a.Slot]; a.Unrecorded && !(listed && a.Local) {
			unrecorded = append(unrecorded, a.Slot)
		}
	}
	r.mu.Lock()
	r.term.anchored = true
	if len(unrecorded) > 0 {
		r.term.readAll = now.Add(r.cfg.SweepPeriod).UnixMilli()
	}
	r.mu.Unlock()
	if len(unrecorded) > 0 {
		r.log.Warn("index entries no anchor recorded (a daemon of the previous release, or a master serving no anchor): every slot's index is read each step for a sweep period",
			zap.Int("slots", len(unrecorded)), zap.Int("first_slot", unrecorded[0]), zap.Duration("sweep_period", r.cfg.SweepPeriod))
	}
	return nil
}
