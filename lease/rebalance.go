package lease

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"
)

var (
	//go:embed lua/move_out.lua
	luaMoveOut string
	//go:embed lua/move_in.lua
	luaMoveIn string
	//go:embed lua/move_done.lua
	luaMoveDone string

	moveOutScript  = script(luaMoveOut)
	moveInScript   = script(luaMoveIn)
	moveDoneScript = script(luaMoveDone)
)

// Move moves up to amount micros of locked budget from shard from to shard to
// of one campaign-day, in three single-slot steps that survive a crash between
// any two: move_out (recorded as pending on the source), move_in (idempotent
// by move id on the target), move_done. FinishMoves completes what a crashed
// mover left pending. fence is the reconciler's fencing token. It returns the
// micros moved.
func (l *Ledger) Move(ctx context.Context, campaign, day string, from, to int, amount int64, moveID string, fence int64, now time.Time) (int64, error) {
	src := ShardKey{campaign, day, from}
	status, taken, _, _, err := l.run(ctx, moveOutScript, src, moveID, amount, to, fence, now.UnixMilli(), l.cfg.AuditMaxLen)
	if err != nil {
		return 0, err
	}
	if status == -3 {
		return 0, fmt.Errorf("ledger %s: move %s: %w", src, moveID, ErrFenced)
	}
	if err := l.finishMove(ctx, src, to, moveID, taken, now); err != nil {
		return 0, err
	}
	return taken, nil
}

func (l *Ledger) finishMove(ctx context.Context, src ShardKey, to int, moveID string, amount int64, now time.Time) error {
	dst := ShardKey{src.Campaign, src.Day, to}
	if amount > 0 {
		if _, _, _, _, err := l.run(ctx, moveInScript, dst, moveID, amount, src.Shard, now.UnixMilli(), l.cfg.AuditMaxLen); err != nil {
			return err
		}
	}
	if err := moveDoneScript.Run(ctx, l.rdb, src.keys(), moveID).Err(); err != nil {
		return fmt.Errorf("ledger %s: move %s done: %w", src, moveID, err)
	}
	return nil
}

// PendingMove is a move whose source half happened and whose target half may
// not have.
type PendingMove struct {
	ID     string
	From   ShardKey
	To     int
	Amount int64
}

// PendingMoves lists a campaign-day's unfinished moves.
func (l *Ledger) PendingMoves(ctx context.Context, campaign, day string, shards int) ([]PendingMove, error) {
	var out []PendingMove
	for i := range shards {
		k := ShardKey{campaign, day, i}
		m, err := l.rdb.HGetAll(ctx, k.keys()[5]).Result()
		if err != nil {
			return nil, fmt.Errorf("ledger %s: moves: %w", k, err)
		}
		for id, rec := range m {
			f := strings.Split(rec, "|")
			if len(f) != 4 || f[0] != "out" || f[3] != "pending" {
				continue
			}
			amount, err1 := strconv.ParseInt(f[1], 10, 64)
			to, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("ledger %s: malformed move %s: %q", k, id, rec)
			}
			out = append(out, PendingMove{ID: id, From: k, To: to, Amount: amount})
		}
	}
	return out, nil
}

// FinishMoves completes every pending move of a campaign-day and returns how
// many it finished.
func (l *Ledger) FinishMoves(ctx context.Context, campaign, day string, shards int, now time.Time) (int, error) {
	pending, err := l.PendingMoves(ctx, campaign, day, shards)
	if err != nil {
		return 0, err
	}
	for _, m := range pending {
		if err := l.finishMove(ctx, m.From, m.To, m.ID, m.Amount, now); err != nil {
			return 0, err
		}
	}
	return len(pending), nil
}
