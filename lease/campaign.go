package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/redis/go-redis/v9"
)

// MaxBudgetMicros caps a campaign's daily budget at 1e15 micros (one billion
// currency units). Redis scripts compute in Lua doubles, exact below 2^53
// (about 9e15); the cap keeps every ledger sum far inside that.
const MaxBudgetMicros int64 = 1_000_000_000_000_000

// MaxShards caps how many shards a campaign-day is split into.
const MaxShards = 256

// DefaultShards is the shard count of a campaign that does not say.
const DefaultShards = 8

// Campaign states.
const (
	StateActive = "active"
	StatePaused = "paused"
)

// Campaign is a campaign's settings as the ledger's campaign store holds them.
type Campaign struct {
	ID          string `json:"id"`
	DailyMicros int64  `json:"daily_micros"`
	TZ          string `json:"tz"`
	Curve       string `json:"curve"`
	Shards      int    `json:"shards"`
	State       string `json:"state"`
	// CarryOver: when a day closes, its budget not spent (nor leased) moves
	// to the next day, on top of the daily budget.
	CarryOver bool  `json:"carry_over"`
	Version   int64 `json:"version"`

	loc *time.Location // TZ, loaded once by the Ledger that read or stored it
}

// Validate reports what is wrong with c, if anything.
func (c Campaign) Validate() error { return c.validate(time.LoadLocation) }

func (c Campaign) validate(loadLocation func(string) (*time.Location, error)) error {
	if !ValidCampaignID(c.ID) {
		return fmt.Errorf("campaign id %q: want 1 to 128 characters from [A-Za-z0-9_.-]", c.ID)
	}
	if c.DailyMicros < 0 {
		return fmt.Errorf("campaign %s: daily budget %d micros is negative", c.ID, c.DailyMicros)
	}
	if c.DailyMicros > MaxBudgetMicros {
		return fmt.Errorf("campaign %s: %w", c.ID, ErrBudgetTooLarge)
	}
	if _, err := loadLocation(c.TZ); err != nil || c.TZ == "" || c.TZ == "Local" {
		return fmt.Errorf("campaign %s: time zone %q is not an IANA zone such as Europe/Paris", c.ID, c.TZ)
	}
	if !bucket.ValidCurveName(c.Curve) {
		return fmt.Errorf("campaign %s: curve name %q: want [a-z0-9_-]{1,64}", c.ID, c.Curve)
	}
	if c.Shards < 1 || c.Shards > MaxShards {
		return fmt.Errorf("campaign %s: shards %d: want 1 to %d", c.ID, c.Shards, MaxShards)
	}
	if c.State != StateActive && c.State != StatePaused {
		return fmt.Errorf("campaign %s: state %q: want %s or %s", c.ID, c.State, StateActive, StatePaused)
	}
	return nil
}

// Location returns the campaign's time zone.
func (c Campaign) Location() *time.Location {
	if c.loc != nil {
		return c.loc
	}
	loc, err := time.LoadLocation(c.TZ)
	if err != nil {
		return time.UTC // Validate refuses such campaigns before they are stored
	}
	return loc
}

// PutCampaign stores c (validated), bumping its version, and returns the stored
// campaign. Settings of days already open are not touched: see AdjustDay.
func (l *Ledger) PutCampaign(ctx context.Context, c Campaign) (Campaign, error) {
	if err := c.validate(l.location); err != nil {
		return Campaign{}, err
	}
	c.loc, _ = l.location(c.TZ)
	key := campaignKey(c.ID)
	ver, err := l.rdb.HIncrBy(ctx, key, "version", 1).Result()
	if err != nil {
		return Campaign{}, fmt.Errorf("store campaign %s: %w", c.ID, err)
	}
	c.Version = ver
	// Three single-key writes, no MULTI: the settings hash and the id set
	// are in different Redis Cluster slots. The settings go first, so that
	// whoever sees the id or the change record reads them; each write is
	// idempotent, so a caller whose call failed half-way just calls again.
	if err := l.rdb.HSet(ctx, key, "daily", c.DailyMicros, "tz", c.TZ, "curve", c.Curve,
		"shards", c.Shards, "state", c.State, "carry_over", c.CarryOver).Err(); err != nil {
		return Campaign{}, fmt.Errorf("store campaign %s: %w", c.ID, err)
	}
	if err := l.rdb.SAdd(ctx, campaignsKey, c.ID).Err(); err != nil {
		return Campaign{}, fmt.Errorf("store campaign %s: %w", c.ID, err)
	}
	if err := l.rdb.XAdd(ctx, &redis.XAddArgs{Stream: changesKey, MaxLen: changesMaxLen, Approx: true, Values: []any{"id", c.ID}}).Err(); err != nil {
		return Campaign{}, fmt.Errorf("store campaign %s: change record: %w", c.ID, err)
	}
	return c, nil
}

// changesKey is a stream of the ids of campaigns stored, in the order Redis
// took the records (so a reader that has seen a record has seen every
// earlier one): the reconciler follows it instead of re-reading every
// campaign on every pass.
const changesKey = keyPrefix + "campaigns:changes"

// changesMaxLen caps the change stream (approximately). A reader that falls
// further behind re-reads every campaign (see CampaignChanges).
const changesMaxLen = 100_000

// CampaignChanges returns the ids of the campaigns stored after the change
// record after ("" for the start: then only the position is returned, with
// no ids), at most limit of them, and the position to pass next time.
// gap is true when records after "after" may have been trimmed away: the
// caller must re-read every campaign.
func (l *Ledger) CampaignChanges(ctx context.Context, after string, limit int64) (ids []string, next string, gap bool, err error) {
	if after == "" {
		last, err := l.rdb.XRevRangeN(ctx, changesKey, "+", "-", 1).Result()
		if err != nil {
			return nil, "", false, fmt.Errorf("campaign changes: %w", err)
		}
		if len(last) == 0 {
			return nil, "0-0", false, nil
		}
		return nil, last[0].ID, false, nil
	}
	msgs, err := l.rdb.XRangeN(ctx, changesKey, "("+after, "+", limit).Result()
	if err != nil {
		return nil, "", false, fmt.Errorf("campaign changes: %w", err)
	}
	next = after
	for _, m := range msgs {
		if id, ok := m.Values["id"].(string); ok {
			ids = append(ids, id)
		}
		next = m.ID
	}
	if len(msgs) == 0 {
		return nil, next, false, nil
	}
	// A trimmed stream starts after what we had: ask where it starts now.
	first, err := l.rdb.XRangeN(ctx, changesKey, "-", "+", 1).Result()
	if err != nil {
		return nil, "", false, fmt.Errorf("campaign changes: %w", err)
	}
	gap = after != "0-0" && len(first) == 1 && first[0].ID != msgs[0].ID && compareStreamIDs(first[0].ID, after) > 0
	return ids, next, gap, nil
}

// compareStreamIDs orders two stream ids "ms-seq".
func compareStreamIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		return cmp.Compare(x, y)
	}
	x, _ = strconv.ParseUint(as, 10, 64)
	y, _ = strconv.ParseUint(bs, 10, 64)
	return cmp.Compare(x, y)
}

// GetCampaign loads a campaign; an unknown one is an *UnknownCampaignError.
func (l *Ledger) GetCampaign(ctx context.Context, id string) (Campaign, error) {
	if !ValidCampaignID(id) {
		return Campaign{}, &UnknownCampaignError{ID: id}
	}
	m, err := l.rdb.HGetAll(ctx, campaignKey(id)).Result()
	if err != nil {
		return Campaign{}, fmt.Errorf("load campaign %s: %w", id, err)
	}
	return l.parseCampaign(id, m)
}

// parseCampaign reads a campaign from its settings hash.
func (l *Ledger) parseCampaign(id string, m map[string]string) (Campaign, error) {
	if len(m) == 0 || m["daily"] == "" {
		return Campaign{}, &UnknownCampaignError{ID: id}
	}
	c := Campaign{ID: id, TZ: m["tz"], Curve: m["curve"], State: m["state"], CarryOver: m["carry_over"] == "1"}
	var perr error
	parse := func(field string) int64 {
		v, err := strconv.ParseInt(m[field], 10, 64)
		if err != nil && perr == nil {
			perr = fmt.Errorf("campaign %s: field %s=%q: %w", id, field, m[field], err)
		}
		return v
	}
	c.DailyMicros = parse("daily")
	c.Shards = int(parse("shards"))
	c.Version = parse("version")
	if perr != nil {
		return Campaign{}, perr
	}
	if err := c.validate(l.location); err != nil {
		return Campaign{}, fmt.Errorf("stored %w", err)
	}
	c.loc, _ = l.location(c.TZ)
	return c, nil
}

// CampaignIDs returns the ids of every stored campaign, unsorted, in one
// read (SMEMBERS). A daemon asked about many ids it does not know checks
// them against this set instead of reading each one.
func (l *Ledger) CampaignIDs(ctx context.Context) ([]string, error) {
	ids, err := l.rdb.SMembers(ctx, campaignsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("list campaign ids: %w", err)
	}
	return ids, nil
}

// ListCampaigns returns every campaign, sorted by id. The campaigns are read
// in pipelines of 1,000, not one round trip each.
func (l *Ledger) ListCampaigns(ctx context.Context) ([]Campaign, error) {
	ids, err := l.rdb.SMembers(ctx, campaignsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("list campaigns: %w", err)
	}
	slices.Sort(ids)
	out := make([]Campaign, 0, len(ids))
	for chunk := range slices.Chunk(ids, 1000) {
		p := l.rdb.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, len(chunk))
		for i, id := range chunk {
			if ValidCampaignID(id) {
				cmds[i] = p.HGetAll(ctx, campaignKey(id))
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list campaigns: %w", err)
		}
		for i, id := range chunk {
			if cmds[i] == nil {
				continue
			}
			c, err := l.parseCampaign(id, cmds[i].Val())
			var unknown *UnknownCampaignError
			if errors.As(err, &unknown) {
				continue // removed between SMEMBERS and HGETALL
			}
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// SetState pauses or resumes a campaign and returns it with its new version.
func (l *Ledger) SetState(ctx context.Context, id, state string) (Campaign, error) {
	c, err := l.GetCampaign(ctx, id)
	if err != nil {
		return Campaign{}, err
	}
	c.State = state
	return l.PutCampaign(ctx, c)
}

// location loads a time zone once per Ledger: time.LoadLocation reads and
// parses the zone file on every call, and campaigns are re-read every lease
// window.
func (l *Ledger) location(name string) (*time.Location, error) {
	if loc, ok := l.locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	l.locations.Store(name, loc)
	return loc, nil
}
