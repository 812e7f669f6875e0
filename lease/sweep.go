package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
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

// Survey is what a look at one campaign finds (SurveyCampaigns): enough
// for the reconciler to tell a campaign with nothing to do (the usual case)
// from one that needs its full look, which costs a settle script per shard.
type Survey struct {
	TodayShards     int  // today's shard count (0: not open)
	YesterdayShards int  // yesterday's (0: never opened, or pruned)
	Reported        bool // yesterday's report is saved
	Relook          bool // yesterday lost writes: look at it again, reported or not (Ledger.Relook)
	TodayRelook     bool // today lost writes: make its moves whole (Ledger.RepairMoves)
	PendingOps      bool // a budget change is not finished
	// Today's shards, when open and all present.
	Today []Shard
	// Lost: a shard of today is missing although its day is open.
	Lost bool
	// PendingMoves: a move on today's shards is not finished.
	PendingMoves bool
	// Expired: a lease on today's shards expired before the cutoff.
	Expired bool
	// Err: the campaign's keys could not be read as a ledger's (the other
	// campaigns of the call are surveyed all the same).
	Err error
}

// SurveyRequest names the campaign-days SurveyCampaigns looks at.
type SurveyRequest struct {
	Campaign, Today, Yesterday string
	Cutoff                     time.Time // a lease expired before it is Survey.Expired
}

//go:embed lua/survey.lua
var luaSurvey string

var surveyScript = redis.NewScript(luaSurvey)

// SurveyCampaigns surveys many campaigns in two pipelined round trips
// whatever their number: first every campaign's day markers, yesterday's
// report, both days' relook marks and pending budget changes, then one survey script on each of
// today's shards (its state, pending moves and leases expired before the
// cutoff), which also records fence there, as a settle would (fence 0: no
// election, nothing recorded). So a new leader's full pass costs 3 commands
// a campaign and one a shard, and its fence writes share an fsync per
// round trip. A shard that saw a newer fence is ErrFenced for the whole
// call; a campaign whose keys do not parse has its Survey.Err.
func (l *Ledger) SurveyCampaigns(ctx context.Context, reqs []SurveyRequest, fence int64) ([]Survey, error) {
	svs := make([]Survey, len(reqs))
	if len(reqs) == 0 {
		return svs, nil
	}
	if err := l.surveyDays(ctx, reqs, svs); err != nil {
		return nil, err
	}
	return svs, l.surveyShards(ctx, reqs, svs, fence)
}

// SurveyDays is SurveyCampaigns's first round trip for one campaign: the
// day markers, yesterday's report, both days' relook marks and pending
// budget changes (no shard is read).
func (l *Ledger) SurveyDays(ctx context.Context, campaign, today, yesterday string) (Survey, error) {
	svs := make([]Survey, 1)
	if err := l.surveyDays(ctx, []SurveyRequest{{Campaign: campaign, Today: today, Yesterday: yesterday}}, svs); err != nil {
		return Survey{}, err
	}
	return svs[0], svs[0].Err
}

// surveyDays reads the campaign-level keys of reqs into svs, in one
// pipeline.
func (l *Ledger) surveyDays(ctx context.Context, reqs []SurveyRequest, svs []Survey) error {
	p := l.rdb.Pipeline()
	days := make([]*redis.SliceCmd, len(reqs))
	reports := make([]*redis.IntCmd, len(reqs))
	ops := make([]*redis.IntCmd, len(reqs))
	for i, q := range reqs {
		days[i] = p.HMGet(ctx, daysKey(q.Campaign), q.Today, q.Yesterday, relookField(q.Yesterday), relookField(q.Today))
		reports[i] = p.Exists(ctx, reportKey(q.Campaign, q.Yesterday))
		ops[i] = p.HLen(ctx, dayOpsKey(q.Campaign))
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("ledger %s…: survey: %w", reqs[0].Campaign, err)
	}
	for i, q := range reqs {
		sv := &svs[i]
		counts := days[i].Val()
		for j, n := range []*int{&sv.TodayShards, &sv.YesterdayShards} {
			if s, ok := counts[j].(string); ok {
				v, err := strconv.Atoi(s)
				if err != nil || v < 1 {
					sv.Err = fmt.Errorf("ledger %s: bad day marker %q", q.Campaign, s)
				}
				*n = v
			}
		}
		if sv.Err != nil {
			sv.TodayShards, sv.YesterdayShards = 0, 0
		}
		_, sv.Relook = counts[2].(string)
		_, sv.TodayRelook = counts[3].(string)
		sv.Reported, sv.PendingOps = reports[i].Val() == 1, ops[i].Val() > 0
	}
	return nil
}

// surveyShards runs the survey script on every shard of each campaign's
// today in reqs (those svs found open), in one pipeline, retried once
// after loading the script if Redis did not have it.
func (l *Ledger) surveyShards(ctx context.Context, reqs []SurveyRequest, svs []Survey, fence int64) error {
	cmds, err := l.runSurveys(ctx, reqs, svs, fence)
	for _, c := range cmds {
		if c != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			if err := surveyScript.Load(ctx, l.rdb).Err(); err != nil {
				return fmt.Errorf("ledger: load the survey script: %w", err)
			}
			cmds, err = l.runSurveys(ctx, reqs, svs, fence)
			break
		}
	}
	if err != nil {
		return err
	}
	for i, q := range reqs {
		n := svs[i].TodayShards
		if n == 0 || svs[i].Err != nil {
			continue
		}
		svs[i].Today = make([]Shard, n)
		for s := range n {
			k := ShardKey{q.Campaign, q.Today, s}
			if err := surveyShard(cmds[0], k, fence, &svs[i], s); errors.Is(err, ErrFenced) {
				return err
			} else if err != nil {
				svs[i].Err = err
			}
			cmds = cmds[1:]
		}
	}
	return nil
}

// runSurveys sends the survey scripts of surveyShards: one per shard of
// each open today, in order.
func (l *Ledger) runSurveys(ctx context.Context, reqs []SurveyRequest, svs []Survey, fence int64) ([]*redis.Cmd, error) {
	p := l.rdb.Pipeline()
	var cmds []*redis.Cmd
	for i, q := range reqs {
		if svs[i].Err != nil {
			continue
		}
		cutoff := q.Cutoff.UnixMilli()
		for s := range svs[i].TodayShards {
			t := ShardKey{q.Campaign, q.Today, s}.tag()
			cmds = append(cmds, surveyScript.EvalSha(ctx, p, []string{t + "state", t + "moves", t + "exp"}, fence, cutoff))
		}
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, fmt.Errorf("ledger %s…: survey: %w", reqs[0].Campaign, err)
	}
	return cmds, nil
}

// surveyShard reads shard s's survey reply c into sv.
func surveyShard(c *redis.Cmd, k ShardKey, fence int64, sv *Survey, s int) error {
	v, err := c.Slice()
	if err != nil {
		return fmt.Errorf("ledger %s: survey: %w", k, err)
	}
	if len(v) != 4 {
		return fmt.Errorf("ledger %s: survey: %d values", k, len(v))
	}
	status, _ := v[0].(int64)
	expired, _ := v[1].(int64)
	moves, _ := v[2].([]any)
	fields, _ := v[3].([]any)
	switch {
	case status == statusFenced:
		return fmt.Errorf("ledger %s: fence %d: %w", k, fence, ErrFenced)
	case status == statusNoDay:
		sv.Lost = true
		return nil
	case len(fields) != len(shardFields)+1:
		return fmt.Errorf("ledger %s: survey: %d fields read", k, len(fields))
	}
	sh, err := parseShard(fields[:len(shardFields)])
	if err != nil {
		return fmt.Errorf("ledger %s: %w", k, err)
	}
	sv.Today[s] = sh
	for _, rec := range moves {
		r, _ := rec.(string)
		sv.PendingMoves = sv.PendingMoves || pendingMove(r)
	}
	sv.Expired = sv.Expired || expired > 0
	return nil
}

// pendingMove reports whether a moves record is a move's source half whose
// target half may not have happened (PendingMoves's test).
func pendingMove(rec string) bool {
	kind, rest, _ := strings.Cut(rec, "|")
	return kind == "out" && strings.HasSuffix(rest, "|pending") && strings.Count(rest, "|") == 2
}
