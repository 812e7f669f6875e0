package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

var (
	//go:embed lua/move_out.lua
	luaMoveOut string
	//go:embed lua/move_in.lua
	luaMoveIn string
	//go:embed lua/move_done.lua
	luaMoveDone string

	moveOutScript  = ledgerLibrary.function("move_out")
	moveInScript   = ledgerLibrary.function("move_in")
	moveDoneScript = ledgerLibrary.function("move_done")
)

// Move moves up to amount micros of locked budget from shard from to shard to
// of one campaign-day, in three single-slot steps that survive a crash between
// any two: move_out (recorded as pending on the source), move_in (idempotent
// by move id on the target), move_done. FinishMoves completes what a crashed
// mover left pending. fence is the reconciler's fencing token. It returns the
// micros moved.
func (l *Ledger) Move(ctx context.Context, campaign, day string, from, to int, amount int64, moveID string, fence int64, now time.Time) (int64, error) {
	return l.move(ctx, campaign, day, from, to, amount, moveID, fence, "locked", now)
}

// move is Move taking what mode allows: "locked", or "free" (locked, then
// available, less what the source's own cuts owe).
func (l *Ledger) move(ctx context.Context, campaign, day string, from, to int, amount int64, moveID string, fence int64, mode string, now time.Time) (int64, error) {
	src := ShardKey{campaign, day, from}
	rep, err := l.run(ctx, moveOutScript, src, moveID, amount, to, fence, now.UnixMilli(), l.cfg.AuditMaxLen, mode)
	if err != nil {
		return 0, err
	}
	status, taken := rep.Status, rep.Value
	if status == statusFenced {
		return 0, fmt.Errorf("ledger %s: move %s: %w", src, moveID, ErrFenced)
	}
	if status == statusHeld {
		return 0, nil // held by a budget cut: nothing moved, the next pass moves
	}
	if err := l.finishMove(ctx, src, to, moveID, taken, now); err != nil {
		return 0, err
	}
	return taken, nil
}

func (l *Ledger) finishMove(ctx context.Context, src ShardKey, to int, moveID string, amount int64, now time.Time) error {
	dst := ShardKey{src.Campaign, src.Day, to}
	if amount > 0 {
		if _, err := l.run(ctx, moveInScript, dst, moveID, amount, src.Shard, now.UnixMilli(), l.cfg.AuditMaxLen); err != nil {
			return err
		}
	}
	if err := moveDoneScript.Run(ctx, l.rdb, src.keys(), moveID).Err(); err != nil {
		return fmt.Errorf("ledger %s: move %s done: %w", src, moveID, err)
	}
	return nil
}

// PayDebts pays what cuts left owing on shards that can no longer pay it
// themselves, from what their siblings still hold, and returns the micros
// moved. A cut below what is leased is owed by the shards holding leases, in
// proportion to them, and paid as those leases come back unused; but which
// leases come back is not known at the cut. A shard whose leases were spent
// owes more than it can ever take back (Owed > Leased), while a sibling whose
// lease came back unused keeps more than its own share: left alone, the day
// could still grant that, or carry it over, above the operator's budget
// (model seed 848). Each payment is a move of the sibling's free budget
// (locked, then available, never its own debt) to the debtor, whose move_in
// pays the debt first: the day's budget (its shards' targets) is unchanged,
// and the budget left to grant goes down by the payment. shards are the
// day's shards as just read; fence is the reconciler's (0: none). Moves are
// crash-safe as Move's are (FinishMoves finishes one left pending).
func (l *Ledger) PayDebts(ctx context.Context, campaign, day string, shards []Shard, fence int64, now time.Time) (int64, error) {
	free := make([]int64, len(shards))
	for i, s := range shards {
		free[i] = s.Remaining()
	}
	var paid int64
	for d, s := range shards {
		short := s.Owed - max(s.Leased, 0)
		for src := 0; src < len(shards) && short > 0; src++ {
			if src == d || free[src] <= 0 {
				continue
			}
			id := fmt.Sprintf("debt.%d.%d.%d-%d", fence, now.UnixMilli(), src, d)
			moved, err := l.move(ctx, campaign, day, src, d, min(short, free[src]), id, fence, "free", now)
			if err != nil {
				return paid, err
			}
			free[src] -= moved
			short -= moved
			paid += moved
			if moved > 0 {
				l.log.Info("paid a cut's debt from a sibling shard", zap.String("campaign", campaign), zap.String("day", day),
					zap.Int("from", src), zap.Int("to", d), zap.Int64("micros", moved))
			}
		}
	}
	return paid, nil
}

// RepairMoves makes a campaign-day's moves whole after Redis lost writes on
// some of its shards and not on others (a Cluster master restored from its
// own backup): a move whose target credited it while its source lost the
// record of taking it would leave the micros on both shards, so it is taken
// from the source again, under its own move id (what the source no longer
// holds is owed: Shard.Owed); a move whose source took it while its target
// lost the credit is credited again. Every move is then whole on both
// shards or on neither. fence is the reconciler's. It returns how many moves
// it repaired.
func (l *Ledger) RepairMoves(ctx context.Context, campaign, day string, shards int, fence int64, now time.Time) (int, error) {
	outs, ins, err := l.moveRecords(ctx, campaign, day, shards)
	if err != nil {
		return 0, err
	}
	n := 0
	for id, in := range ins {
		if _, ok := outs[id]; ok || in.peer < 0 || in.peer >= shards {
			continue
		}
		src := ShardKey{campaign, day, in.peer}
		rep, err := l.run(ctx, moveOutScript, src, id, in.amount, in.shard, fence, now.UnixMilli(), l.cfg.AuditMaxLen, "redo")
		if errors.Is(err, ErrDayNotOpen) {
			continue // the source's keys are gone: a lost shard, not a move to repair
		}
		if err != nil {
			return n, err
		}
		status, taken := rep.Status, rep.Value
		if status == statusFenced {
			return n, fmt.Errorf("ledger %s: repair move %s: %w", src, id, ErrFenced)
		}
		if status == statusHeld {
			return n, fmt.Errorf("ledger %s: repair move %s: %w", src, id, ErrShardHeld)
		}
		if err := l.finishMove(ctx, src, in.shard, id, taken, now); err != nil {
			return n, err
		}
		l.log.Warn("took a move again from a shard that lost it while its peer kept the credit", zap.Stringer("shard", src),
			zap.String("move", id), zap.Int("to", in.shard), zap.Int64("micros", in.amount))
		n++
	}
	for id, out := range outs {
		if _, ok := ins[id]; ok || out.amount == 0 || out.peer < 0 || out.peer >= shards {
			continue // whole, or nothing to credit
		}
		if err := l.finishMove(ctx, ShardKey{campaign, day, out.shard}, out.peer, id, out.amount, now); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// RepairDayOps makes a campaign-day's finished budget changes (an
// operator's raise or cut, a carry-over) whole after Redis lost writes on
// some of its shards and not on the day's record: a shard that lost its
// part of a change the day's record counts as done (its ops hash has no
// record of the op) is given that part again, under the op's id, a cut's
// part in full (what the shard no longer holds is owed). Changes still
// pending are FinishDayOps's. It returns how many parts it applied again.
func (l *Ledger) RepairDayOps(ctx context.Context, campaign, day string, shards int, now time.Time) (int, error) {
	fields, err := l.rdb.HGetAll(ctx, daysKey(campaign)).Result()
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: days: %w", campaign, day, err)
	}
	prefix := day + ":op:"
	n := 0
	for field, rec := range fields {
		op, ok := strings.CutPrefix(field, prefix)
		if !ok || !strings.HasPrefix(rec, "done|") {
			continue
		}
		f := strings.SplitN(rec, "|", 3)
		delta, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || len(f) < 3 || f[2] == "" {
			continue // no split recorded: nothing to give again
		}
		for i, enc := range strings.Split(f[2], ",") {
			part, err := strconv.ParseInt(enc, 10, 64)
			if err != nil || i >= shards || (part == 0 && delta >= 0) {
				continue
			}
			k := ShardKey{campaign, day, i}
			had, err := l.rdb.HExists(ctx, k.keys()[6], op).Result()
			if err != nil {
				return n, fmt.Errorf("ledger %s: ops: %w", k, err)
			}
			if had {
				continue
			}
			if _, err := l.Adjust(ctx, k, op, part, AdjustOwe, now); errors.Is(err, ErrDayNotOpen) {
				continue // the shard's keys are gone: a lost shard
			} else if err != nil {
				return n, err
			}
			l.log.Warn("applied again a budget change's part that a shard lost", zap.Stringer("shard", k),
				zap.String("op", op), zap.Int64("micros", part))
			n++
		}
	}
	return n, nil
}

// moveRecord is one half of a move as a shard's moves hash records it.
type moveRecord struct {
	shard, peer int
	amount      int64
}

// moveRecords reads a campaign-day's move records: the sources' (out) and
// the targets' (in), by move id.
func (l *Ledger) moveRecords(ctx context.Context, campaign, day string, shards int) (outs, ins map[string]moveRecord, err error) {
	outs, ins = map[string]moveRecord{}, map[string]moveRecord{}
	for i := range shards {
		k := ShardKey{campaign, day, i}
		m, err := l.rdb.HGetAll(ctx, k.keys()[5]).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("ledger %s: moves: %w", k, err)
		}
		for id, rec := range m {
			f := strings.Split(rec, "|")
			if len(f) < 3 {
				return nil, nil, fmt.Errorf("ledger %s: malformed move %s: %q", k, id, rec)
			}
			amount, err1 := strconv.ParseInt(f[1], 10, 64)
			peer, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				return nil, nil, fmt.Errorf("ledger %s: malformed move %s: %q", k, id, rec)
			}
			switch f[0] {
			case "out":
				outs[id] = moveRecord{shard: i, peer: peer, amount: amount}
			case "in":
				ins[id] = moveRecord{shard: i, peer: peer, amount: amount}
			}
		}
	}
	return outs, ins, nil
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
