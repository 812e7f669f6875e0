package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
	"go.uber.org/zap"
)

// ReconcilerConfig tunes a Reconciler. Zero fields take the defaults.
type ReconcilerConfig struct {
	Holder string
	// Interval between passes (default 1s).
	Interval time.Duration
	// Grace after a lease's expiry before it is settled (default 4s). It must
	// exceed the daemons' clock-skew bound.
	Grace time.Duration
	// PoorShare: a shard whose remaining budget is below this fraction of the
	// campaign-day's mean is refilled from the richest (default 0.25).
	PoorShare float64
	Publisher Publisher
	// OnLeadership, if set, is told when this reconciler starts and stops
	// leading (pacerd feeds its metrics gauge with it).
	OnLeadership func(leading bool)
	// Gate, if set, is asked before every pass: while it refuses (the
	// ledger is not durable, or this host's clock is off Redis's by more
	// than the skew bound, so it could settle live leases early) no pass
	// runs.
	Gate   func(context.Context) error
	Clock  Clock
	Logger *zap.Logger
}

// Reconciler is the fleet's housekeeper; one daemon runs it, elected. Every
// pass is idempotent and safe to re-run after a failover mid-way: it finishes
// moves a dead leader left pending, settles expired leases, rebalances shards,
// opens each campaign-day at its local midnight, detects exhaustion and writes
// each closed day's report.
type Reconciler struct {
	ledger *lease.Ledger
	cfg    ReconcilerConfig
	log    *zap.Logger

	exhausted map[string]bool // campaign/day exhaustion already broadcast by this leader
}

// NewReconciler returns a Reconciler over ledger.
func NewReconciler(ledger *lease.Ledger, cfg ReconcilerConfig) *Reconciler {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 4 * time.Second
	}
	if cfg.PoorShare <= 0 {
		cfg.PoorShare = 0.25
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Reconciler{ledger: ledger, cfg: cfg, log: cfg.Logger.Named("reconciler"), exhausted: map[string]bool{}}
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
	defer cancel()
	go func() {
		select {
		case <-lead.Lost:
			cancel()
		case <-term.Done():
		}
	}()
	r.exhausted = map[string]bool{}
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if r.cfg.Gate != nil {
			if err := r.cfg.Gate(term); err != nil {
				r.log.Warn("skipping a reconciler pass: the ledger gate is closed", zap.Error(err))
				goto wait
			}
		}
		if err := r.Pass(term, lead.Fence); errors.Is(err, lease.ErrFenced) {
			r.log.Warn("fenced off by a newer leader; stepping down", zap.Error(err))
			return
		} else if err != nil && term.Err() == nil {
			r.log.Warn("reconciler pass failed", zap.Error(err))
		}
	wait:
		select {
		case <-term.Done():
			r.log.Info("reconciler leadership ended")
			return
		case <-t.C:
		}
	}
}

// Pass runs the reconciler's duties once, at the clock's now, with fence.
func (r *Reconciler) Pass(ctx context.Context, fence int64) error {
	campaigns, err := r.ledger.ListCampaigns(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range campaigns {
		if err := r.campaign(ctx, c, fence); err != nil {
			if errors.Is(err, lease.ErrFenced) || ctx.Err() != nil {
				return err
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) campaign(ctx context.Context, c lease.Campaign, fence int64) error {
	now := r.cfg.Clock.Now()
	loc := c.Location()
	today := bucket.DayOf(now, loc)
	yesterday := bucket.DayOf(today.Start.Add(-time.Hour), loc)
	if c.State == lease.StateActive {
		if _, err := r.ledger.OpenDay(ctx, c, today.Key, today.Start, now); err != nil {
			return err
		}
	}
	if _, err := r.ledger.FinishDayOps(ctx, c.ID, now); err != nil {
		return err
	}
	for _, day := range []bucket.Day{yesterday, today} {
		n, err := r.ledger.DayShards(ctx, c.ID, day.Key)
		if err != nil {
			return err
		}
		if n == 0 {
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
			if err := r.rebalance(ctx, c.ID, day.Key, shards, fence, now); err != nil {
				return err
			}
			r.checkExhausted(c.ID, day.Key, shards)
		} else if err := r.closeDay(ctx, c, day, today, shards, now); err != nil {
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
	if remaining > 0 || r.exhausted[key] {
		return
	}
	r.exhausted[key] = true
	r.log.Info("campaign-day exhausted", zap.String("campaign", campaign), zap.String("day", day))
	if r.cfg.Publisher != nil {
		e := transport.Event{Kind: transport.EventExhausted, Campaign: campaign, Day: day, From: r.cfg.Holder, AtMillis: r.cfg.Clock.Now().UnixMilli()}
		if err := r.cfg.Publisher.Publish(e); err != nil {
			r.log.Warn("broadcast failed", zap.Error(err))
		}
	}
}

// closeDay writes a finished day's report once none of its leases is
// outstanding (they are settled after expiry plus grace). Its remaining budget
// is under-delivery, unless the campaign carries it over to the next day.
func (r *Reconciler) closeDay(ctx context.Context, c lease.Campaign, day, next bucket.Day, shards []lease.Shard, now time.Time) error {
	campaign := c.ID
	saved, err := r.ledger.HasReport(ctx, campaign, day.Key)
	if err != nil || saved {
		return err
	}
	// Closed shards refuse grants, so what is left on them can only shrink
	// (a daemon with a late clock cannot lease from a finished day).
	if err := r.ledger.CloseDay(ctx, campaign, day.Key, now); err != nil {
		return err
	}
	for _, s := range shards {
		if s.Leased > 0 {
			return nil // not yet: leases of the day are still outstanding
		}
	}
	if c.CarryOver {
		// The next day must exist to take the carry, even for a paused
		// campaign (its budget stays locked until it resumes).
		if _, err := r.ledger.OpenDay(ctx, c, next.Key, next.Start, now); err != nil {
			return err
		}
		if _, err := r.ledger.CarryOver(ctx, campaign, day.Key, next.Key, now); errors.Is(err, lease.ErrCarryNotReady) {
			return nil // a lease landed since the shards were read: next pass
		} else if err != nil {
			return err
		}
	}
	rep, err := r.ledger.BuildReport(ctx, campaign, day.Key)
	if err != nil {
		return err
	}
	if err := r.ledger.SaveReport(ctx, rep); err != nil {
		return err
	}
	r.log.Info("closed campaign-day", zap.String("campaign", campaign), zap.String("day", day.Key),
		zap.Int64("budget", rep.Budget), zap.Int64("spent", rep.Spent), zap.Int64("lost", rep.Lost),
		zap.Int64("under_delivery", rep.UnderDelivery))
	return nil
}
