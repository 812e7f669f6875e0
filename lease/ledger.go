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
//
// It is the only code that knows the ledger's keys and record formats (see
// keys.go): tools read through typed, pipelined calls (DayTotals,
// OpenDayTotals, DayLeases, ReadDemand, CountKeys, KeyCampaign), never
// through a raw client; and the Redis clients of pacerd, pacerctl, the dev
// fleet and the simulator all come from NewClientWith, with one set of
// options (context deadlines honoured, go-redis's retries off, safe reads
// retried).
package lease

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/internal/redisretry"
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
	//go:embed lua/close.lua
	luaClose string
	//go:embed lua/plan.lua
	luaPlan string
	//go:embed lua/dayop.lua
	luaDayOp string
	//go:embed lua/freeze.lua
	luaFreeze string
	//go:embed lua/reassert.lua
	luaReassert string
	//go:embed lua/hold.lua
	luaHold string
	//go:embed lua/reassert_run.lua
	luaReassertRun string
)

// ledgerLibrary holds the scripts that share the prelude, as one Redis
// Functions library (see functions.go).
var ledgerLibrary = newLibrary(luaPrelude, [][2]string{
	{"open", luaOpen}, {"grant", luaGrant}, {"renew", luaRenew}, {"release", luaRelease},
	{"settle", luaSettle}, {"adjust", luaAdjust}, {"close", luaClose}, {"freeze", luaFreeze},
	{"reassert", luaReassert}, {"hold", luaHold}, {"reassert_run", luaReassertRun},
	{"move_out", luaMoveOut}, {"move_in", luaMoveIn}, {"move_done", luaMoveDone},
})

// Scripts are immutable; sharing them across Ledgers only shares their name.
var (
	openScript     = ledgerLibrary.function("open")
	grantScript    = ledgerLibrary.function("grant")
	renewScript    = ledgerLibrary.function("renew")
	releaseScript  = ledgerLibrary.function("release")
	settleScript   = ledgerLibrary.function("settle")
	adjustScript   = ledgerLibrary.function("adjust")
	closeScript    = ledgerLibrary.function("close")
	planScript     = redis.NewScript(luaPlan)
	dayOpScript    = evalScript{redis.NewScript(luaDayOp)}
	freezeScript   = ledgerLibrary.function("freeze")
	reassertScript = ledgerLibrary.function("reassert")
	holdScript     = ledgerLibrary.function("hold")
	reassertRun    = ledgerLibrary.function("reassert_run")
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
	// Durability is the policy every money-changing script runs under.
	Durability Durability
	// PackedCounters has grants, renewals and releases keep their six
	// report counters in one state field, rp, not in r_events ... r_closed
	// (prelude.lua's packed): ~28k fewer Redis instructions a call (7%). Every
	// reader sums both forms, so it is the second step of an upgrade: turn
	// it on once every pacerd, reconciler and exporter of the fleet reads
	// rp (docs/OPERATIONS.md). Off (the zero value): the records are the
	// ones earlier releases write.
	PackedCounters bool
	// Steps, if set, is called between the steps of the ledger's multi-step
	// operations (a day's budget change: after each read and before each
	// apply) with the step's name, on the operation's goroutine. It is for
	// tests that run other fleet operations at each of those points (the
	// model checker, lease's interleaving tests); production leaves it nil.
	Steps func(ctx context.Context, step string)
}

// Ledger is the Redis ledger. It is safe for concurrent use; it holds no state
// of its own besides the client.
type Ledger struct {
	rdb redis.UniversalClient
	log *zap.Logger
	cfg Config

	locations sync.Map // time zone name -> *time.Location
	// cluster: rdb is a Redis Cluster client, so the reconciler's indexes
	// are kept per slot (see index.go).
	cluster bool
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
	_, cluster := rdb.(*redis.ClusterClient)
	// Installed here, before the client is shared: go-redis's AddHook is
	// not safe beside commands in flight (a reconciler created on a
	// running daemon's ledger raced its lease calls).
	rdb.AddHook(commandCounter{})
	return &Ledger{rdb: rdb, log: log.Named("lease"), cfg: cfg, cluster: cluster}
}

// Ping checks that the ledger's Redis answers (a readiness probe; it also
// tells a test when the client's pool has reconnected after a restart).
func (l *Ledger) Ping(ctx context.Context) error {
	if err := l.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ledger: ping: %w", err)
	}
	return nil
}

// ClockOffset measures now's offset to the ledger's Redis TIME (see
// MeasureClockOffset).
func (l *Ledger) ClockOffset(ctx context.Context, now func() time.Time) (ClockOffset, error) {
	return MeasureClockOffset(ctx, l.rdb, now)
}

// CountKeys counts the ledger's keys (pacer:*) on every master, with KEYS:
// for tools that must start from an empty Redis (the simulator), never for
// a production ledger.
func (l *Ledger) CountKeys(ctx context.Context) (int, error) {
	var n atomic.Int64
	count := func(ctx context.Context, c redis.Cmdable) error {
		keys, err := c.Keys(ctx, keyPrefix+"*").Result()
		n.Add(int64(len(keys)))
		return err
	}
	var err error
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return count(ctx, c) })
	} else {
		err = count(ctx, l.rdb)
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: keys: %w", err)
	}
	return int(n.Load()), nil
}

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
	// Owed is the part of a budget cut not applied yet, because the budget
	// was already leased: it is taken from leases' unused micros as they come
	// back, before anything is granted again. The shard's target budget is
	// Budget - Owed.
	Owed int64 `json:"owed"`
	// Seq and Tip are the shard's history: every write raises Seq and moves
	// Tip along a hash chain. Pass them back (GrantRequest.Known, ReleaseKnown)
	// and the ledger tells whether it still has that history (Diverged).
	// Sums of shards (Add) leave them 0.
	Seq int64 `json:"seq"`
	Tip int64 `json:"-"`
	// Diverged: the history the caller passed is not the shard's: Redis lost
	// writes it had acknowledged since the caller's last reply. Stop taking
	// leases from the shard, Freeze it and Reassert the leases held.
	Diverged bool `json:"-"`
	// Closed: the day is over on this shard (ReadShard only).
	Closed bool `json:"closed,omitempty"`
}

// History is where a shard's history stood at a reply.
//
// Granted and Returned are the caller's run's totals on the shard, as
// acknowledged: the micros leased to it and the micros it gave back unused
// (a run is a daemon's holder and boot id, the lease ids' prefix). A shard
// that recorded less than the caller's totals lost writes it acknowledged,
// however long ago (the (Seq, Tip) history keeps only the last 64 writes).
type History struct{ Seq, Tip, Granted, Returned int64 }

// History returns the shard's history as of the reply it came in (without
// a run's totals: the caller keeps those).
func (s Shard) History() History { return History{Seq: s.Seq, Tip: s.Tip} }

// Remaining is what the shard can still grant today: locked plus available.
//
// Budget a cut still owes is taken from it before anything is granted, so it
// does not count.
func (s Shard) Remaining() int64 { return max(s.Locked+s.Available-s.Owed, 0) }

// Unspent is the shard's budget not yet spent: Remaining, plus what is leased
// out and may come back unused when the leases end.
func (s Shard) Unspent() int64 { return max(s.Locked+s.Available+s.Leased-s.Owed, 0) }

// Add returns the field-wise sum of s and o.
func (s Shard) Add(o Shard) Shard {
	return Shard{s.Budget + o.Budget, s.Locked + o.Locked, s.Available + o.Available,
		s.Leased + o.Leased, s.Spent + o.Spent, s.Lost + o.Lost, s.Owed + o.Owed, 0, 0, false, s.Closed || o.Closed}
}

// Target is the budget the shard is to spend: Budget less what a cut still owes.
func (s Shard) Target() int64 { return s.Budget - s.Owed }

func (l *Ledger) retainUntil(day time.Time) int64 {
	return day.Add(l.cfg.Retention).UnixMilli()
}

// scriptReply is a ledger script's common reply, decoded (run): the
// script's status (its header names them, statuses.go), the value it
// answers (what it granted, took, settled or added), the shard's balances
// after the call, and what the script answers beyond them (Extra, in its
// header's order).
type scriptReply struct {
	Status, Value int64
	Shard         Shard
	Extra         []int64
}

// extra is the reply's i-th value beyond the common ones, 0 if it has none.
func (r scriptReply) extra(i int) int64 {
	if i < len(r.Extra) {
		return r.Extra[i]
	}
	return 0
}

// run executes a script on one shard and decodes the common reply
// {status, value, budget, locked, available, leased, spent, lost, owed, seq, tip, diverged, extra...}.
//
// Every ledger script is idempotent (by lease id, move id or op id), so run
// retries one whose reply was lost to a network error with the same
// arguments: the retry returns the first answer and changes nothing. The
// client itself must not retry (NewClient turns go-redis's retries off):
// plain commands are not idempotent.
func (l *Ledger) run(ctx context.Context, s *function, k ShardKey, args ...any) (scriptReply, error) {
	res, err := l.runScript(ctx, s, l.scriptKeys(k), args...)
	var notDurable error
	if errors.Is(err, ErrNotDurable) && res != nil {
		notDurable = fmt.Errorf("ledger %s: %w", k, err)
	} else if err != nil && (retriable(err) || ctx.Err() != nil) {
		return scriptReply{}, fmt.Errorf("ledger %s: %w: %w", k, ErrNoAnswer, err)
	} else if err != nil {
		return scriptReply{}, fmt.Errorf("ledger %s: %w", k, err)
	}
	if len(res) < 12 {
		return scriptReply{}, fmt.Errorf("ledger %s: short reply %v", k, res)
	}
	r := scriptReply{Status: res[0], Value: res[1], Extra: res[12:],
		Shard: Shard{Budget: res[2], Locked: res[3], Available: res[4], Leased: res[5], Spent: res[6], Lost: res[7],
			Owed: res[8], Seq: res[9], Tip: res[10], Diverged: res[11] == 1}}
	if r.Status == statusNoDay {
		return r, fmt.Errorf("ledger %s: %w", k, ErrDayNotOpen)
	}
	return r, notDurable
}

// scriptAttempts is how many times runScript sends an idempotent script whose
// reply was lost.
const scriptAttempts = 3

// runScript runs an idempotent script, retrying on network errors (never on
// an error reply from Redis, which means the script ran and refused).
func (l *Ledger) runScript(ctx context.Context, s ledgerCall, keys []string, args ...any) ([]int64, error) {
	var err error
	for attempt := 1; ; attempt++ {
		var res []int64
		res, err = l.cfg.Durability.run(ctx, l.rdb, s, keys, args...).Int64Slice()
		// A write the replicas did not acknowledge is decoded as usual, so
		// the caller knows what to release, and returned with the error.
		// (Every script writes, even when it finds its work done, so the
		// WAIT of a retry covers the first run's write too.)
		var nd *NotDurableError
		if errors.As(err, &nd) && nd.Int64s() != nil {
			return nd.Int64s(), err
		}
		if err == nil || attempt == scriptAttempts || ctx.Err() != nil || !retriable(err) {
			return res, err
		}
		l.log.Debug("retrying an idempotent ledger script after a lost reply", zap.Strings("keys", keys[:1]), zap.Error(err))
	}
}

// retriable reports whether err may have lost a script's reply (the script
// may or may not have run), as opposed to an answer from Redis.
func retriable(err error) bool { return redisretry.Retriable(err) }

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

// Plan is a campaign-day's plan, decided once in the ledger from the stored
// campaign when the day is first opened; every opener builds the day from it.
type Plan struct {
	Budget int64
	Shards int
	Curve  string
}

// BidsPerShard sizes a small campaign-day's shard count: a day gets at most
// one shard per BidsPerShard bids of budget (and at least one, and at most
// the campaign's Shards), once daemons have reported its bid size. Each shard
// may run one bid ahead of the curve and strands up to a bid at the day's end,
// so the fleet's lead is a bid a shard: at 400 bids a shard, an average hour
// of a shard's plan is about 17 bids and the lead one of them, within the
// rule that no hour takes more than 2x its curve's share (docs/PACING.md).
// Shards are for a hot campaign's ledger calls, and a day of 3,200 bids is
// nowhere near hot: a hot campaign keeps its shards.
const BidsPerShard = 400

// bidField is the campaign's last reported bid size, in its days hash.
const bidField = ":bid"

// DayPlan decides campaign's plan for day (if no opener has yet) from the
// campaign as the store holds it now, and returns it. The plan never changes
// afterwards: later budget changes go through AdjustDay. The plan's shard
// count is the campaign's Shards, or fewer for a budget of few bids (see
// BidsPerShard).
func (l *Ledger) DayPlan(ctx context.Context, campaign, day string) (Plan, error) {
	v, err := planScript.Run(ctx, l.rdb, []string{campaignKey(campaign), daysKey(campaign)}, day, BidsPerShard).Slice()
	if err != nil {
		if strings.Contains(err.Error(), "unknown campaign") {
			return Plan{}, &UnknownCampaignError{ID: campaign}
		}
		return Plan{}, fmt.Errorf("ledger %s/%s: plan: %w", campaign, day, err)
	}
	if len(v) != 3 {
		return Plan{}, fmt.Errorf("ledger %s/%s: plan: malformed reply %v", campaign, day, v)
	}
	var p Plan
	b, _ := v[0].(string)
	n, _ := v[1].(string)
	p.Curve, _ = v[2].(string)
	var err1, err2 error
	p.Budget, err1 = strconv.ParseInt(b, 10, 64)
	p.Shards, err2 = strconv.Atoi(n)
	if err1 != nil || err2 != nil || p.Budget < 0 || p.Budget > MaxBudgetMicros || p.Shards < 1 || p.Shards > MaxShards {
		return Plan{}, fmt.Errorf("ledger %s/%s: plan: malformed %v", campaign, day, v)
	}
	return p, nil
}

// OpenDay opens campaign c's day (its local date, starting at dayStart): the
// day's plan is decided once from the stored campaign (DayPlan; c supplies
// only the id, never a cached budget or shard count), and its budget is split
// evenly over the plan's shards, all of it locked. Idempotent and safe to
// race: every opener builds the same shards from the same plan, shards are
// created only if missing, and the day marker is written after every shard
// exists. It returns the day's shard count.
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
	if !ValidCampaignID(c.ID) {
		return 0, &UnknownCampaignError{ID: c.ID}
	}
	// A day whose keys would already have expired is never opened again:
	// its marker may have been pruned (pruneDays), and its budget may have
	// been spent before its keys went.
	if now.After(dayStart.Add(48*time.Hour + l.cfg.Retention)) {
		return 0, fmt.Errorf("ledger %s/%s: %w", c.ID, day, ErrDayExpired)
	}
	plan, err := l.DayPlan(ctx, c.ID, day)
	if err != nil {
		return 0, err
	}
	if err := l.openShards(ctx, c.ID, day, plan, l.retainUntil(dayStart.Add(48*time.Hour)), now); err != nil {
		return 0, err
	}
	if err := l.pruneDays(ctx, c.ID, day); err != nil {
		l.log.Warn("cannot prune the campaign's old day records; next day's open tries again", zap.String("campaign", c.ID), zap.Error(err))
	}
	l.log.Info("opened campaign-day", zap.String("campaign", c.ID), zap.String("day", day),
		zap.Int64("budget_micros", plan.Budget), zap.Int("shards", plan.Shards))
	return l.DayShards(ctx, c.ID, day)
}

// openShards creates the plan's shards that do not exist yet, each with its
// even part of the plan's budget, then writes the day marker (OpenDay).
func (l *Ledger) openShards(ctx context.Context, campaign, day string, plan Plan, retain int64, now time.Time) error {
	for i, part := range Split(plan.Budget, plan.Shards) {
		k := ShardKey{campaign, day, i}
		if _, err := l.runScript(ctx, openScript, k.keys(), part, now.UnixMilli(), retain, l.cfg.AuditMaxLen); err != nil {
			return fmt.Errorf("ledger %s: open: %w", k, err)
		}
	}
	if err := l.rdb.HSetNX(ctx, daysKey(campaign), day, plan.Shards).Err(); err != nil {
		return fmt.Errorf("ledger %s/%s: day marker: %w", campaign, day, err)
	}
	return nil
}

// PlannedDayShards is DayShards for a budget change: a day whose plan is
// decided but whose shards are not all made yet (its opener died, or lost a
// reply, between the two) is opened first, from that plan, and its shard
// count returned. A day's plan is decided once, from the stored campaign,
// before its shards are made, so a change stored after the plan was decided
// reaches that day only through its shards: skipped because the day did not
// look open, it left the day to open later on the budget from before the
// change (a cut overspent the operator's budget; a raise under-delivered).
// 0: no plan is decided, and the day will open from the stored campaign.
func (l *Ledger) PlannedDayShards(ctx context.Context, campaign, day string, now time.Time) (int, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n > 0 {
		return n, err
	}
	return l.finishPlannedOpen(ctx, campaign, day, now)
}

// finishPlannedOpen opens a day whose plan is decided but whose marker is
// not written (its opener died or lost a reply between the two) and returns
// its shard count; 0 when no plan is decided (the day opens from the stored
// campaign when first used) or the day is too old to open. The day's local
// start is not known here: its shards are kept as long as the latest start
// its date can have (UTC+14) asks, a little longer than needed at worst.
func (l *Ledger) finishPlannedOpen(ctx context.Context, campaign, day string, now time.Time) (int, error) {
	v, err := l.rdb.HGet(ctx, daysKey(campaign), day+":plan").Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: plan: %w", campaign, day, err)
	}
	date, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: plan %q of a day that is not a date", campaign, day, v)
	}
	latestStart := date.Add(14 * time.Hour)
	if now.After(latestStart.Add(48*time.Hour + l.cfg.Retention)) {
		return 0, nil
	}
	plan, err := l.DayPlan(ctx, campaign, day) // decided: this only reads it
	if err != nil {
		return 0, err
	}
	if err := l.openShards(ctx, campaign, day, plan, l.retainUntil(latestStart.Add(48*time.Hour)), now); err != nil {
		return 0, err
	}
	l.log.Info("opened a campaign-day planned but not opened, to apply a budget change to it",
		zap.String("campaign", campaign), zap.String("day", day), zap.Int64("budget_micros", plan.Budget))
	return l.DayShards(ctx, campaign, day)
}

// pruneDays removes the campaign's per-day records (the day marker and its
// ":carry", ":curve", ":exhausted", ":budget"... fields in the days hash) of
// days whose keys have expired: older than the day's retention (48 h after
// its start, plus Retention) and two days' margin. Without it the hash grows
// by a few fields a day for as long as the campaign lives. One HKEYS per
// campaign-day opened; fields that do not start with a date (the bid) stay.
func (l *Ledger) pruneDays(ctx context.Context, campaign, day string) error {
	today, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return nil // not a date: nothing to compare with
	}
	cutoff := today.Add(-(96*time.Hour + l.cfg.Retention)).Format(time.DateOnly)
	fields, err := l.rdb.HKeys(ctx, daysKey(campaign)).Result()
	if err != nil {
		return fmt.Errorf("ledger %s: days: %w", campaign, err)
	}
	var old []string
	for _, f := range fields {
		if len(f) >= len(time.DateOnly) {
			if _, err := time.Parse(time.DateOnly, f[:len(time.DateOnly)]); err == nil && f[:len(time.DateOnly)] < cutoff {
				old = append(old, f)
			}
		}
	}
	if len(old) == 0 {
		return nil
	}
	if err := l.rdb.HDel(ctx, daysKey(campaign), old...).Err(); err != nil {
		return fmt.Errorf("ledger %s: days: %w", campaign, err)
	}
	return nil
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
//
// CatchUpPermille and Unit are how the shard treats a campaign off its plan
// (the shard's budget along the curve). With CatchUpPermille 0, a shard
// behind its plan spreads the deficit pro rata over the rest of the day (and
// dumps it at the end if it is large). With 1000 or more, it releases what
// is due at up to CatchUpPermille/1000 times the plan's pace, until it is back
// on the plan, and never more (no end-of-day dump); its available budget is
// capped at the plan's cap window plus what is behind, at most that multiple
// of the window. Unit, a bid's size in micros, lets the shard make one bid
// available while its spent and available budget stay within one Unit of its
// plan, so a campaign whose cap window is worth less than one bid still
// spends (0: no such advance). Shards is how many shards the campaign-day
// has: with more than one, a new shard, or one that was catching up, takes
// up its one-Unit advance at the catch-up pace, not at once (0: unknown, as
// one).
//
// HourPermille bounds what a shard releases in one hour of the campaign's
// local day: Hour is the hour the call falls in (0 for the day's first,
// counted from its start), HourPPB the curve's share of that hour. In it the
// shard releases, catching up or ahead by its Unit alike, at most
// HourPermille/1000 times the plan's share of the hour, plus one Unit, less
// what it held (available and leased) at its first call in the hour; what
// is beyond waits for the next hour. 0: no bound (as a daemon from before
// it). HourUnit, if set, is the bid the hour's bound allows in place of Unit:
// the campaign's usual largest bid, where Unit may be one outlying SPEND
// (which then waits for an hour with room for it, or for none). HourNoBid
// allows no bid over the hour's share: the hour spends at most HourPermille/
// 1000 times it, whatever the bids (a small campaign's last hour, where the
// issue's bound of 1.5x is exact; a script from before it allows the bid).
type Pace struct {
	Now, Cap        int64
	Unit            int64
	CatchUpPermille int64
	Shards          int64
	Hour, HourPPB   int64
	HourPermille    int64
	HourUnit        int64
	HourNoBid       bool
	// Ahead is the most the shard lets out beyond what its plan has due by
	// Now (spent, leased and available together), by its one-bid advance
	// and its last bids alike: what the fleet may run ahead of its curve,
	// whatever its hosts hold. 0: no such bound (the advance keeps spent
	// and available within a Unit of the plan, with or without it).
	Ahead int64
}

// flag is a script argument's 1 or 0.
func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// maxDayHours is the last hour a local day can have (a day that gains an
// hour at a DST change has 25: 0 to 24).
const maxDayHours = 24

// MaxCatchUp is the largest catch-up multiple (Pace.CatchUpPermille up to
// 1000 x MaxCatchUp): the arithmetic stays exact below 2^53 for budgets up to
// MaxBudgetMicros.
const MaxCatchUp = 8

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
	// Known is the shard's history as of the caller's last reply from it
	// (zero: none). If the shard no longer has it, nothing is granted and
	// the error wraps ErrLedgerDiverged.
	Known History
	// Demand is the holder's recent demand for the campaign, in micros a
	// second (0: not known, and no fair share applies to this call). The
	// shard remembers it for DemandTTL and caps each holder's grant at its
	// demand over the largest live holder's times what is available (never
	// below Pace.Unit), so that hosts that ask as often get budget in
	// proportion to their demand when the shard cannot give everyone what
	// it asks (prelude.lua's fair_cap). It should outlast the holder's
	// visits to the shard: a holder forgotten between visits no longer caps
	// the others.
	Demand    int64
	DemandTTL time.Duration
	// Min, when positive, makes the grant all or nothing below it: a shard
	// that cannot give at least Min micros grants nothing. A sparse host's
	// standing bid asks for the rest of a bid this way: part of a bid serves
	// no SPEND of a bid, and parts spread over several hosts would hold a
	// campaign's last bids where none can be spent.
	Min int64
	// Refunded (Renew only) is what bidders refunded to the holder since it
	// last reported refunds for the campaign-day, in micros: written in the
	// ending lease's release entry of the audit stream for the billing
	// record (pacer-export's refunded column). It moves no money: the
	// release's unused micros already hold what of it was not spent again.
	Refunded int64
}

// MaxDemandTTL bounds GrantRequest.DemandTTL: a campaign-day's shard is
// kept two days.
const MaxDemandTTL = 48 * time.Hour

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
	case r.Pace.Unit < 0 || r.Pace.Unit > MaxBudgetMicros:
		return fmt.Errorf("pace unit %d micros out of range", r.Pace.Unit)
	case r.Pace.CatchUpPermille != 0 && (r.Pace.CatchUpPermille < 1000 || r.Pace.CatchUpPermille > 1000*MaxCatchUp):
		return fmt.Errorf("catch-up %d per mille: want 0 (pro rata) or 1000 to %d", r.Pace.CatchUpPermille, 1000*MaxCatchUp)
	case r.Pace.Shards < 0 || r.Pace.Shards > MaxShards:
		return fmt.Errorf("pace shards %d: want 0 to %d", r.Pace.Shards, MaxShards)
	case r.Pace.HourPermille != 0 && (r.Pace.HourPermille < 1000 || r.Pace.HourPermille > 1000*MaxCatchUp):
		return fmt.Errorf("hour bound %d per mille: want 0 (none) or 1000 to %d", r.Pace.HourPermille, 1000*MaxCatchUp)
	case r.Pace.Hour < 0 || r.Pace.Hour > maxDayHours:
		return fmt.Errorf("pace hour %d: want 0 to %d", r.Pace.Hour, maxDayHours)
	case r.Pace.HourPPB < 0 || r.Pace.HourPPB > bucket.PPB:
		return fmt.Errorf("pace hour share %d ppb: want 0 to %d", r.Pace.HourPPB, int64(bucket.PPB))
	case r.Pace.HourUnit < 0 || r.Pace.HourUnit > MaxBudgetMicros:
		return fmt.Errorf("pace hour unit %d micros out of range", r.Pace.HourUnit)
	case r.Pace.Ahead < 0 || r.Pace.Ahead > MaxBudgetMicros:
		return fmt.Errorf("pace ahead %d micros out of range", r.Pace.Ahead)
	case r.Demand < 0 || r.Demand > MaxBudgetMicros:
		return fmt.Errorf("demand %d micros/s out of range", r.Demand)
	case r.Demand > 0 && (r.DemandTTL < time.Millisecond || r.DemandTTL > MaxDemandTTL):
		return fmt.Errorf("demand ttl %v: want 1ms to %v", r.DemandTTL, MaxDemandTTL)
	case r.Min < 0 || r.Min > r.Want:
		return fmt.Errorf("min %d micros: want 0 to the %d wanted", r.Min, r.Want)
	case r.Refunded < 0 || r.Refunded > MaxBudgetMicros:
		return fmt.Errorf("refunded %d micros out of range", r.Refunded)
	}
	return nil
}

// The statuses of grant.lua (and renew.lua's grant half), as their headers
// list them (TestGrantStatusesMatchTheScripts checks the two agree).
const (
	grantNew      = 0 // granted now
	grantRetried  = 1 // already granted: a retry
	grantClosed   = 2 // the lease id was granted and closed before
	grantDayShut  = 3 // the day is closed: no more grants
	grantFrozen   = 4 // frozen after a loss of state
	grantDiverged = 5 // the caller's known history is not the shard's
	grantHeld     = 6 // held by a budget cut being applied
	grantIDTaken  = 7 // the lease id is another holder's
)

// grantRefusal is the error a grant status that granted nothing wraps
// (nil for the statuses that grant, or retry a grant).
func grantRefusal(status int64) error {
	switch status {
	case grantNew, grantRetried:
		return nil
	case grantClosed:
		return errors.New("lease already closed")
	case grantDayShut:
		return ErrDayClosed
	case grantFrozen:
		return ErrShardFrozen
	case grantDiverged:
		return ErrLedgerDiverged
	case grantHeld:
		return ErrShardHeld
	case grantIDTaken:
		return ErrLeaseIDTaken
	}
	return fmt.Errorf("unexpected grant status %d", status)
}

// grantArgs is a grant's script arguments, in grant.lua's ARGV order (and
// renew.lua's, after the ending lease's id and unused micros): first those
// the script hashes into the shard's history (the first five) or writes as
// their digits, then, in one argument, the numbers it only computes with
// (callNumbers).
func (l *Ledger) grantArgs(r GrantRequest) []any {
	return []any{
		r.LeaseID, r.Holder, r.Want, r.Expiry.UnixMilli(), r.Now.UnixMilli(),
		l.retainUntil(r.DayStart.Add(48 * time.Hour)), l.cfg.AuditMaxLen, r.Known.Seq, r.Known.Tip,
		callNumbers(r.Pace.Now, r.Pace.Cap, r.Grace.Milliseconds(), r.Pace.Unit, r.Pace.CatchUpPermille,
			r.Demand, r.DemandTTL.Milliseconds(), r.Min, r.Pace.Shards,
			r.Pace.Hour, r.Pace.HourPPB, r.Pace.HourPermille, r.Pace.HourUnit, flag(r.Pace.HourNoBid),
			r.Known.Granted, r.Known.Returned, r.Pace.Ahead),
	}
}

// callNumbers is one script argument holding vs as big-endian doubles (Lua's
// struct.unpack '>d…'). Each number a script argument of its own cost the
// script a Lua string and a parse (~1.3k instructions; a grant passed 17
// such): one unpack reads them all. A script reads every number as a
// double, so the value is the same either way: float64(v) rounds to
// nearest, as Lua's parse of v's digits does, and is v exactly below 2^53.
func callNumbers(vs ...int64) string {
	b := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.BigEndian.PutUint64(b[8*i:], math.Float64bits(float64(v)))
	}
	return string(b)
}

// packedArg appends a lease call's last argument, packed (1), when
// Config.PackedCounters is on; off, the call's arguments are as before.
func (l *Ledger) packedArg(args []any) []any {
	if l.cfg.PackedCounters {
		return append(args, 1)
	}
	return args
}

// Grant leases up to Want micros from the shard's available budget, after
// settling the shard's expired leases and releasing budget along the curve.
// Retrying with the same lease id returns the lease already granted.
func (l *Ledger) Grant(ctx context.Context, r GrantRequest) (Grant, error) {
	if err := r.validate(); err != nil {
		return Grant{}, fmt.Errorf("ledger %s: grant: %w", r.Shard, err)
	}
	rep, err := l.run(ctx, grantScript, r.Shard, l.packedArg(l.grantArgs(r))...)
	status, sh := rep.Status, rep.Shard
	if errors.Is(err, ErrNotDurable) {
		return Grant{Granted: rep.Value, Shard: sh}, err // release it: not to be spent
	}
	if err != nil {
		return Grant{}, err
	}
	switch refused := grantRefusal(status); {
	case refused == nil:
		return Grant{Granted: rep.Value, Shard: sh}, nil
	case status == grantDiverged:
		return Grant{Shard: sh}, fmt.Errorf("ledger %s: grant %s: history at seq %d: %w", r.Shard, r.LeaseID, r.Known.Seq, refused)
	case status == grantIDTaken:
		return Grant{Shard: sh}, fmt.Errorf("ledger %s: grant %s for %s: %w", r.Shard, r.LeaseID, r.Holder, refused)
	default:
		return Grant{Shard: sh}, fmt.Errorf("ledger %s: grant %s: %w", r.Shard, r.LeaseID, refused)
	}
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
	args := l.packedArg(append(append([]any{oldLeaseID, unused}, l.grantArgs(r)...), r.Refunded))
	// Status is the release's, Extra[0] the grant's.
	rep, err := l.run(ctx, renewScript, r.Shard, args...)
	out := Grant{Granted: rep.Value, Shard: rep.Shard}
	if errors.Is(err, ErrNotDurable) {
		return out, err // release it: not to be spent
	}
	if err != nil {
		return Grant{}, err
	}
	released := releaseStatusErr(r.Shard, oldLeaseID, rep.Status)
	if len(rep.Extra) == 0 {
		return out, released
	}
	if refused := grantRefusal(rep.Extra[0]); refused != nil {
		return out, errors.Join(fmt.Errorf("ledger %s: renew %s: %w", r.Shard, r.LeaseID, refused), released)
	}
	return out, released
}

func releaseStatusErr(k ShardKey, id string, status int64) error {
	switch status {
	case releaseNow, releaseRetried:
		return nil
	case releaseSettled:
		return fmt.Errorf("ledger %s: release %s: %w", k, id, ErrLeaseSettled)
	case releaseUnknown:
		return fmt.Errorf("ledger %s: release %s: %w", k, id, ErrUnknownLease)
	}
	return fmt.Errorf("ledger %s: release %s: unexpected status %d", k, id, status)
}

// Release closes a lease: unused micros go back to the shard's available
// budget, the rest of the lease counts as spent. Idempotent by lease id: a retry
// after a timeout credits nothing twice.
func (l *Ledger) Release(ctx context.Context, k ShardKey, leaseID string, unused int64, now time.Time) (Shard, error) {
	return l.ReleaseKnown(ctx, k, leaseID, unused, now, History{})
}

// ReleaseKnown is Release that also checks the shard still has the caller's
// known history (the returned Shard's Diverged says).
func (l *Ledger) ReleaseKnown(ctx context.Context, k ShardKey, leaseID string, unused int64, now time.Time, known History) (Shard, error) {
	return l.ReleaseRefunded(ctx, k, leaseID, unused, 0, now, known)
}

// ReleaseRefunded is ReleaseKnown that also records refunded micros in the
// release's audit entry: what bidders refunded to the holder since it last
// reported refunds for the campaign-day (GrantRequest.Refunded says more).
// Written once, with the release: a retry records nothing again.
func (l *Ledger) ReleaseRefunded(ctx context.Context, k ShardKey, leaseID string, unused, refunded int64, now time.Time, known History) (Shard, error) {
	if unused < 0 {
		return Shard{}, fmt.Errorf("ledger %s: release %s: unused %d is negative", k, leaseID, unused)
	}
	if refunded < 0 || refunded > MaxBudgetMicros {
		return Shard{}, fmt.Errorf("ledger %s: release %s: refunded %d micros out of range", k, leaseID, refunded)
	}
	rep, err := l.run(ctx, releaseScript, k, l.packedArg([]any{leaseID, unused, now.UnixMilli(), l.cfg.AuditMaxLen, known.Seq, known.Tip, known.Granted, known.Returned, refunded})...)
	if err != nil {
		return Shard{}, err
	}
	return rep.Shard, releaseStatusErr(k, leaseID, rep.Status)
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
	rep, err := l.run(ctx, settleScript, k, now.UnixMilli(), grace.Milliseconds(), fence, l.cfg.SettleBatch, l.cfg.AuditMaxLen)
	if err != nil {
		return Settled{}, err
	}
	if rep.Status == statusFenced { // Value: the fence the shard has seen
		return Settled{}, fmt.Errorf("ledger %s: settle with fence %d (shard has seen %d): %w", k, fence, rep.Value, ErrFenced)
	}
	return Settled{Count: rep.extra(0), Amount: rep.Value, Shard: rep.Shard}, nil
}

// Adjust modes: how a cut treats budget the shard has already handed out.
const (
	// AdjustOwe applies a cut in full: what the shard cannot give now is owed
	// and taken from leases' unused micros as they come back.
	AdjustOwe = "owe"
	// AdjustTake takes only what the shard holds (locked and available).
	AdjustTake = "take"
)

// Adjusted is what one shard's adjustment did.
type Adjusted struct {
	// Applied moved the shard's budget now.
	Applied int64
	// Owed is what the cut added to the shard's debt (negative: a raise
	// cancelled that much of an earlier cut's debt).
	Owed  int64
	Shard Shard
}

// Adjust changes one shard's budget by delta micros, exactly once per opID: a
// retry with the same opID returns the first result and changes nothing. A
// raise first cancels debt, then goes to locked; a cut comes out of locked,
// then available, and in AdjustOwe mode the rest is owed.
func (l *Ledger) Adjust(ctx context.Context, k ShardKey, opID string, delta int64, mode string, now time.Time) (Adjusted, error) {
	if delta < -MaxBudgetMicros || delta > MaxBudgetMicros {
		return Adjusted{}, fmt.Errorf("ledger %s: adjust by %d: %w", k, delta, ErrBudgetTooLarge)
	}
	if opID == "" || len(opID) > 200 {
		return Adjusted{}, fmt.Errorf("ledger %s: adjust: op id must be 1 to 200 bytes", k)
	}
	if mode != AdjustOwe && mode != AdjustTake {
		return Adjusted{}, fmt.Errorf("ledger %s: adjust: mode %q", k, mode)
	}
	rep, err := l.run(ctx, adjustScript, k, opID, delta, now.UnixMilli(), MaxBudgetMicros, mode, l.cfg.AuditMaxLen)
	if err != nil {
		return Adjusted{}, err
	}
	return Adjusted{Applied: rep.Value, Owed: rep.extra(0), Shard: rep.Shard}, nil
}

// NewOpID returns a fresh operation id for AdjustDayOp.
func NewOpID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// AdjustDay moves an open campaign-day's budget to newBudget under a fresh
// operation id (AdjustDayOp) and returns the day's budget afterwards.
func (l *Ledger) AdjustDay(ctx context.Context, campaign, day string, newBudget int64, now time.Time) (int64, error) {
	return l.AdjustDayOp(ctx, campaign, day, NewOpID(), newBudget, now)
}

// AdjustDayOp moves an open campaign-day's budget to newBudget, exactly once
// per opID, and returns the day's budget afterwards. The delta is decided
// once (from the day's budget when the op begins, recorded as the op's
// intent) and spread over the shards; a cut below what is already leased or
// spent is applied in full: the shards owe the rest and take it from leases
// as they come back. A call that fails half-way is finished by calling again
// with the same opID, or by the reconciler (FinishDayOps).
//
// The bound a cut keeps, under every interleaving of its steps with the
// fleet's grants, renewals, releases, settlements and moves: what the day
// spends is at most max(newBudget, leased + spent when the cut applied).
// A cut holds every shard of the day (no grant, no move out) before it reads
// them, and each shard's hold ends with its part's apply; so between the read
// and the apply a shard's budget left to grant only grows (leases coming
// back) and its part, at most what it had left at the read, is taken whole.
// Only a cut deeper than all the budget left is owed, by the shards holding
// leases, and those can then grant no more than what comes back beyond it.
// Holds last milliseconds (2n+3 ledger calls); grants refused meanwhile wrap
// ErrShardHeld.
func (l *Ledger) AdjustDayOp(ctx context.Context, campaign, day, opID string, newBudget int64, now time.Time) (int64, error) {
	if newBudget < 0 || newBudget > MaxBudgetMicros {
		return 0, fmt.Errorf("ledger %s/%s: budget %d: %w", campaign, day, newBudget, ErrBudgetTooLarge)
	}
	n, err := l.PlannedDayShards(ctx, campaign, day, now)
	if err != nil || n == 0 {
		return 0, err
	}
	// A change begun and not finished (its caller died, or lost a reply and
	// is now retrying under a new id) lands first: the delta below must be
	// from the day's budget with it, or a retried command would apply twice.
	if _, err := l.FinishDayOps(ctx, campaign, now); err != nil {
		return 0, err
	}
	cur, err := l.DayBudget(ctx, campaign, day)
	if err != nil {
		return 0, err
	}
	if _, err := l.readOpenShards(ctx, campaign, day, n); err != nil {
		return 0, err
	}
	l.step(ctx, "adjust: day budget read")
	delta, _, err := l.dayOp(ctx, "intend", campaign, day, opID, newBudget-cur)
	if err != nil {
		return 0, err
	}
	l.step(ctx, "adjust: intent recorded")
	return l.completeDayOp(ctx, campaign, day, opID, delta, n, now)
}

// readOpenShards reads a day's n shards; a closed one fails with
// ErrDayClosed (its remaining budget is carried over or reported: the day's
// budget is final).
func (l *Ledger) readOpenShards(ctx context.Context, campaign, day string, n int) ([]Shard, error) {
	shards := make([]Shard, n)
	for i := range n {
		var err error
		if shards[i], err = l.ReadShard(ctx, ShardKey{campaign, day, i}); err != nil {
			return nil, err
		}
		if shards[i].Closed {
			return nil, fmt.Errorf("ledger %s/%s: adjust: %w", campaign, day, ErrDayClosed)
		}
	}
	return shards, nil
}

// completeDayOp takes a day op from its intent to done: a cut holds the
// day's shards and lands the moves in flight between them (neither shard
// would count their micros); then the shards are read, the split decided
// once (beginDayOp) and applied, each apply ending its shard's hold.
func (l *Ledger) completeDayOp(ctx context.Context, campaign, day, opID string, delta int64, n int, now time.Time) (int64, error) {
	if delta < 0 {
		for i := range n {
			if _, err := l.run(ctx, holdScript, ShardKey{campaign, day, i}, opID); err != nil {
				return 0, fmt.Errorf("ledger %s/%s: day op %s: hold: %w", campaign, day, opID, err)
			}
			l.step(ctx, "adjust: shard held")
		}
		if _, err := l.FinishMoves(ctx, campaign, day, n, now); err != nil {
			return 0, err
		}
	}
	shards, err := l.readOpenShards(ctx, campaign, day, n)
	if errors.Is(err, ErrDayClosed) {
		return 0, errors.Join(err, l.abandonDayOp(ctx, campaign, day, opID, n, now))
	}
	if err != nil {
		return 0, err
	}
	l.step(ctx, "adjust: shards read")
	delta, parts, err := l.beginDayOp(ctx, campaign, day, opID, delta, SplitChange(delta, shards))
	if err != nil {
		return 0, err
	}
	l.step(ctx, "adjust: split decided")
	return l.applyDayOp(ctx, campaign, day, opID, delta, parts, AdjustOwe, now)
}

// abandonDayOp forgets an op that never got past its intent because its day
// closed: a zero adjust on each shard ends the op's holds.
func (l *Ledger) abandonDayOp(ctx context.Context, campaign, day, opID string, n int, now time.Time) error {
	for i := range n {
		if _, err := l.Adjust(ctx, ShardKey{campaign, day, i}, opID, 0, AdjustTake, now); err != nil {
			return err
		}
	}
	_, _, err := l.dayOp(ctx, "abandon", campaign, day, opID, 0)
	return err
}

// step calls Config.Steps, if set, between the steps of a multi-step
// operation.
func (l *Ledger) step(ctx context.Context, name string) {
	if l.cfg.Steps != nil {
		l.cfg.Steps(ctx, name)
	}
}

// SplitChange divides a change of a day's budget over its shards. A cut is
// taken where budget is left to grant (in proportion to it), so that what
// the day can still grant goes down by the whole cut wherever it sits; only
// a cut deeper than all of that is owed, by the shards holding leases (in
// proportion to what they hold), to be taken back as those leases return.
// A raise first cancels what shards owe, then is spread evenly. The parts
// sum exactly to delta.
func SplitChange(delta int64, shards []Shard) []int64 {
	n := len(shards)
	parts := make([]int64, n)
	if n == 0 || delta == 0 {
		return parts
	}
	if delta > 0 {
		left := delta
		for i, s := range shards {
			c := min(left, s.Owed)
			parts[i] += c
			left -= c
		}
		for i, p := range Split(left, n) {
			parts[i] += p
		}
		return parts
	}
	cut := -delta
	rem := make([]int64, n)
	for i, s := range shards {
		rem[i] = max(s.Locked+s.Available, 0)
	}
	taken := spreadBy(min(cut, sum(rem)), rem)
	for i := range parts {
		parts[i] = -taken[i]
	}
	if excess := cut - sum(taken); excess > 0 {
		leased := make([]int64, n)
		for i, s := range shards {
			leased[i] = max(s.Leased, 0)
		}
		owed := Split(excess, n) // nothing leased: a cut below what was spent, owed for ever
		if sum(leased) > 0 {
			owed = spreadBy(excess, leased)
		}
		for i := range parts {
			parts[i] -= owed[i]
		}
	}
	return parts
}

// spreadBy divides total (at most sum(weights), or any total when the
// weights are not all 0) in proportion to weights, each part at most its
// weight where total allows: floor shares, then the rest a micro at a time.
func spreadBy(total int64, weights []int64) []int64 {
	out := make([]int64, len(weights))
	w := sum(weights)
	if total <= 0 || w <= 0 {
		return out
	}
	var given int64
	for i, x := range weights {
		hi, lo := bits.Mul64(uint64(total), uint64(x))
		q, _ := bits.Div64(hi, lo, uint64(w)) // total*x/w <= total: no overflow
		out[i] = int64(q)
		given += out[i]
	}
	for left := total - given; left > 0; {
		moved := false
		for i := range out {
			if left > 0 && (out[i] < weights[i] || total > w) {
				out[i]++
				left--
				moved = true
			}
		}
		if !moved {
			out[0] += left
			break
		}
	}
	return out
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

// applyDayOp applies a begun day op's parts to the day's shards, exactly
// once per shard, and marks the op done.
func (l *Ledger) applyDayOp(ctx context.Context, campaign, day, opID string, delta int64, parts []int64, mode string, now time.Time) (int64, error) {
	for i, part := range parts {
		if part == 0 && delta >= 0 {
			continue // a cut applies every part, 0 too: the apply ends the shard's hold
		}
		if _, err := l.Adjust(ctx, ShardKey{campaign, day, i}, opID, part, mode, now); err != nil {
			return 0, err
		}
		l.step(ctx, "adjust: shard applied")
	}
	_, budget, err := l.dayOp(ctx, "done", campaign, day, opID, delta)
	return budget, err
}

// beginDayOp decides a day op's delta and split once and returns them.
func (l *Ledger) beginDayOp(ctx context.Context, campaign, day, opID string, delta int64, parts []int64) (int64, []int64, error) {
	enc := make([]string, len(parts))
	for i, p := range parts {
		enc[i] = strconv.FormatInt(p, 10)
	}
	res, err := l.runScript(ctx, dayOpScript, []string{daysKey(campaign), dayOpsKey(campaign)}, "begin", day, opID, delta, strings.Join(enc, ","))
	if err != nil {
		return 0, nil, fmt.Errorf("ledger %s/%s: day op %s begin: %w", campaign, day, opID, err)
	}
	if len(res) < 2 {
		return 0, nil, fmt.Errorf("ledger %s/%s: day op %s: malformed reply %v", campaign, day, opID, res)
	}
	return res[0], res[2:], nil
}

// dayOp runs the dayop script's "done": it adds the op's delta to the day's
// budget once and returns the budget.
func (l *Ledger) dayOp(ctx context.Context, action, campaign, day, opID string, delta int64) (decided, budget int64, err error) {
	res, err := l.runScript(ctx, dayOpScript, []string{daysKey(campaign), dayOpsKey(campaign)}, action, day, opID, delta, "")
	if err != nil {
		return 0, 0, fmt.Errorf("ledger %s/%s: day op %s %s: %w", campaign, day, opID, action, err)
	}
	if len(res) < 2 {
		return 0, 0, fmt.Errorf("ledger %s/%s: day op %s: malformed reply %v", campaign, day, opID, res)
	}
	return res[0], res[1], nil
}

// PendingDayOp is a budget change begun on a campaign-day and not finished.
type PendingDayOp struct {
	Day   string
	ID    string
	Delta int64
	Parts []int64 // per shard
	// Intent: the op's delta is decided but its split is not (it stopped
	// before reading its shards); FinishDayOps holds, reads and splits.
	Intent bool
}

// PendingDayOps lists a campaign's unfinished budget changes.
func (l *Ledger) PendingDayOps(ctx context.Context, campaign string) ([]PendingDayOp, error) {
	m, err := l.rdb.HGetAll(ctx, dayOpsKey(campaign)).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger %s: pending day ops: %w", campaign, err)
	}
	out := make([]PendingDayOp, 0, len(m))
	for f, v := range m {
		day, id, ok := strings.Cut(f, "|")
		ds, ps, ok2 := strings.Cut(v, "|")
		d, err := strconv.ParseInt(ds, 10, 64)
		if !ok || !ok2 || err != nil {
			return nil, fmt.Errorf("ledger %s: malformed pending day op %q=%q", campaign, f, v)
		}
		op := PendingDayOp{Day: day, ID: id, Delta: d, Intent: ps == "intent"}
		if op.Intent {
			out = append(out, op)
			continue
		}
		for _, p := range strings.Split(ps, ",") {
			if p == "" {
				continue
			}
			n, err := strconv.ParseInt(p, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ledger %s: malformed pending day op %q=%q", campaign, f, v)
			}
			op.Parts = append(op.Parts, n)
		}
		out = append(out, op)
	}
	slices.SortFunc(out, func(a, b PendingDayOp) int { return strings.Compare(a.Day+a.ID, b.Day+b.ID) })
	return out, nil
}

// FinishDayOps finishes the budget changes that a crashed caller left half
// done (each is exactly-once per shard), and returns how many it finished.
func (l *Ledger) FinishDayOps(ctx context.Context, campaign string, now time.Time) (int, error) {
	ops, err := l.PendingDayOps(ctx, campaign)
	if err != nil || len(ops) == 0 {
		return 0, err
	}
	for _, op := range ops {
		if op.Intent {
			n, err := l.DayShards(ctx, campaign, op.Day)
			if err != nil {
				return 0, err
			}
			if _, err := l.completeDayOp(ctx, campaign, op.Day, op.ID, op.Delta, n, now); err != nil && !errors.Is(err, ErrDayClosed) {
				return 0, err
			}
			continue
		}
		mode := AdjustOwe
		if strings.HasPrefix(op.ID, carryOutOp) {
			mode = AdjustTake
		}
		if _, err := l.applyDayOp(ctx, campaign, op.Day, op.ID, op.Delta, op.Parts, mode, now); err != nil {
			return 0, err
		}
	}
	return len(ops), nil
}

// DayBudget returns a campaign-day's budget: its plan's, plus every finished
// raise, cut and carry-over.
func (l *Ledger) DayBudget(ctx context.Context, campaign, day string) (int64, error) {
	v, err := l.rdb.HGet(ctx, daysKey(campaign), day+":budget").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("ledger %s/%s: %w", campaign, day, ErrDayNotOpen)
	}
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: day budget: %w", campaign, day, err)
	}
	return v, nil
}

// CloseDay closes every shard of a finished campaign-day: no grant or renewal
// succeeds on it afterwards. Idempotent.
func (l *Ledger) CloseDay(ctx context.Context, campaign, day string, now time.Time) error {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n == 0 {
		return err
	}
	for i := range n {
		if _, err := l.run(ctx, closeScript, ShardKey{campaign, day, i}, now.UnixMilli(), l.cfg.AuditMaxLen); err != nil {
			return err
		}
	}
	return nil
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
var shardFields = []string{"budget", "locked", "available", "leased", "spent", "lost", "owed", "seq", "tip", "closed"}

func parseShard(v []any) (Shard, error) {
	if len(v) != len(shardFields) || v[0] == nil {
		return Shard{}, ErrDayNotOpen
	}
	var f [10]int64
	for i := range f {
		s, ok := v[i].(string)
		if !ok && i >= 6 {
			continue // owed, seq, tip, closed: absent until set
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Shard{}, fmt.Errorf("field %s is %q, not an integer", shardFields[i], s)
		}
		f[i] = n
	}
	return Shard{Budget: f[0], Locked: f[1], Available: f[2], Leased: f[3], Spent: f[4], Lost: f[5], Owed: f[6], Seq: f[7], Tip: f[8], Closed: f[9] == 1}, nil
}

// DayTotals sums a campaign-day's shards, read in one pipeline. A day not
// (completely) opened is ErrDayNotOpen.
func (l *Ledger) DayTotals(ctx context.Context, campaign, day string) (Shard, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil {
		return Shard{}, err
	}
	if n == 0 {
		return Shard{}, fmt.Errorf("ledger %s/%s: %w", campaign, day, ErrDayNotOpen)
	}
	shards, err := l.ReadShards(ctx, campaign, day, n)
	if err != nil {
		return Shard{}, err
	}
	var total Shard
	for _, s := range shards {
		total = total.Add(s)
	}
	return total, nil
}

// OpenDayTotals is DayTotals for tools that show a day not yet opened as
// zeros: open is false, and err nil, for such a day.
func (l *Ledger) OpenDayTotals(ctx context.Context, campaign, day string) (total Shard, open bool, err error) {
	total, err = l.DayTotals(ctx, campaign, day)
	if errors.Is(err, ErrDayNotOpen) {
		return Shard{}, false, nil
	}
	return total, err == nil, err
}

// Freeze stops grants on a shard that lost acknowledged writes until until
// (at least: a longer freeze stands), so that the fleet re-asserts the
// leases it holds (Reassert) and every lease granted before the loss that
// nobody re-asserts expires before its budget can be granted again, and
// marks its day for the reconciler to look at again once the freeze has
// ended (Relook), reported or not. Pass until = now + lease window + grace.
func (l *Ledger) Freeze(ctx context.Context, k ShardKey, until, now time.Time, reason string) (Shard, error) {
	rep, err := l.run(ctx, freezeScript, k, until.UnixMilli(), now.UnixMilli(), reason, l.cfg.AuditMaxLen)
	sh := rep.Shard
	if err != nil {
		return sh, err
	}
	return sh, l.markRelook(ctx, k.Campaign, k.Day, until)
}

// ReassertRun re-asserts a daemon run's totals on a shard that lost writes
// (History.Granted and Returned, as the run acknowledged them), after the
// run re-asserted the leases it holds: what the run consumed beyond what the
// shard recorded, granted less returned, was spent by its clients, and is
// counted spent, out of what the shard can still grant (any shortfall is
// owed). It returns the micros added to spent.
func (l *Ledger) ReassertRun(ctx context.Context, k ShardKey, run string, totals History, now time.Time) (int64, Shard, error) {
	if run == "" || totals.Granted < 0 || totals.Returned < 0 || totals.Returned > totals.Granted {
		return 0, Shard{}, fmt.Errorf("ledger %s: reassert run %q totals %d/%d: malformed", k, run, totals.Granted, totals.Returned)
	}
	rep, err := l.run(ctx, reassertRun, k, run, totals.Granted, totals.Returned, now.UnixMilli(), l.cfg.AuditMaxLen)
	return rep.Value, rep.Shard, err
}

// Reasserted is what Reassert found.
type Reasserted int

const (
	// Rerecorded: the ledger had forgotten the lease and records it again.
	Rerecorded Reasserted = iota
	// StillKnown: the ledger knows the lease; nothing changed.
	StillKnown
	// AlreadyClosed: the lease was released or settled (as spent).
	AlreadyClosed
)

// Reassert records again a lease the caller holds and the ledger may have
// forgotten. Its amount comes out of what the shard can still grant; any
// shortfall is owed (Shard.Owed), so the shard's target budget is unchanged.
func (l *Ledger) Reassert(ctx context.Context, k ShardKey, lr LeaseRecord, now time.Time) (Reasserted, Shard, error) {
	if lr.ID == "" || lr.Amount <= 0 || lr.Amount > MaxBudgetMicros {
		return 0, Shard{}, fmt.Errorf("ledger %s: reassert %q of %d micros: malformed", k, lr.ID, lr.Amount)
	}
	rep, err := l.run(ctx, reassertScript, k, lr.ID, lr.Holder, lr.Amount, lr.Expiry.UnixMilli(), now.UnixMilli(), l.cfg.AuditMaxLen)
	status, sh := rep.Status, rep.Shard
	if err != nil {
		return 0, Shard{}, err
	}
	return Reasserted(status), sh, nil
}
