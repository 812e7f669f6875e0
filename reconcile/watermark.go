package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// A restore seen even when every daemon is new. A shard's history chain
// (lease.Shard.Seq, Tip) lets a daemon that saw writes the shard has lost
// notice it; a daemon started after the restore saw nothing. So every pass
// (the first of each term included) the leader reads each Redis master's
// write watermark (lease.Watermark), compares it with the copy kept in a
// WatermarkStore outside Redis, advances it in Redis under the ledger's
// durability policy and records the new value. A master whose watermark is
// behind the record lost writes it had acknowledged: before recording
// anything, the pass freezes every shard it holds of every campaign's
// yesterday, today and later days (grants refused for a lease window plus
// grace, the freeze's reason kept for lease.CheckDay), broadcasts
// pacer.EventLostWrites for each of those days so daemons re-assert what
// they hold, logs the figures and counts it (pacer_ledger_rollbacks_total).
// Each frozen day is marked for a relook (lease.Ledger.Freeze): once its
// freeze has ended, closeDay closes it and pays its cuts' debts again, even
// if it was reported (the loss may have undone the reconciler's own close
// and payments while the report, in another slot, stayed); and each frozen
// day's budget changes and moves are made whole at once (RepairDayOps,
// RepairMoves), as the master behind may hold one shard's part of them and
// other masters the rest.
// A detection that could not freeze every shard is not recorded, so the
// next pass sees the same rollback and tries again.
//
// What it cannot see: writes after the last pass that advanced the
// watermark. A restore to a copy taken after that pass reads as current.

// WatermarkStore keeps each Redis master's watermark outside Redis, by the
// master's name (lease.Master.Name). EtcdWatermarks is the fleet's.
type WatermarkStore interface {
	// Load returns the master's recorded watermark; ok is false if none.
	Load(ctx context.Context, master string) (w lease.Watermark, ok bool, err error)
	// Store records w for the master.
	Store(ctx context.Context, master string, w lease.Watermark) error
}

// WatermarkPrefix is the etcd key prefix of the recorded watermarks, one key
// per master (WatermarkPrefix + name). It sits inside the election's prefix
// range (/pacer/reconciler…), so the etcd role that may run the election
// may record them, but outside the election's own directory
// (ElectionPrefix + "/"), where every key is a candidate.
const WatermarkPrefix = ElectionPrefix + "-watermark/"

// ErrWatermarkConflict: the recorded watermark changed since this store
// last read it (another reconciler recorded one): nothing was written.
var ErrWatermarkConflict = errors.New("reconcile: recorded watermark changed since it was read")

// EtcdWatermarks is a WatermarkStore in etcd. Store writes only if the key
// is as this store last saw it (Load or Store: a compare on its revision),
// so a deposed leader's late Store cannot move a newer record back (which
// would hide a rollback to between the two). Safe for concurrent use.
type EtcdWatermarks struct {
	client *clientv3.Client
	mu     sync.Mutex
	rev    map[string]int64 // master -> the key's ModRevision as last seen (0: absent)
}

// NewEtcdWatermarks returns a store of the watermarks in etcd.
func NewEtcdWatermarks(client *clientv3.Client) *EtcdWatermarks {
	return &EtcdWatermarks{client: client, rev: map[string]int64{}}
}

// Load implements WatermarkStore.
func (s *EtcdWatermarks) Load(ctx context.Context, master string) (lease.Watermark, bool, error) {
	resp, err := s.client.Get(ctx, WatermarkPrefix+master)
	if err != nil {
		return lease.Watermark{}, false, fmt.Errorf("etcd watermark %s: %w", master, err)
	}
	var w lease.Watermark
	var rev int64
	if len(resp.Kvs) == 1 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &w); err != nil {
			return lease.Watermark{}, false, fmt.Errorf("etcd watermark %s: %w", master, err)
		}
		rev = resp.Kvs[0].ModRevision
	}
	s.mu.Lock()
	s.rev[master] = rev
	s.mu.Unlock()
	return w, rev != 0, nil
}

// Store implements WatermarkStore.
func (s *EtcdWatermarks) Store(ctx context.Context, master string, w lease.Watermark) error {
	v, err := json.Marshal(w)
	if err != nil {
		return err
	}
	key := WatermarkPrefix + master
	s.mu.Lock()
	rev := s.rev[master]
	s.mu.Unlock()
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(v))).Commit()
	if err != nil {
		return fmt.Errorf("etcd watermark %s: %w", master, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcd watermark %s: %w", master, ErrWatermarkConflict)
	}
	s.mu.Lock()
	s.rev[master] = resp.Header.Revision
	s.mu.Unlock()
	return nil
}

// MemWatermarks is a WatermarkStore kept in memory: the record of one
// process's reconciler, as the simulator runs it (in production the record
// is etcd's, EtcdWatermarks, so that it outlives the leader). The zero value
// is empty and ready.
type MemWatermarks struct {
	mu sync.Mutex
	w  map[string]lease.Watermark
}

// Load implements WatermarkStore.
func (s *MemWatermarks) Load(_ context.Context, master string) (lease.Watermark, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.w[master]
	return w, ok, nil
}

// Store implements WatermarkStore.
func (s *MemWatermarks) Store(_ context.Context, master string, w lease.Watermark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		s.w = map[string]lease.Watermark{}
	}
	s.w[master] = w
	return nil
}

// CheckWatermarks is a pass's watermark check on its own (Config.Watermarks;
// Pass and Step begin with it): each master's watermark compared with the
// record, a rollback dealt with, the watermark advanced. The simulator runs
// it every step, as production's reconciler does every second, between the
// steps of its slower reconciler. Only a newer leader's fence is returned.
func (r *Reconciler) CheckWatermarks(ctx context.Context, fence int64) error {
	return r.checkWatermarks(ctx, fence)
}

// checkWatermarks runs the watermark check on every master. It logs and
// counts its failures (the next pass tries again) and returns only a fence:
// a newer leader exists.
func (r *Reconciler) checkWatermarks(ctx context.Context, fence int64) error {
	if r.cfg.Watermarks == nil {
		return nil
	}
	r.wmMu.Lock()
	defer r.wmMu.Unlock()
	masters, err := r.ledger.Masters(ctx)
	if err == nil {
		for _, m := range masters {
			if err = r.checkWatermark(ctx, m, fence); errors.Is(err, lease.ErrFenced) {
				return err
			} else if err != nil && ctx.Err() == nil {
				r.stats.errors.Inc()
				r.log.Warn("watermark check failed; retried next pass", zap.String("master", m.Name), zap.Error(err))
			}
		}
	} else if ctx.Err() == nil {
		r.stats.errors.Inc()
		r.log.Warn("watermark check failed; retried next pass", zap.Error(err))
	}
	r.stats.frozenDays.Set(float64(r.frozenDays(r.cfg.Clock.Now())))
	return nil
}

// checkWatermark compares master m's watermark with the record, deals with
// a rollback, advances it and records the new value.
func (r *Reconciler) checkWatermark(ctx context.Context, m lease.Master, fence int64) error {
	got, had, err := r.ledger.ReadWatermark(ctx, m)
	if err != nil {
		return err
	}
	rec, recorded, err := r.cfg.Watermarks.Load(ctx, m.Name)
	if err != nil {
		return err
	}
	next := got.Counter + 1
	if recorded && got.Behind(rec) {
		if err := r.rolledBack(ctx, m, got, had, rec, fence); err != nil {
			return err
		}
		next = max(got.Counter, rec.Counter) + 1
	}
	w, err := r.ledger.AdvanceWatermark(ctx, m, got, had, next, fence)
	if err != nil {
		return err
	}
	return r.cfg.Watermarks.Store(ctx, m.Name, w)
}

// rolledBack freezes what master m holds of every campaign's current days,
// tells the fleet, logs and counts it. An error means some shard may not be
// frozen: the caller records nothing.
func (r *Reconciler) rolledBack(ctx context.Context, m lease.Master, got lease.Watermark, had bool, rec lease.Watermark, fence int64) error {
	now := r.cfg.Clock.Now()
	until := now.Add(r.cfg.LeaseWindow + r.cfg.Grace)
	found := "no watermark"
	if had {
		found = "watermark " + got.String()
	}
	reason := fmt.Sprintf("redis %s (%s) came back with %s, behind %s recorded outside Redis", m.Name, m.Addr, found, rec)
	campaigns, err := r.allCampaigns(ctx)
	if err != nil {
		return err
	}
	days := make([][]string, len(campaigns))
	err = r.each(ctx, len(campaigns), func(i int) error {
		var err error
		days[i], err = r.freezeCampaign(ctx, m, campaigns[i], until, now, reason, fence)
		return err
	})
	if err != nil {
		return fmt.Errorf("redis %s lost acknowledged writes and not every shard could be frozen: %w", m.Name, err)
	}
	n := 0
	for i, c := range campaigns {
		for _, day := range days[i] {
			n++
			r.noteFrozen(c.ID+"/"+day, until)
			if r.cfg.Publisher == nil {
				continue
			}
			e := pacer.Event{Kind: pacer.EventLostWrites, Campaign: c.ID, Day: day, From: r.cfg.Holder, AtMillis: now.UnixMilli()}
			if err := r.cfg.Publisher.Publish(e); err != nil {
				r.log.Warn("broadcast failed; daemons learn of the freeze from their next grant", zap.Error(err))
			}
		}
	}
	r.stats.rollbacks.Inc()
	r.log.Error("the ledger lost acknowledged writes: a Redis master's watermark is behind the one recorded outside Redis; froze its shards of the open days and asked the fleet to re-assert its leases; where pacer-export feeds PostgreSQL, run pacerctl recover --from-sql before frozen_until to count what it recorded and no daemon re-asserts (docs/OPERATIONS.md)",
		zap.String("master", m.Name), zap.String("addr", m.Addr), zap.Bool("redis_has_watermark", had),
		zap.Stringer("redis_watermark", got), zap.Stringer("recorded_watermark", rec),
		zap.Int64("passes_behind", rec.Counter-got.Counter), zap.Int("campaign_days_frozen", n),
		zap.Time("frozen_until", until), zap.Int64("fence", fence))
	return nil
}

// allCampaigns is every campaign the store lists and every one this term
// knew (a restore may have lost a campaign's record, not its shards).
func (r *Reconciler) allCampaigns(ctx context.Context) ([]lease.Campaign, error) {
	listed, err := r.ledger.ListCampaigns(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, c := range listed {
		seen[c.ID] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.term.roster.all(func(id string) bool {
		if !seen[id] {
			listed = append(listed, r.term.campaigns[id])
		}
		return true
	})
	return listed, nil
}

// freezeCampaign freezes master m's shards of the campaign's yesterday,
// today and any later day opened (a carry-over's), makes each such day's
// budget changes and moves whole again (lease.Ledger.RepairDayOps,
// RepairMoves: m may have lost a shard's part of a change, or one half of a
// move, whose record or other half is on another master), and returns the
// days it froze. Older days are closed: no grant can come from them.
func (r *Reconciler) freezeCampaign(ctx context.Context, m lease.Master, c lease.Campaign, until, now time.Time, reason string, fence int64) ([]string, error) {
	open, err := r.ledger.OpenDays(ctx, c.ID)
	if err != nil {
		return nil, err
	}
	loc := c.Location()
	yesterday := bucket.DayOf(bucket.DayOf(now, loc).Start.Add(-time.Hour), loc).Key
	var frozen []string
	for _, day := range open {
		if day < yesterday {
			continue
		}
		n, err := r.ledger.DayShards(ctx, c.ID, day)
		if err != nil {
			return frozen, err
		}
		froze := false
		for i := range n {
			k := lease.ShardKey{Campaign: c.ID, Day: day, Shard: i}
			if !m.Owns(k) {
				continue
			}
			if _, err := r.ledger.Freeze(ctx, k, until, now, reason); errors.Is(err, lease.ErrDayNotOpen) {
				continue // its keys are gone: nothing to grant from
			} else if err != nil {
				return frozen, err
			}
			froze = true
		}
		if !froze {
			continue
		}
		if _, err := r.ledger.RepairDayOps(ctx, c.ID, day, n, now); err != nil {
			return frozen, err
		}
		if _, err := r.ledger.RepairMoves(ctx, c.ID, day, n, fence, now); err != nil {
			return frozen, err
		}
		frozen = append(frozen, day)
	}
	return frozen, nil
}

// noteFrozen remembers until when a campaign-day is frozen, for the gauge.
func (r *Reconciler) noteFrozen(campaignDay string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen == nil {
		r.frozen = map[string]time.Time{}
	}
	if until.After(r.frozen[campaignDay]) {
		r.frozen[campaignDay] = until
	}
}

// frozenDays counts the campaign-days this reconciler froze whose freeze
// has not ended, and forgets the others.
func (r *Reconciler) frozenDays(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, until := range r.frozen {
		if !now.Before(until) {
			delete(r.frozen, k)
		}
	}
	return len(r.frozen)
}
