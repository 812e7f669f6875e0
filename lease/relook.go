package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/relook.lua
var luaRelook string

var relookScript = redis.NewScript(luaRelook)

// A day that lost acknowledged writes is looked at again. Freeze marks the
// shard's day (the days hash's "<day>:relook", the freeze's end), and the
// mark stands until the reconciler has looked at the day after that end:
// closed its shards, seen none of its leases outstanding, paid the debts a
// cut left that its shards cannot take back (PayDebts), reported it if it
// was not, and cleared the mark (ClearRelook). The writes lost may be the
// reconciler's own (the close, the moves that paid a cut's debt) on a day
// whose report is kept where the loss did not reach (another slot of a
// Cluster), and what the fleet re-asserts during the freeze can leave new
// debts on a day already reported: without the mark, a reported day is
// never looked at again.

func relookField(day string) string { return day + ":relook" }

// markRelook marks a campaign-day for a relook after until (the later of
// two marks stands).
func (l *Ledger) markRelook(ctx context.Context, campaign, day string, until time.Time) error {
	err := relookScript.Run(ctx, l.rdb, []string{daysKey(campaign)}, "mark", relookField(day), until.UnixMilli()).Err()
	if err != nil {
		return fmt.Errorf("ledger %s/%s: mark for a relook: %w", campaign, day, err)
	}
	return nil
}

// Relook returns the end of the freeze after which a campaign-day must be
// looked at again, or the zero time if it is not marked.
func (l *Ledger) Relook(ctx context.Context, campaign, day string) (time.Time, error) {
	ms, err := l.rdb.HGet(ctx, daysKey(campaign), relookField(day)).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("ledger %s/%s: relook: %w", campaign, day, err)
	}
	return time.UnixMilli(ms), nil
}

// ClearRelook removes a campaign-day's relook mark if it is still until (as
// Relook returned it), and reports whether it did: a freeze since has
// marked the day again, for a later look.
func (l *Ledger) ClearRelook(ctx context.Context, campaign, day string, until time.Time) (bool, error) {
	n, err := relookScript.Run(ctx, l.rdb, []string{daysKey(campaign)}, "clear", relookField(day), until.UnixMilli()).Int64()
	if err != nil {
		return false, fmt.Errorf("ledger %s/%s: clear the relook: %w", campaign, day, err)
	}
	return n == 1, nil
}

// DayShardsRelook is DayShards and Relook in one command: how many shards
// the campaign-day was opened with (0: not completely), and the end of the
// freeze after which it must be looked at again (zero: not marked).
func (l *Ledger) DayShardsRelook(ctx context.Context, campaign, day string) (int, time.Time, error) {
	v, err := l.rdb.HMGet(ctx, daysKey(campaign), day, relookField(day)).Result()
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("ledger %s/%s: day marker: %w", campaign, day, err)
	}
	var n int
	if s, ok := v[0].(string); ok {
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			return 0, time.Time{}, fmt.Errorf("ledger %s/%s: bad day marker %q", campaign, day, s)
		}
	}
	var until time.Time
	if s, ok := v[1].(string); ok {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("ledger %s/%s: bad relook mark %q", campaign, day, s)
		}
		until = time.UnixMilli(ms)
	}
	return n, until, nil
}
