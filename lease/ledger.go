// Package lease owns the Redis ledger: campaign-days split into shards, the Lua
// scripts that grant, renew, release and settle leases on them, the campaign
// store, the audit stream, and the conservation check.
//
// Every change to money is one Lua script on one shard (one Redis Cluster slot):
// atomic, in integer micros, idempotent by lease id. On every shard, at every
// moment,
//
//	budget = locked + available + leased + spent
//
// exactly. The pacing curve is applied here, not in the daemons: budget moves
// from locked to available only as the campaign's local day advances along its
// curve, so adding daemons never multiplies spend. Callers pass their clock's
// reading and the curve's cumulative share at that instant; the ledger keeps no
// clock of its own.
package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

var (
	//go:embed lua/prelude.lua
	luaPrelude string
	//go:embed lua/open.lua
	luaOpen string
	//go:embed lua/grant.lua
	luaGrant string
	//go:embed lua/renew.lua
	luaRenew string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/settle.lua
	luaSettle string
	//go:embed lua/adjust.lua
	luaAdjust string
)

func script(body string) *redis.Script { return redis.NewScript(luaPrelude + "\n" + body) }

// Scripts are immutable; sharing them across Ledgers only shares their SHA.
var (
	openScript    = script(luaOpen)
	grantScript   = script(luaGrant)
	renewScript   = script(luaRenew)
	releaseScript = script(luaRelease)
	settleScript  = script(luaSettle)
	adjustScript  = script(luaAdjust)
)

// Config tunes a Ledger. The zero value is usable.
type Config struct {
	// Retention is how long a campaign-day's keys live after the day ends
	// (default 8 days), long enough for reports and late releases.
	Retention time.Duration
	// AuditMaxLen caps each shard's audit stream (approximately; default 1,000,000).
	AuditMaxLen int64
	// SettleBatch caps how many expired leases one call settles (default 256).
	SettleBatch int
}

// Ledger is the Redis ledger. It is safe for concurrent use; it holds no state
// of its own besides the client.
type Ledger struct {
	rdb redis.UniversalClient
	log *zap.Logger
	cfg Config

	locations sync.Map // time zone name -> *time.Location
}

// New returns a Ledger over rdb. rdb may be a single node, a failover client or
// a Cluster client: every script touches one slot.
func New(rdb redis.UniversalClient, cfg Config, log *zap.Logger) *Ledger {
	if cfg.Retention <= 0 {
		cfg.Retention = 8 * 24 * time.Hour
	}
	if cfg.AuditMaxLen <= 0 {
		cfg.AuditMaxLen = 1_000_000
	}
	if cfg.SettleBatch <= 0 {
		cfg.SettleBatch = 256
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Ledger{rdb: rdb, log: log.Named("lease"), cfg: cfg}
}

// Client returns the Redis client the ledger uses.
func (l *Ledger) Client() redis.UniversalClient { return l.rdb }

// Shard is one shard's balances, in micros. Spent includes Lost.
type Shard struct {
	Budget    int64 `json:"budget"`
	Locked    int64 `json:"locked"`
	Available int64 `json:"available"`
	Leased    int64 `json:"leased"`
	Spent     int64 `json:"spent"`
	// Lost is the part of Spent settled from expired leases whose holder never
	// reported: an upper bound on what crashed or cut-off daemons spent.
	Lost int64 `json:"lost"`
}

// Remaining is what the shard can still grant today: locked plus available.
func (s Shard) Remaining() int64 { return s.Locked + s.Available }

// Add returns the field-wise sum of s and o.
func (s Shard) Add(o Shard) Shard {
	return Shard{s.Budget + o.Budget, s.Locked + o.Locked, s.Available + o.Available,
		s.Leased + o.Leased, s.Spent + o.Spent, s.Lost + o.Lost}
}

func (l *Ledger) retainUntil(day time.Time) int64 {
	return day.Add(l.cfg.Retention).UnixMilli()
}

// run executes a script on one shard and decodes the common reply
// {status, value, budget, locked, available, leased, spent, lost, extra...}.
func (l *Ledger) run(ctx context.Context, s *redis.Script, k ShardKey, args ...any) (status, value int64, sh Shard, extra []int64, err error) {
	res, err := s.Run(ctx, l.rdb, k.keys(), args...).Int64Slice()
	if err != nil {
		return 0, 0, Shard{}, nil, fmt.Errorf("ledger %s: %w", k, err)
	}
	if len(res) < 8 {
		return 0, 0, Shard{}, nil, fmt.Errorf("ledger %s: short reply %v", k, res)
	}
	sh = Shard{Budget: res[2], Locked: res[3], Available: res[4], Leased: res[5], Spent: res[6], Lost: res[7]}
	if res[0] == -1 {
		return res[0], res[1], sh, res[8:], fmt.Errorf("ledger %s: %w", k, ErrDayNotOpen)
	}
	return res[0], res[1], sh, res[8:], nil
}

// DayShards returns how many shards the campaign-day was opened with, or 0 if
// the day has not been (completely) opened.
func (l *Ledger) DayShards(ctx context.Context, campaign, day string) (int, error) {
	v, err := l.rdb.HGet(ctx, daysKey(campaign), day).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: day marker: %w", campaign, day, err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("ledger %s/%s: bad day marker %q", campaign, day, v)
	}
	return n, nil
}

// OpenDay opens campaign c's day (its local date, starting at dayStart) with the
// campaign's daily budget split evenly over its shards, all of it locked.
// Idempotent and safe to race: shards are created only if missing, and the day
// marker is written after every shard exists. It returns the day's shard count.
//
// A day whose marker exists but one of whose shards is missing means Redis lost
// state; OpenDay returns ErrLedgerLost rather than grant that budget again.
func (l *Ledger) OpenDay(ctx context.Context, c Campaign, day string, dayStart, now time.Time) (int, error) {
	n, err := l.DayShards(ctx, c.ID, day)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		for i := range n {
			k := ShardKey{c.ID, day, i}
			ok, err := l.rdb.Exists(ctx, k.keys()[0]).Result()
			if err != nil {
				return 0, fmt.Errorf("ledger %s: %w", k, err)
			}
			if ok == 0 {
				return 0, fmt.Errorf("ledger %s: %w", k, ErrLedgerLost)
			}
		}
		return n, nil
	}
	if err := c.Validate(); err != nil {
		return 0, err
	}
	retain := l.retainUntil(dayStart.Add(48 * time.Hour))
	for i, part := range Split(c.DailyMicros, c.Shards) {
		k := ShardKey{c.ID, day, i}
		if _, err := openScript.Run(ctx, l.rdb, k.keys(), part, now.UnixMilli(), retain, l.cfg.AuditMaxLen).Result(); err != nil {
			return 0, fmt.Errorf("ledger %s: open: %w", k, err)
		}
	}
	// HSETNX: if a racing opener with another shard count got there first, its
	// count stands (our shards beyond it would hold budget nobody grants from, so
	// Split is deterministic and both openers use the campaign's stored count).
	_, err = l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, daysKey(c.ID), day+":budget", c.DailyMicros)
		p.HSetNX(ctx, daysKey(c.ID), day, c.Shards)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: day marker: %w", c.ID, day, err)
	}
	l.log.Info("opened campaign-day", zap.String("campaign", c.ID), zap.String("day", day),
		zap.Int64("budget_micros", c.DailyMicros), zap.Int("shards", c.Shards))
	return l.DayShards(ctx, c.ID, day)
}

// Split divides total micros into n parts that differ by at most one micro and
// sum exactly to total; the first parts take the remainder.
func Split(total int64, n int) []int64 {
	parts := make([]int64, n)
	q, r := total/int64(n), total%int64(n)
	for i := range parts {
		parts[i] = q
		if int64(i) < r {
			parts[i]++
		}
	}
	return parts
}

// Pace is where the campaign's pacing curve stands for a ledger call: its
// cumulative share of the local day at the call (Now) and at the end of the cap
// window (Cap), both in parts per billion. Available budget on a shard is capped
// at what the curve releases between Now and Cap.
type Pace struct {
	Now, Cap int64
}

// GrantRequest asks for a new lease on one shard.
type GrantRequest struct {
	Shard   ShardKey
	LeaseID string
	Holder  string
	Want    int64
	Expiry  time.Time
	Now     time.Time
	Pace    Pace
	// Grace is how long after expiry an unreleased lease on the shard may be
	// settled by this call. It must exceed the daemons' clock-skew bound.
	Grace time.Duration
	// DayStart is the start of the campaign-day (for key retention).
	DayStart time.Time
}

// Grant is a ledger call's outcome.
type Grant struct {
	// Granted is the lease's amount; 0 when the shard had nothing available.
	Granted int64
	// Shard is the shard's balances after the call.
	Shard Shard
}

func (r GrantRequest) validate() error {
	switch {
	case r.LeaseID == "" || len(r.LeaseID) > 200:
		return errors.New("lease id must be 1 to 200 bytes")
	case r.Want <= 0 || r.Want > MaxBudgetMicros:
		return fmt.Errorf("want %d micros out of range", r.Want)
	case !r.Expiry.After(r.Now):
		return errors.New("lease expiry must be after now")
	case r.Grace <= 0:
		return errors.New("grace must be positive")
	}
	return nil
}

// Grant leases up to Want micros from the shard's available budget, after
// settling the shard's expired leases and releasing budget along the curve.
// Retrying with the same lease id returns the lease already granted.
func (l *Ledger) Grant(ctx context.Context, r GrantRequest) (Grant, error) {
	if err := r.validate(); err != nil {
		return Grant{}, fmt.Errorf("ledger %s: grant: %w", r.Shard, err)
	}
	status, g, sh, _, err := l.run(ctx, grantScript, r.Shard,
		r.LeaseID, r.Holder, r.Want, r.Expiry.UnixMilli(), r.Now.UnixMilli(),
		r.Pace.Now, r.Pace.Cap, r.Grace.Milliseconds(), l.retainUntil(r.DayStart.Add(48*time.Hour)), l.cfg.AuditMaxLen)
	if err != nil {
		return Grant{}, err
	}
	if status == 2 {
		return Grant{Shard: sh}, fmt.Errorf("ledger %s: grant %s: lease already closed", r.Shard, r.LeaseID)
	}
	return Grant{Granted: g, Shard: sh}, nil
}

// Renew releases an ending lease (OldLeaseID, crediting Unused micros back) and
// grants its successor (LeaseID) on the same shard, in one atomic call. The
// release part has the semantics of Release; if the old lease was settled
// already, the successor is still granted and the error wraps ErrLeaseSettled.
func (l *Ledger) Renew(ctx context.Context, oldLeaseID string, unused int64, r GrantRequest) (Grant, error) {
	if err := r.validate(); err != nil {
		return Grant{}, fmt.Errorf("ledger %s: renew: %w", r.Shard, err)
	}
	if unused < 0 {
		return Grant{}, fmt.Errorf("ledger %s: renew: unused %d is negative", r.Shard, unused)
	}
	oldStatus, g, sh, extra, err := l.run(ctx, renewScript, r.Shard,
		oldLeaseID, unused, r.LeaseID, r.Holder, r.Want, r.Expiry.UnixMilli(), r.Now.UnixMilli(),
		r.Pace.Now, r.Pace.Cap, r.Grace.Milliseconds(), l.retainUntil(r.DayStart.Add(48*time.Hour)), l.cfg.AuditMaxLen)
	if err != nil {
		return Grant{}, err
	}
	out := Grant{Granted: g, Shard: sh}
	if len(extra) > 0 && extra[0] == 2 {
		return out, fmt.Errorf("ledger %s: renew %s: lease already closed", r.Shard, r.LeaseID)
	}
	return out, releaseStatusErr(r.Shard, oldLeaseID, oldStatus)
}

func releaseStatusErr(k ShardKey, id string, status int64) error {
	switch status {
	case 0, 2:
		return nil
	case 3:
		return fmt.Errorf("ledger %s: release %s: %w", k, id, ErrLeaseSettled)
	case 4:
		return fmt.Errorf("ledger %s: release %s: %w", k, id, ErrUnknownLease)
	}
	return fmt.Errorf("ledger %s: release %s: unexpected status %d", k, id, status)
}

// Release closes a lease: unused micros go back to the shard's available
// budget, the rest of the lease counts as spent. Idempotent by lease id: a retry
// after a timeout credits nothing twice.
func (l *Ledger) Release(ctx context.Context, k ShardKey, leaseID string, unused int64, now time.Time) (Shard, error) {
	if unused < 0 {
		return Shard{}, fmt.Errorf("ledger %s: release %s: unused %d is negative", k, leaseID, unused)
	}
	status, _, sh, _, err := l.run(ctx, releaseScript, k, leaseID, unused, now.UnixMilli(), l.cfg.AuditMaxLen)
	if err != nil {
		return Shard{}, err
	}
	return sh, releaseStatusErr(k, leaseID, status)
}

// Settled is what a settlement call did.
type Settled struct {
	Count  int64
	Amount int64
	Shard  Shard
}

// Settle settles the shard's leases whose expiry plus grace is before now,
// counting each as wholly spent. fence is the caller's fencing token (the
// reconciler's election revision); 0 means none. A fence older than one the
// shard has seen returns ErrFenced and changes nothing.
func (l *Ledger) Settle(ctx context.Context, k ShardKey, now time.Time, grace time.Duration, fence int64) (Settled, error) {
	status, amount, sh, extra, err := l.run(ctx, settleScript, k, now.UnixMilli(), grace.Milliseconds(), fence, l.cfg.SettleBatch, l.cfg.AuditMaxLen)
	if err != nil {
		return Settled{}, err
	}
	if status == -3 {
		return Settled{}, fmt.Errorf("ledger %s: settle with fence %d (shard has seen %d): %w", k, fence, amount, ErrFenced)
	}
	var n int64
	if len(extra) > 0 {
		n = extra[0]
	}
	return Settled{Count: n, Amount: amount, Shard: sh}, nil
}

// Adjust changes one shard's budget by delta micros (a raise goes to locked; a
// cut comes out of locked, then available) and returns the delta applied: a cut
// larger than what the shard has not handed out is applied only in part.
func (l *Ledger) Adjust(ctx context.Context, k ShardKey, delta int64, now time.Time) (int64, Shard, error) {
	if delta < -MaxBudgetMicros || delta > MaxBudgetMicros {
		return 0, Shard{}, fmt.Errorf("ledger %s: adjust by %d: %w", k, delta, ErrBudgetTooLarge)
	}
	_, applied, sh, _, err := l.run(ctx, adjustScript, k, delta, now.UnixMilli(), MaxBudgetMicros, l.cfg.AuditMaxLen)
	return applied, sh, err
}

// AdjustDay moves an open campaign-day's budget to newBudget, spreading the
// change over its shards, and returns the day's budget afterwards (a cut is
// bounded by what is not yet leased or spent).
func (l *Ledger) AdjustDay(ctx context.Context, campaign, day string, newBudget int64, now time.Time) (int64, error) {
	if newBudget < 0 || newBudget > MaxBudgetMicros {
		return 0, fmt.Errorf("ledger %s/%s: budget %d: %w", campaign, day, newBudget, ErrBudgetTooLarge)
	}
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n == 0 {
		return 0, err
	}
	total, err := l.DayTotals(ctx, campaign, day)
	if err != nil {
		return 0, err
	}
	delta := newBudget - total.Budget
	if delta == 0 {
		return total.Budget, nil
	}
	sign := int64(1)
	if delta < 0 {
		sign, delta = -1, -delta
	}
	budget := total.Budget
	for i, part := range Split(delta, n) {
		if part == 0 {
			continue
		}
		applied, _, err := l.Adjust(ctx, ShardKey{campaign, day, i}, sign*part, now)
		if err != nil {
			return budget, err
		}
		if err := l.rdb.HIncrBy(ctx, daysKey(campaign), day+":budget", applied).Err(); err != nil {
			return budget, fmt.Errorf("ledger %s/%s: day budget: %w", campaign, day, err)
		}
		budget += applied
	}
	return budget, nil
}

// ReadShard returns a shard's balances.
func (l *Ledger) ReadShard(ctx context.Context, k ShardKey) (Shard, error) {
	v, err := l.rdb.HMGet(ctx, k.keys()[0], shardFields...).Result()
	if err != nil {
		return Shard{}, fmt.Errorf("ledger %s: %w", k, err)
	}
	sh, err := parseShard(v)
	if err != nil {
		return Shard{}, fmt.Errorf("ledger %s: %w", k, err)
	}
	return sh, nil
}

// shardFields is the order parseShard expects HMGET's reply in.
var shardFields = []string{"budget", "locked", "available", "leased", "spent", "lost"}

func parseShard(v []any) (Shard, error) {
	if len(v) != len(shardFields) || v[0] == nil {
		return Shard{}, ErrDayNotOpen
	}
	var f [6]int64
	for i := range f {
		s, _ := v[i].(string)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Shard{}, fmt.Errorf("field %s is %q, not an integer", shardFields[i], s)
		}
		f[i] = n
	}
	return Shard{f[0], f[1], f[2], f[3], f[4], f[5]}, nil
}

// DayTotals sums a campaign-day's shards.
func (l *Ledger) DayTotals(ctx context.Context, campaign, day string) (Shard, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil {
		return Shard{}, err
	}
	if n == 0 {
		return Shard{}, fmt.Errorf("ledger %s/%s: %w", campaign, day, ErrDayNotOpen)
	}
	var total Shard
	for i := range n {
		s, err := l.ReadShard(ctx, ShardKey{campaign, day, i})
		if err != nil {
			return Shard{}, err
		}
		total = total.Add(s)
	}
	return total, nil
}
