// Package reconcile is the fleet's housekeeping and the election that picks
// the one daemon to run it. The Reconciler finishes the moves and budget
// changes a dead leader left pending, settles expired leases, rebalances
// shards, opens each campaign-day at its local midnight and closes and
// reports the day before; every pass is idempotent, and each leader's writes
// carry a fencing token (Leadership.Fence) so a deposed leader's late writes
// are refused by the ledger. Every pass first compares each Redis master's
// write watermark with the copy recorded outside Redis (watermark.go) and
// freezes what a master that came back behind holds. The election is
// etcd's (EtcdElector, under ElectionPrefix), or Trivial for one host and
// for tests; Leader and Candidates read it for tools such as pacerctl
// status.
//
// It sits beside package daemon, not inside it: a daemon serves SPENDs
// whether or not it leads, and cmd/pacerd wires the two together.
package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// Publisher sends fleet broadcasts (the day's exhaustion);
// *broadcast.Broadcaster satisfies it, as it does the daemon's.
type Publisher interface {
	Publish(pacer.Event) error
}

// Clock tells the time; daemon.Clock satisfies it, so one test clock drives
// the daemons and the reconciler.
type Clock interface {
	Now() time.Time
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// Config tunes a Reconciler. Zero fields take the defaults.
type Config struct {
	Holder string
	// Interval between passes (default 1s).
	Interval time.Duration
	// Grace after a lease's expiry before it is settled (default 4s). It must
	// exceed the daemons' clock-skew bound.
	Grace time.Duration
	// PoorShare: a shard whose remaining budget is below this fraction of the
	// campaign-day's mean is refilled from the richest (default 0.75). Not
	// only nearly empty shards: a campaign behind its curve catches up at
	// the catch-up multiple of each shard's plan, so shards left unevenly
	// behind would catch up at less than the campaign's and end the day with
	// budget locked on the laggards (configs/scenarios/uneven-catch-up.yaml).
	PoorShare float64
	Publisher Publisher
	// OnLeadership, if set, is told when this reconciler starts and stops
	// leading (pacerd feeds its metrics gauge with it).
	OnLeadership func(leading bool)
	// Gate, if set, is asked before every pass: while it refuses (the
	// ledger is not durable, or this host's clock is off Redis's by more
	// than the skew bound, so it could settle live leases early) no pass
	// runs.
	Gate func(context.Context) error
	// Concurrency is how many campaigns (or shards) a pass works on at once
	// (default 16): a pass's time is bounded by round trips, not by Redis.
	Concurrency int
	// SweepPeriod is how often every campaign gets a full look, a slice of
	// them on each pass (default 5m): every shard settled and read, pending
	// moves and budget changes finished, lost shards detected. Between
	// sweeps a pass works from the ledger's indexes and does only what
	// there is to do (see Step).
	SweepPeriod time.Duration
	// Watermarks, if set, is where each Redis master's write watermark is
	// recorded outside Redis; every pass compares and advances it, and
	// freezes what a master holds when it came back behind (watermark.go).
	Watermarks WatermarkStore
	// LeaseWindow is the daemons' lease window (default 30s): a rollback's
	// freeze lasts LeaseWindow + Grace, so every lease granted before it has
	// expired or been re-asserted when grants resume.
	LeaseWindow time.Duration
	Clock       Clock
	Logger      *zap.Logger
}

// Reconciler is the fleet's housekeeper; one daemon runs it, elected. Every
// pass is idempotent and safe to re-run after a failover mid-way: it finishes
// moves a dead leader left pending, settles expired leases, rebalances shards,
// opens each campaign-day at its local midnight, detects exhaustion and writes
// each closed day's report.
type Reconciler struct {
	ledger *lease.Ledger
	cfg    Config
	log    *zap.Logger
	stats  metrics

	mu        sync.Mutex
	exhausted map[string]bool // campaign/day exhaustion already broadcast by this leader
	term      termState
	frozen    map[string]time.Time // campaign/day -> end of the freeze a rollback set (watermark.go)

	loadMu sync.Mutex // one reading of the campaigns at a time
	wmMu   sync.Mutex // one watermark check at a time (the full pass and the steps both run one)
}

// termState is what a leader learns in its term and forgets when the term
// ends: the campaigns (kept current by the ledger's change stream) and which
// of their days it knows to be open, closed or reported, so that a pass does
// not ask Redis again.
type termState struct {
	loaded    bool // the campaigns are read
	full      bool // a full pass ran to its end: the rest is known
	passing   bool // a full pass runs beside the steps (Run's)
	changes   string
	campaigns map[string]lease.Campaign
	roster    roster            // campaign ids: the sweep's order
	calm      map[string]int64  // campaign -> unix ms before which its days need nothing (its next local midnight)
	slot      int               // the next Cluster slot of the rotating slice (planIndex)
	anchored  bool              // every Cluster slot was reanchored this term
	readAll   int64             // unix ms before which a step reads every Cluster slot's index (planIndex)
	opened    map[string]string // campaign -> day known open
	shut      map[string]string // campaign -> day whose shards are closed
	reported  map[string]string // campaign -> day known reported (or never opened)
}

func newTermState() termState {
	return termState{campaigns: map[string]lease.Campaign{}, roster: newRoster(nil), calm: map[string]int64{},
		opened: map[string]string{}, shut: map[string]string{}, reported: map[string]string{}}
}

// known reads a fact of the term (m is one of its maps).
func (r *Reconciler) known(m func(*termState) map[string]string, campaign, day string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m(&r.term)[campaign] == day
}

// learn records a fact of the term.
func (r *Reconciler) learn(m func(*termState) map[string]string, campaign, day string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m(&r.term)[campaign] = day
}

func opened(t *termState) map[string]string   { return t.opened }
func shut(t *termState) map[string]string     { return t.shut }
func reported(t *termState) map[string]string { return t.reported }

// New returns a Reconciler over ledger.
func New(ledger *lease.Ledger, cfg Config) *Reconciler {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 4 * time.Second
	}
	if cfg.PoorShare <= 0 {
		cfg.PoorShare = 0.75
	}
	if cfg.Clock == nil {
		cfg.Clock = clockFunc(time.Now)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	if cfg.SweepPeriod <= 0 {
		cfg.SweepPeriod = 5 * time.Minute
	}
	if cfg.LeaseWindow <= 0 {
		cfg.LeaseWindow = 30 * time.Second
	}
	return &Reconciler{ledger: ledger, cfg: cfg, log: cfg.Logger.Named("reconciler"), exhausted: map[string]bool{},
		term: newTermState(), stats: newMetrics()}
}

// Run campaigns with el and, while leading, runs a pass every Interval. It
// returns when ctx ends, resigning first. Losing leadership (the etcd session)
// stops the passes at once; it then campaigns again.
func (r *Reconciler) Run(ctx context.Context, el Elector) error {
	for ctx.Err() == nil {
		lead, err := el.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			r.log.Warn("election failed; retrying", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		r.log.Info("elected reconciler", zap.String("holder", r.cfg.Holder), zap.Int64("fence", lead.Fence))
		r.lead(ctx, lead)
	}
	resignCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return el.Resign(resignCtx)
}

func (r *Reconciler) lead(ctx context.Context, lead Leadership) {
	if f := r.cfg.OnLeadership; f != nil {
		f(true)
		defer f(false)
	}
	// A term's context ends with the term, so a pass in flight stops with it.
	term, cancel := context.WithCancel(ctx)
	var passes sync.WaitGroup
	defer func() {
		cancel()
		passes.Wait()
	}()
	passes.Go(func() {
		select {
		case <-lead.Lost:
			cancel() // first: asking why may wait on an unreachable etcd
			r.stats.termsLost.Inc()
			r.log.Warn("reconciler term lost", zap.Int64("fence", lead.Fence), zap.NamedError("cause", leadershipCause(lead)))
		case <-term.Done():
		}
	})
	r.mu.Lock()
	r.exhausted = map[string]bool{}
	r.term = newTermState()
	r.term.passing = true // the term's full pass runs beside its steps
	r.mu.Unlock()
	passes.Go(func() { r.passLoop(term, lead.Fence, cancel) })
	passes.Go(func() { r.watchSession(term, lead) })
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if r.gateOpen(term) {
			if err := r.Step(term, lead.Fence); errors.Is(err, lease.ErrFenced) {
				r.log.Warn("fenced off by a newer leader; stepping down", zap.Error(err))
				return
			} else if err != nil && term.Err() == nil {
				r.log.Warn("reconciler pass failed", zap.Error(err))
			}
		}
		select {
		case <-term.Done():
			r.log.Info("reconciler leadership ended")
			return
		case <-t.C:
		}
	}
}

// watchSession samples the term's election session (Leadership.Remaining)
// into the session TTL gauge every Interval until the term ends, and then
// zeroes it.
func (r *Reconciler) watchSession(term context.Context, lead Leadership) {
	defer r.stats.sessionTTL.Set(0)
	if lead.Remaining == nil {
		return
	}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(term, max(r.cfg.Interval, time.Second))
		left, err := lead.Remaining(ctx)
		cancel()
		if err == nil {
			r.stats.sessionTTL.Set(left.Seconds())
		} else if term.Err() == nil {
			r.log.Warn("cannot read the election session's TTL", zap.Error(err))
		}
		select {
		case <-term.Done():
			return
		case <-t.C:
		}
	}
}

// gateOpen asks Config.Gate whether a pass may run now.
func (r *Reconciler) gateOpen(ctx context.Context) bool {
	if r.cfg.Gate == nil {
		return true
	}
	if err := r.cfg.Gate(ctx); err != nil {
		r.log.Warn("skipping a reconciler pass: the ledger gate is closed", zap.Error(err))
		return false
	}
	return true
}

// Pass runs the reconciler's duties once, at the clock's now, with fence, on
// every campaign, from the first: every shard of today and yesterday is
// settled and read. A term's first full pass resumes where the last one
// stopped (fullpass.go); Step runs the rest. A campaign that fails is
// logged, counted and left for the next pass; the pass goes on (only a newer
// leader's fence, or ctx, stops it). Before anything else it checks each
// Redis master's watermark (Config.Watermarks).
func (r *Reconciler) Pass(ctx context.Context, fence int64) error {
	if err := r.checkWatermarks(ctx, fence); err != nil {
		return err
	}
	if err := r.load(ctx, true); err != nil {
		return err
	}
	return r.fullPass(ctx, fence, false)
}

// each runs f(0..n-1) on up to Concurrency goroutines. Failures are logged
// and counted and do not stop the others, except a fence (a newer leader
// exists: nothing more may be written) or the end of ctx.
func (r *Reconciler) each(ctx context.Context, n int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		errs   []error
		fenced error
		next   atomic.Int64
		wg     sync.WaitGroup
	)
	for range min(r.cfg.Concurrency, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				err := f(i)
				if err == nil {
					continue
				}
				mu.Lock()
				if errors.Is(err, lease.ErrFenced) {
					if fenced == nil {
						fenced = err
					}
					cancel()
				} else if ctx.Err() == nil {
					r.stats.errors.Add(float64(failures(err)))
					r.log.Warn("reconciling failed; retried next pass", zap.Error(err))
					if len(errs) < 10 {
						errs = append(errs, err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if fenced != nil {
		return fenced
	}
	return errors.Join(errs...)
}

// Step is a pass that works from the ledger's indexes (lease/index.go), so
// that its Redis commands grow with the work to do, not with the campaigns:
// campaigns changed since the last pass (the change stream), days to open
// or close at a campaign's local midnight (decided in memory; a day known
// open or reported is not asked about again, and at most dayStepLimit
// campaigns' days a pass), shards with an expired lease (the due index),
// shards left nearly empty (the low index: rebalance, exhaustion), and a
// slice of the slow sweep, which gives every campaign a full look once per
// SweepPeriod. While the term's full pass runs beside the steps (Run's), the
// sweep waits for it. Called alone (not from Run), the first Step of a term
// is that full pass, resumed where the last one stopped.
func (r *Reconciler) Step(ctx context.Context, fence int64) error {
	r.mu.Lock()
	full, passing := r.term.full, r.term.passing
	r.mu.Unlock()
	if !full && !passing {
		if err := r.checkWatermarks(ctx, fence); err != nil {
			return err
		}
		if err := r.load(ctx, false); err != nil {
			return err
		}
		return r.fullPass(ctx, fence, true)
	}
	var cmds atomic.Int64
	ctx = lease.WithCommandCount(ctx, &cmds)
	start := time.Now()
	if err := r.checkWatermarks(ctx, fence); err != nil {
		return err
	}
	if err := r.load(ctx, false); err != nil {
		r.stats.errors.Inc()
		return err
	}
	work, err := r.step(ctx, fence, full)
	r.stats.observe(passStep, start, cmds.Load(), work, r.campaignCount())
	return err
}

// passErrs collects a pass's failures: each is kept for the pass's error
// and the pass goes on, unless a newer leader fenced this one off or the
// term ended (stop).
type passErrs struct {
	r    *Reconciler
	ctx  context.Context
	errs []error
}

// keep keeps err (each has logged and counted it) and reports whether the
// pass must stop.
func (p *passErrs) keep(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, lease.ErrFenced) || p.ctx.Err() != nil {
		p.errs = append([]error{err}, p.errs...)
		return true
	}
	p.errs = append(p.errs, err)
	return false
}

// keepOne is keep for a failure nothing logged or counted yet.
func (p *passErrs) keepOne(err error) bool {
	if err == nil {
		return false
	}
	if p.keep(err) {
		return true
	}
	p.r.stats.errors.Inc()
	p.r.log.Warn("reconciling failed; retried next pass", zap.Error(err))
	return false
}

func (p *passErrs) err() error {
	if len(p.errs) > 0 && (errors.Is(p.errs[0], lease.ErrFenced) || p.ctx.Err() != nil) {
		return p.errs[0]
	}
	return errors.Join(p.errs...)
}

// step is Step's work once the term is loaded; work is how many items it
// found (the backlog).
func (r *Reconciler) step(ctx context.Context, fence int64, sweep bool) (work int, err error) {
	now := r.cfg.Clock.Now()
	pe := &passErrs{r: r, ctx: ctx}
	// Campaigns stored since the last pass.
	if gap, err := r.followChanges(ctx); pe.keepOne(err) {
		return 0, pe.err()
	} else if gap && pe.keepOne(r.load(ctx, true)) {
		return 0, pe.err()
	}
	// Shards with expired leases, first: a burst of days to open below
	// never holds them up.
	plan, err := r.planIndex(ctx, now)
	if pe.keepOne(err) {
		return 0, pe.err()
	}
	due, err := r.ledger.DueShardsIn(ctx, now.Add(-r.cfg.Grace), stepLimit, plan.read)
	if pe.keepOne(err) || pe.keep(r.each(ctx, len(due), func(i int) error { return r.settleDue(ctx, due[i], fence, now) })) {
		return len(due), pe.err()
	}
	// Shards left nearly empty.
	n, stop := r.stepLow(ctx, pe, fence, now, plan.read)
	if stop || pe.keepOne(r.reanchor(ctx, plan, due, now)) {
		return len(due) + n, pe.err()
	}
	// Days to open and to close.
	days := r.dueDays(now)
	work = len(due) + n + len(days)
	if pe.keep(r.each(ctx, len(days), func(i int) error { return r.days(ctx, days[i], fence, now) })) {
		return work, pe.err()
	}
	// A slice of the sweep, once the term's full pass is done.
	if sweep {
		slice := r.sweepSlice()
		pe.keep(r.campaigns(ctx, slice, fence))
	}
	return work, pe.err()
}

// stepLow rebalances the campaign-days the low index names and clears the
// entries it dealt with. n: the campaign-days; stop: the pass must stop.
func (r *Reconciler) stepLow(ctx context.Context, pe *passErrs, fence int64, now time.Time, slots []int) (n int, stop bool) {
	low, err := r.ledger.LowShardsIn(ctx, stepLimit, slots)
	if pe.keepOne(err) {
		return 0, true
	}
	var lowDays []cday
	seen := map[cday]bool{}
	for _, e := range low {
		d := cday{e.Shard.Campaign, e.Shard.Day}
		if !seen[d] {
			seen[d] = true
			lowDays = append(lowDays, d)
		}
	}
	if err := r.each(ctx, len(lowDays), func(i int) error { return r.lowDay(ctx, lowDays[i].campaign, lowDays[i].day, fence, now) }); err != nil {
		return len(lowDays), pe.keep(err)
	}
	return len(lowDays), pe.keepOne(r.ledger.Unindex(ctx, low))
}

type cday struct{ campaign, day string }

// stepLimit caps the index entries one pass takes on; the rest wait for the
// next pass (and show in the backlog).
const stepLimit = 10_000

// dayStepLimit caps the campaigns whose days one step opens or closes: a
// burst of new campaigns, or a midnight shared by many, is worked through
// over the next passes instead of holding up one pass's settles (about 15
// Redis commands a campaign; the full pass, beside the steps, opens days
// too).
const dayStepLimit = 512

// dueDays returns the campaigns whose today is not known open or whose
// yesterday is not known reported, at most dayStepLimit. A campaign found
// with nothing to do is calm until its next local midnight: it costs a map
// lookup a pass, not a time-zone computation.
func (r *Reconciler) dueDays(now time.Time) []lease.Campaign {
	ms := now.UnixMilli()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []lease.Campaign
	r.term.roster.all(func(id string) bool {
		if r.term.calm[id] > ms {
			return true
		}
		c := r.term.campaigns[id]
		today := bucket.DayOf(now, c.Location())
		yesterday := bucket.DayOf(today.Start.Add(-time.Hour), c.Location())
		if (c.State == lease.StateActive && r.term.opened[id] != today.Key) || r.term.reported[id] != yesterday.Key {
			out = append(out, c)
			return len(out) < dayStepLimit
		}
		r.term.calm[id] = today.End.UnixMilli()
		return true
	})
	return out
}

// changeBatches caps the change stream's batches (1,000 ids each) one pass
// reads; the rest wait for the next pass.
const changeBatches = 10

// followChanges reloads the campaigns stored since the last pass, in
// pipelines of 1,000. gap: the change stream was trimmed past what this
// leader had read; re-read all. The term's lock is held only to apply what
// was read, never across a Redis call, and adding or removing a campaign is
// amortised O(1) (roster).
func (r *Reconciler) followChanges(ctx context.Context) (gap bool, err error) {
	r.mu.Lock()
	pos := r.term.changes
	r.mu.Unlock()
	for range changeBatches {
		ids, next, gap, err := r.ledger.CampaignChanges(ctx, pos, 1000)
		if err != nil || gap {
			return gap, err
		}
		if len(ids) == 0 {
			return false, nil
		}
		slices.Sort(ids)
		found, gone, err := r.ledger.GetCampaigns(ctx, slices.Compact(ids))
		if err != nil {
			return false, err
		}
		r.mu.Lock()
		for _, id := range gone {
			delete(r.term.campaigns, id)
			delete(r.term.calm, id)
			r.term.roster.remove(id)
		}
		for _, c := range found {
			r.term.campaigns[c.ID] = c
			delete(r.term.calm, c.ID)
			r.term.roster.add(c.ID)
		}
		r.term.changes = next
		r.mu.Unlock()
		pos = next
	}
	return false, nil
}

// sweepSlice returns the campaigns this pass sweeps: enough that every
// campaign is swept once per SweepPeriod.
func (r *Reconciler) sweepSlice() []lease.Campaign {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.term.roster.len()
	if n == 0 {
		return nil
	}
	k := min(n, int((int64(n)*int64(r.cfg.Interval)+int64(r.cfg.SweepPeriod)-1)/int64(r.cfg.SweepPeriod)))
	ids := r.term.roster.next(k)
	out := make([]lease.Campaign, len(ids))
	for i, id := range ids {
		out[i] = r.term.campaigns[id]
	}
	return out
}

// campaignCount is how many campaigns the term knows.
func (r *Reconciler) campaignCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.term.roster.len()
}

// days opens a campaign's today and closes its yesterday, if not known done.
// One round trip tells most campaigns apart (a new leader's steps ask
// about every campaign a resumed full pass did not look at).
func (r *Reconciler) days(ctx context.Context, c lease.Campaign, fence int64, now time.Time) error {
	loc := c.Location()
	today := bucket.DayOf(now, loc)
	yesterday := bucket.DayOf(today.Start.Add(-time.Hour), loc)
	sv, err := r.ledger.SurveyDays(ctx, c.ID, today.Key, yesterday.Key)
	if err != nil {
		return err
	}
	if active := c.State == lease.StateActive; (!active || sv.TodayShards > 0) && (sv.YesterdayShards == 0 || (sv.Reported && !sv.Relook)) {
		if active {
			r.learn(opened, c.ID, today.Key)
		}
		r.learn(reported, c.ID, yesterday.Key)
		return nil
	}
	if c.State == lease.StateActive && !r.known(opened, c.ID, today.Key) {
		if _, err := r.ledger.OpenDay(ctx, c, today.Key, today.Start, now); err != nil {
			return err
		}
		r.learn(opened, c.ID, today.Key)
	}
	if r.known(reported, c.ID, yesterday.Key) && !sv.Relook {
		return nil
	}
	n, err := r.ledger.DayShards(ctx, c.ID, yesterday.Key)
	if err != nil {
		return err
	}
	if n == 0 {
		r.learn(reported, c.ID, yesterday.Key) // nothing to close
		return nil
	}
	_, err = r.closeDay(ctx, c, yesterday, today, n, nil, fence, now)
	return err
}

// settleDue settles a shard the due index names.
func (r *Reconciler) settleDue(ctx context.Context, e lease.IndexEntry, fence int64, now time.Time) error {
	s, err := r.ledger.Settle(ctx, e.Shard, now, r.cfg.Grace, fence)
	if errors.Is(err, lease.ErrDayNotOpen) {
		return r.ledger.Unindex(ctx, []lease.IndexEntry{e}) // its keys expired
	}
	if err != nil {
		return err
	}
	if s.Count > 0 {
		r.log.Info("settled expired leases", zap.String("campaign", e.Shard.Campaign), zap.String("day", e.Shard.Day),
			zap.Int("shard", e.Shard.Shard), zap.Int64("leases", s.Count), zap.Int64("micros", s.Amount))
	}
	return nil
}

// lowDay rebalances a campaign's today one of whose shards ran low, and
// tells the fleet if it is exhausted.
func (r *Reconciler) lowDay(ctx context.Context, campaign, day string, fence int64, now time.Time) error {
	r.mu.Lock()
	c, ok := r.term.campaigns[campaign]
	r.mu.Unlock()
	if !ok || bucket.DayOf(now, c.Location()).Key != day {
		return nil // gone, or not today: the day's close deals with it
	}
	n, relook, err := r.ledger.DayShardsRelook(ctx, campaign, day)
	if err != nil || n == 0 {
		return err
	}
	shards, err := r.ledger.ReadShards(ctx, campaign, day, n)
	if err != nil {
		return err
	}
	if shards, err = r.relookToday(ctx, campaign, day, shards, relook, fence, now); err != nil {
		return err
	}
	if err := r.rebalance(ctx, campaign, day, shards, fence, now); err != nil {
		return err
	}
	r.checkExhausted(campaign, day, shards)
	return nil
}

// surveyBatch is how many campaigns one survey reads at once (two
// pipelined round trips for them all): a full pass's or a sweep's unit of
// work on one of Concurrency goroutines.
const surveyBatch = 32

// campaigns gives each of cs the full look (the full pass's, and the
// sweep's), surveyBatch campaigns a goroutine at a time.
func (r *Reconciler) campaigns(ctx context.Context, cs []lease.Campaign, fence int64) error {
	n := (len(cs) + surveyBatch - 1) / surveyBatch
	return r.each(ctx, n, func(i int) error {
		return r.surveyed(ctx, cs[i*surveyBatch:min((i+1)*surveyBatch, len(cs))], fence)
	})
}

// surveyed surveys cs in two pipelined round trips whatever their number
// (the survey also records this leader's fence on every shard of their
// todays, as a settle would); only a campaign with something to do (a day
// to open or close, a budget change or a move left pending, a lease
// expired, a shard missing) then gets the look that settles every shard
// (fullLook), so a full pass over 100,000 idle campaigns costs reads and
// one fence write a shard, not 800,000 settle scripts. The campaigns'
// failures are joined (each one counted); a fence stops at once.
func (r *Reconciler) surveyed(ctx context.Context, cs []lease.Campaign, fence int64) error {
	now := r.cfg.Clock.Now()
	reqs := make([]lease.SurveyRequest, len(cs))
	for i, c := range cs {
		today := bucket.DayOf(now, c.Location())
		yesterday := bucket.DayOf(today.Start.Add(-time.Hour), c.Location())
		reqs[i] = lease.SurveyRequest{Campaign: c.ID, Today: today.Key, Yesterday: yesterday.Key, Cutoff: now.Add(-r.cfg.Grace)}
	}
	svs, err := r.ledger.SurveyCampaigns(ctx, reqs, fence)
	if err != nil {
		return err
	}
	var errs []error
	for i, c := range cs {
		err := svs[i].Err
		if err == nil {
			err = r.campaign(ctx, c, reqs[i], svs[i], fence, now)
		}
		if errors.Is(err, lease.ErrFenced) || ctx.Err() != nil {
			return cmp.Or(err, ctx.Err())
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// campaign is what campaign c's survey sv (of q) calls for: its full look,
// or the rules of its today.
func (r *Reconciler) campaign(ctx context.Context, c lease.Campaign, q lease.SurveyRequest, sv lease.Survey, fence int64, now time.Time) error {
	active := c.State == lease.StateActive
	if sv.PendingOps || sv.Lost || sv.PendingMoves || sv.Expired || (active && sv.TodayShards == 0) ||
		(sv.YesterdayShards > 0 && (!sv.Reported || sv.Relook)) || (sv.TodayShards > 0 && sv.TodayRelook) {
		return r.fullLook(ctx, c, fence)
	}
	if active {
		r.learn(opened, c.ID, q.Today)
	}
	r.learn(reported, c.ID, q.Yesterday) // reported, or never opened
	if sv.TodayShards == 0 {
		return nil
	}
	return r.today(ctx, c.ID, q.Today, sv.Today, fence, now)
}

// today pays a cut's debts on a campaign's today, or else rebalances its
// shards, and tells the fleet if it is exhausted. shards: as just read.
func (r *Reconciler) today(ctx context.Context, campaign, day string, shards []lease.Shard, fence int64, now time.Time) error {
	// A cut's debt its shard can no longer take back is paid from its
	// siblings before anything else moves.
	paid, err := r.ledger.PayDebts(ctx, campaign, day, shards, fence, now)
	if err != nil {
		return err
	}
	if paid > 0 {
		if shards, err = r.ledger.ReadShards(ctx, campaign, day, len(shards)); err != nil {
			return err
		}
	} else if err := r.rebalance(ctx, campaign, day, shards, fence, now); err != nil {
		return err
	}
	r.checkExhausted(campaign, day, shards)
	return nil
}

// fullLook settles every shard of a campaign's yesterday (unless reported)
// and today, finishing what was left pending, opening today and closing
// yesterday: what campaign does when its survey finds work.
func (r *Reconciler) fullLook(ctx context.Context, c lease.Campaign, fence int64) error {
	now := r.cfg.Clock.Now()
	loc := c.Location()
	today := bucket.DayOf(now, loc)
	yesterday := bucket.DayOf(today.Start.Add(-time.Hour), loc)
	if c.State == lease.StateActive {
		if _, err := r.ledger.OpenDay(ctx, c, today.Key, today.Start, now); err != nil {
			return err
		}
		r.learn(opened, c.ID, today.Key)
	}
	if _, err := r.ledger.FinishDayOps(ctx, c.ID, now); err != nil {
		return err
	}
	for _, day := range []bucket.Day{yesterday, today} {
		if day.Key == yesterday.Key {
			// A reported day's leases were all settled and its shards
			// refuse grants: nothing more to do on it, unless it lost
			// writes since (a relook).
			done, err := r.reportedFor(ctx, c.ID, day.Key)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		n, err := r.ledger.DayShards(ctx, c.ID, day.Key)
		if err != nil {
			return err
		}
		if n == 0 {
			if day.Key == yesterday.Key {
				r.learn(reported, c.ID, day.Key)
			}
			continue
		}
		if _, err := r.ledger.FinishMoves(ctx, c.ID, day.Key, n, now); err != nil {
			return err
		}
		shards := make([]lease.Shard, n)
		for i := range n {
			s, err := r.ledger.Settle(ctx, lease.ShardKey{Campaign: c.ID, Day: day.Key, Shard: i}, now, r.cfg.Grace, fence)
			if err != nil {
				return err
			}
			if s.Count > 0 {
				r.log.Info("settled expired leases", zap.String("campaign", c.ID), zap.String("day", day.Key),
					zap.Int("shard", i), zap.Int64("leases", s.Count), zap.Int64("micros", s.Amount))
			}
			shards[i] = s.Shard
		}
		if day.Key == today.Key {
			relook, err := r.ledger.Relook(ctx, c.ID, day.Key)
			if err != nil {
				return err
			}
			if shards, err = r.relookToday(ctx, c.ID, day.Key, shards, relook, fence, now); err != nil {
				return err
			}
			if err := r.today(ctx, c.ID, day.Key, shards, fence, now); err != nil {
				return err
			}
		} else if _, err := r.closeDay(ctx, c, day, today, n, shards, fence, now); err != nil {
			return err
		}
	}
	return nil
}

// rebalance refills the poorest shard from the richest, so one empty shard
// never makes a campaign look exhausted while others hold budget. One move per
// campaign per pass keeps each pass short.
func (r *Reconciler) rebalance(ctx context.Context, campaign, day string, shards []lease.Shard, fence int64, now time.Time) error {
	if len(shards) < 2 {
		return nil
	}
	var total int64
	poor, rich := 0, 0
	for i, s := range shards {
		total += s.Remaining()
		if s.Remaining() < shards[poor].Remaining() {
			poor = i
		}
		if s.Locked > shards[rich].Locked {
			rich = i
		}
	}
	mean := float64(total) / float64(len(shards))
	if float64(shards[poor].Remaining()) >= r.cfg.PoorShare*mean || poor == rich {
		return nil
	}
	amount := min(shards[rich].Locked, (shards[rich].Remaining()-shards[poor].Remaining())/2)
	if amount <= 0 {
		return nil
	}
	id := fmt.Sprintf("%d.%d.%d-%d", fence, now.UnixMilli(), rich, poor)
	moved, err := r.ledger.Move(ctx, campaign, day, rich, poor, amount, id, fence, now)
	if err != nil {
		return err
	}
	r.log.Info("rebalanced shards", zap.String("campaign", campaign), zap.String("day", day),
		zap.Int("from", rich), zap.Int("to", poor), zap.Int64("micros", moved))
	return nil
}

func (r *Reconciler) checkExhausted(campaign, day string, shards []lease.Shard) {
	var remaining int64
	for _, s := range shards {
		remaining += s.Remaining()
	}
	key := campaign + "/" + day
	r.mu.Lock()
	done := remaining > 0 || r.exhausted[key]
	r.exhausted[key] = r.exhausted[key] || remaining == 0
	r.mu.Unlock()
	if done {
		return
	}
	r.log.Info("campaign-day exhausted", zap.String("campaign", campaign), zap.String("day", day))
	if r.cfg.Publisher != nil {
		e := pacer.Event{Kind: pacer.EventExhausted, Campaign: campaign, Day: day, From: r.cfg.Holder, AtMillis: r.cfg.Clock.Now().UnixMilli()}
		if err := r.cfg.Publisher.Publish(e); err != nil {
			r.log.Warn("broadcast failed", zap.Error(err))
		}
	}
}

// closeDay writes a finished day's report once none of its leases is
// outstanding (they are settled after expiry plus grace). Its remaining budget
// is under-delivery, unless the campaign carries it over to the next day.
// shards are the day's n shards as just settled, or nil to read them here;
// fence is the leader's, for the moves that pay a cut's debts. done: the
// report is saved.
func (r *Reconciler) closeDay(ctx context.Context, c lease.Campaign, day, next bucket.Day, n int, shards []lease.Shard, fence int64, now time.Time) (done bool, err error) {
	campaign := c.ID
	saved, err := r.ledger.HasReport(ctx, campaign, day.Key)
	if err != nil {
		return false, err
	}
	relook, err := r.ledger.Relook(ctx, campaign, day.Key)
	if err != nil {
		return false, err
	}
	if saved && relook.IsZero() {
		r.learn(reported, campaign, day.Key)
		return true, nil
	}
	// Closed shards refuse grants, so what is left on them can only shrink
	// (a daemon with a late clock cannot lease from a finished day). A day
	// that lost writes may have lost its close: closed again.
	if !r.known(shut, campaign, day.Key) || !relook.IsZero() {
		if err := r.ledger.CloseDay(ctx, campaign, day.Key, now); err != nil {
			return false, err
		}
		r.learn(shut, campaign, day.Key)
	}
	if shards == nil {
		if shards, err = r.ledger.ReadShards(ctx, campaign, day.Key, n); err != nil {
			return false, err
		}
	}
	for _, s := range shards {
		if s.Leased > 0 {
			return false, nil // not yet: leases of the day are still outstanding
		}
	}
	if now.Before(relook) {
		return false, nil // not yet: the fleet re-asserts what the loss forgot until the freeze ends
	}
	if !relook.IsZero() {
		if shards, err = r.repairMoves(ctx, campaign, day.Key, shards, fence, now); err != nil {
			return false, err
		}
	}
	// What the report counts as under-delivered (or the carry moves on) must
	// not include what a cut still owes elsewhere on the day.
	if _, err := r.ledger.PayDebts(ctx, campaign, day.Key, shards, fence, now); err != nil {
		return false, err
	}
	if !relook.IsZero() {
		if ready, err := r.repairCarries(ctx, c, day, next, now); !ready || err != nil {
			return false, err
		}
	}
	if saved {
		return r.relooked(ctx, campaign, day.Key, relook)
	}
	return r.reportDay(ctx, c, day, next, relook, now)
}

// repairCarries is a relooked day's carry-over repair: a carry the loss
// split (its days record, its shards and the next day's each in their own
// slot) is finished from what the shards show, reported day or not
// (lease.Ledger.RepairCarry): the day's own, and the one into it from the
// day before, which no pass looks at any more (a restore the watermark saw
// only once the day before was two days back: model seed 1159). ready:
// no carry waits for a lease to land.
func (r *Reconciler) repairCarries(ctx context.Context, c lease.Campaign, day, next bucket.Day, now time.Time) (ready bool, err error) {
	prev := bucket.DayOf(day.Start.Add(-time.Hour), c.Location()).Key
	for _, pair := range [][2]string{{prev, day.Key}, {day.Key, next.Key}} {
		if _, err := r.ledger.RepairCarry(ctx, c.ID, pair[0], pair[1], now); errors.Is(err, lease.ErrCarryNotReady) {
			return false, nil
		} else if err != nil {
			return false, err
		}
	}
	return true, nil
}

// reportDay is closeDay's last phase, for a settled day with no report:
// the carry-over if the campaign has one, the report saved, the relook mark
// (if any) cleared. done: the report is saved and no relook is pending.
func (r *Reconciler) reportDay(ctx context.Context, c lease.Campaign, day, next bucket.Day, relook time.Time, now time.Time) (done bool, err error) {
	campaign := c.ID
	if c.CarryOver {
		// The next day must exist to take the carry, even for a paused
		// campaign (its budget stays locked until it resumes).
		if _, err := r.ledger.OpenDay(ctx, c, next.Key, next.Start, now); err != nil {
			return false, err
		}
		if _, err := r.ledger.CarryOver(ctx, campaign, day.Key, next.Key, now); errors.Is(err, lease.ErrCarryNotReady) {
			return false, nil // a lease landed since the shards were read: next pass
		} else if err != nil {
			return false, err
		}
	}
	rep, err := r.ledger.BuildReport(ctx, campaign, day.Key)
	if err != nil {
		return false, err
	}
	if err := r.ledger.SaveReport(ctx, rep); err != nil {
		return false, err
	}
	if !relook.IsZero() {
		if ok, err := r.ledger.ClearRelook(ctx, campaign, day.Key, relook); err != nil || !ok {
			return false, err // marked again since: looked at again
		}
	}
	r.learn(reported, campaign, day.Key)
	r.log.Info("closed campaign-day", zap.String("campaign", campaign), zap.String("day", day.Key),
		zap.Int64("budget", rep.Budget), zap.Int64("spent", rep.Spent), zap.Int64("lost", rep.Lost),
		zap.Int64("under_delivery", rep.UnderDelivery))
	return true, nil
}

// reportedFor reports whether a campaign's day is reported and needs no
// relook (it lost no writes since), and learns it.
func (r *Reconciler) reportedFor(ctx context.Context, campaign, day string) (bool, error) {
	saved, err := r.ledger.HasReport(ctx, campaign, day)
	if err != nil || !saved {
		return false, err
	}
	relook, err := r.ledger.Relook(ctx, campaign, day)
	if err != nil || !relook.IsZero() {
		return false, err
	}
	r.learn(reported, campaign, day)
	return true, nil
}

// relooked ends the relook of a reported day whose shards are closed again
// and whose debts are paid again: the report stands (what the day's lost
// writes had counted), the mark is cleared unless a freeze since marked the
// day again.
func (r *Reconciler) relooked(ctx context.Context, campaign, day string, relook time.Time) (bool, error) {
	ok, err := r.ledger.ClearRelook(ctx, campaign, day, relook)
	if err != nil || !ok {
		return false, err
	}
	r.learn(reported, campaign, day)
	r.log.Info("looked again at a reported day that lost writes: shards closed, debts paid", zap.String("campaign", campaign), zap.String("day", day))
	return true, nil
}

// repairMoves makes a day's budget changes and moves whole again after a
// loss of writes (lease.Ledger.RepairDayOps, RepairMoves) and returns its
// shards, read again if anything was repaired.
func (r *Reconciler) repairMoves(ctx context.Context, campaign, day string, shards []lease.Shard, fence int64, now time.Time) ([]lease.Shard, error) {
	ops, err := r.ledger.RepairDayOps(ctx, campaign, day, len(shards), now)
	if err != nil {
		return shards, err
	}
	moves, err := r.ledger.RepairMoves(ctx, campaign, day, len(shards), fence, now)
	if err != nil || ops+moves == 0 {
		return shards, err
	}
	return r.ledger.ReadShards(ctx, campaign, day, len(shards))
}

// relookToday makes the moves of a campaign's today whole if a shard of it
// lost writes (until: its relook mark, zero if none), and clears the mark
// once the freeze has ended: today's close needs nothing more from it. It
// returns the shards, read again if a move was repaired.
func (r *Reconciler) relookToday(ctx context.Context, campaign, day string, shards []lease.Shard, until time.Time, fence int64, now time.Time) ([]lease.Shard, error) {
	if until.IsZero() {
		return shards, nil
	}
	shards, err := r.repairMoves(ctx, campaign, day, shards, fence, now)
	if err != nil {
		return shards, err
	}
	if !now.Before(until) {
		_, err = r.ledger.ClearRelook(ctx, campaign, day, until)
	}
	return shards, err
}
