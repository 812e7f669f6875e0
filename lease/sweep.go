package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// GetCampaigns loads the campaigns ids name, in pipelines of 1,000 (one
// round trip per 1,000, not one each), in the order of ids; the ids of
// campaigns that do not exist (removed, or never stored) are returned in
// gone. A stored campaign that cannot be read is an error.
func (l *Ledger) GetCampaigns(ctx context.Context, ids []string) (found []Campaign, gone []string, err error) {
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		p := l.rdb.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, len(chunk))
		for i, id := range chunk {
			if ValidCampaignID(id) {
				cmds[i] = p.HGetAll(ctx, campaignKey(id))
			}
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, nil, fmt.Errorf("load campaigns: %w", err)
		}
		for i, id := range chunk {
			if cmds[i] == nil {
				gone = append(gone, id)
				continue
			}
			c, err := l.parseCampaign(id, cmds[i].Val())
			var unknown *UnknownCampaignError
			if errors.As(err, &unknown) {
				gone = append(gone, id)
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			found = append(found, c)
		}
	}
	return found, gone, nil
}

// passCursorKey is where the reconciler's full pass records how far it got,
// so that a leader elected after one lost its term mid-pass goes on from
// there instead of starting again.
const passCursorKey = keyPrefix + "reconciler:pass"

// PassCursor is how far the reconciler's current full pass has got: every
// campaign whose id sorts at or before After has had its full look in it.
type PassCursor struct {
	After     string
	Done      bool      // the pass reached the last campaign
	Started   time.Time // when the pass began (its first leader's clock)
	Campaigns int       // campaigns the pass had to look at when it began
	Fence     int64     // the leader that recorded it
}

//go:embed lua/pass_cursor.lua
var luaPassCursor string

var passCursorScript = redis.NewScript(luaPassCursor)

// SavePassCursor records c, unless a leader with a higher fence recorded
// one since (ErrFenced).
func (l *Ledger) SavePassCursor(ctx context.Context, c PassCursor) error {
	done := "0"
	if c.Done {
		done = "1"
	}
	ok, err := passCursorScript.Run(ctx, l.rdb, []string{passCursorKey}, c.Fence, c.After, done, c.Started.UnixMilli(), c.Campaigns).Int()
	if err != nil {
		return fmt.Errorf("reconciler pass cursor: %w", err)
	}
	if ok == 0 {
		return fmt.Errorf("reconciler pass cursor with fence %d: %w", c.Fence, ErrFenced)
	}
	return nil
}

// LoadPassCursor returns the last cursor recorded; ok is false if none is.
func (l *Ledger) LoadPassCursor(ctx context.Context) (c PassCursor, ok bool, err error) {
	m, err := l.rdb.HGetAll(ctx, passCursorKey).Result()
	if err != nil {
		return PassCursor{}, false, fmt.Errorf("reconciler pass cursor: %w", err)
	}
	if len(m) == 0 {
		return PassCursor{}, false, nil
	}
	started, err1 := strconv.ParseInt(m["started"], 10, 64)
	n, err2 := strconv.Atoi(m["campaigns"])
	fence, err3 := strconv.ParseInt(m["fence"], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return PassCursor{}, false, fmt.Errorf("reconciler pass cursor %v: %w", m, err)
	}
	return PassCursor{After: m["after"], Done: m["done"] == "1", Started: time.UnixMilli(started), Campaigns: n, Fence: fence}, true, nil
}

// Survey is what a look at one campaign finds, read in two pipelined round
// trips and without a write (SurveyCampaign): enough for the reconciler to
// tell a campaign with nothing to do (the usual case) from one that needs
// its full look, which costs a settle script per shard.
type Survey struct {
	TodayShards     int  // today's shard count (0: not open)
	YesterdayShards int  // yesterday's (0: never opened, or pruned)
	Reported        bool // yesterday's report is saved
	PendingOps      bool // a budget change is not finished
	// Today's shards, when open and all present.
	Today []Shard
	// Fences: each of today's shards' recorded fencing token.
	Fences []int64
	// Lost: a shard of today is missing although its day is open.
	Lost bool
	// PendingMoves: a move on today's shards is not finished.
	PendingMoves bool
	// Expired: a lease on today's shards expired before the cutoff.
	Expired bool
}

// SurveyCampaign reads what the reconciler's full look needs of a
// campaign's today and yesterday: day markers, yesterday's report, pending
// budget changes, and today's shards with their fences, pending moves and
// leases expired before cutoff.
func (l *Ledger) SurveyCampaign(ctx context.Context, campaign, today, yesterday string, cutoff time.Time) (Survey, error) {
	sv, err := l.SurveyDays(ctx, campaign, today, yesterday)
	if err != nil || sv.TodayShards == 0 {
		return sv, err
	}
	return sv, l.surveyShards(ctx, campaign, today, cutoff, &sv)
}

// SurveyDays is SurveyCampaign's first round trip alone: the day markers,
// yesterday's report and pending budget changes (no shard is read).
func (l *Ledger) SurveyDays(ctx context.Context, campaign, today, yesterday string) (Survey, error) {
	var sv Survey
	p := l.rdb.Pipeline()
	days := p.HMGet(ctx, daysKey(campaign), today, yesterday)
	report := p.Exists(ctx, reportKey(campaign, yesterday))
	ops := p.HLen(ctx, dayOpsKey(campaign))
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return sv, fmt.Errorf("ledger %s: survey: %w", campaign, err)
	}
	counts := days.Val()
	for i, n := range []*int{&sv.TodayShards, &sv.YesterdayShards} {
		if s, ok := counts[i].(string); ok {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 {
				return sv, fmt.Errorf("ledger %s: bad day marker %q", campaign, s)
			}
			*n = v
		}
	}
	sv.Reported, sv.PendingOps = report.Val() == 1, ops.Val() > 0
	return sv, nil
}

// surveyShards reads today's shards for SurveyCampaign.
func (l *Ledger) surveyShards(ctx context.Context, campaign, day string, cutoff time.Time, sv *Survey) error {
	n := sv.TodayShards
	p := l.rdb.Pipeline()
	states := make([]*redis.SliceCmd, n)
	fields := append(slices.Clip(shardFields), "fence")
	moves := make([]*redis.MapStringStringCmd, n)
	expired := make([]*redis.IntCmd, n)
	max := "(" + strconv.FormatInt(cutoff.UnixMilli(), 10)
	for i := range n {
		keys := ShardKey{campaign, day, i}.keys()
		states[i] = p.HMGet(ctx, keys[0], fields...)
		moves[i] = p.HGetAll(ctx, keys[5])
		expired[i] = p.ZCount(ctx, keys[2], "-inf", max)
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("ledger %s/%s: survey: %w", campaign, day, err)
	}
	sv.Today, sv.Fences = make([]Shard, n), make([]int64, n)
	for i := range n {
		v := states[i].Val()
		if len(v) != len(fields) {
			return fmt.Errorf("ledger %s: survey: %d fields read", ShardKey{campaign, day, i}, len(v))
		}
		sh, err := parseShard(v[:len(shardFields)])
		if errors.Is(err, ErrDayNotOpen) {
			sv.Lost = true
			continue
		}
		if err != nil {
			return fmt.Errorf("ledger %s: %w", ShardKey{campaign, day, i}, err)
		}
		sv.Today[i] = sh
		if f, ok := v[len(shardFields)].(string); ok {
			sv.Fences[i], _ = strconv.ParseInt(f, 10, 64)
		}
		for _, rec := range moves[i].Val() {
			sv.PendingMoves = sv.PendingMoves || pendingMove(rec)
		}
		sv.Expired = sv.Expired || expired[i].Val() > 0
	}
	return nil
}

// pendingMove reports whether a moves record is a move's source half whose
// target half may not have happened (PendingMoves's test).
func pendingMove(rec string) bool {
	kind, rest, _ := strings.Cut(rec, "|")
	return kind == "out" && strings.HasSuffix(rest, "|pending") && strings.Count(rest, "|") == 2
}

//go:embed lua/fence.lua
var luaFence string

var fenceScript = redis.NewScript(luaFence)

// FenceShards records fence on a campaign-day's shards (those of shards
// whose recorded token is older), as a settle would, in one pipeline: the
// full pass's look at a shard with nothing to settle fences off a deposed
// leader without a settle script each. ErrFenced: a shard has seen a newer
// token.
func (l *Ledger) FenceShards(ctx context.Context, campaign, day string, shards []int, fence int64) error {
	if len(shards) == 0 || fence <= 0 {
		return nil
	}
	p := l.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(shards))
	for i, s := range shards {
		cmds[i] = fenceScript.EvalSha(ctx, p, []string{ShardKey{campaign, day, s}.keys()[0]}, fence)
	}
	_, _ = p.Exec(ctx) // each reply is looked at below
	for i, c := range cmds {
		v, err := c.Int()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			v, err = fenceScript.Run(ctx, l.rdb, []string{ShardKey{campaign, day, shards[i]}.keys()[0]}, fence).Int()
		}
		k := ShardKey{campaign, day, shards[i]}
		switch {
		case err != nil:
			return fmt.Errorf("ledger %s: fence: %w", k, err)
		case v == -3:
			return fmt.Errorf("ledger %s: fence %d: %w", k, fence, ErrFenced)
		}
	}
	return nil
}
