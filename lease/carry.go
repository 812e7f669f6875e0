package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// carryOutOp and carryInOp name a carry-over's two day ops: "carry-out" on
// the closed day, "carry-from:<day>" on the next.
const (
	carryOutOp = "carry-out"
	carryInOp  = "carry-from:"
)

// CarryOver moves what a closed campaign-day did not hand out (locked plus
// available: nothing leased, nothing spent) onto the next day's budget, and
// returns the micros moved. The day's shards are closed first (no grant can
// land afterwards), and the call waits (returns ErrCarryNotReady) until none
// of the day's leases is outstanding. It spans both days' shards (other
// slots) in steps that are each exactly-once by op id, so a crash or a lost
// reply anywhere is finished by calling again, and the carry is exactly the
// sum the closing cuts took:
//
//  1. every shard of the day is closed, and debts a cut left on shards whose
//     leases were spent are paid from their siblings (PayDebts);
//  2. each shard's remaining budget is taken, once (op "carry-out");
//  3. the amount is the sum of what step 2 recorded, decided once
//     ("<day>:carry");
//  4. the closed day's budget goes down and the next day's goes up by it,
//     each once (day ops "carry-out" and "carry-from:<day>").
func (l *Ledger) CarryOver(ctx context.Context, campaign, day, next string, now time.Time) (int64, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n == 0 {
		return 0, err
	}
	if err := l.CloseDay(ctx, campaign, day, now); err != nil {
		return 0, err
	}
	// Moves left pending land first, or their micros would be on neither
	// shard when step 2 takes what is left.
	if _, err := l.FinishMoves(ctx, campaign, day, n, now); err != nil {
		return 0, err
	}
	shards := make([]Shard, n)
	for i := range n {
		if shards[i], err = l.ReadShard(ctx, ShardKey{campaign, day, i}); err != nil {
			return 0, err
		}
		if shards[i].Leased > 0 {
			return 0, fmt.Errorf("ledger %s/%s: carry over: %d micros still leased: %w", campaign, day, shards[i].Leased, ErrCarryNotReady)
		}
	}
	// A budget change begun on the day must land before the carry takes
	// what is left (the reconciler finishes it on its pass).
	ops, err := l.PendingDayOps(ctx, campaign)
	if err != nil {
		return 0, err
	}
	for _, op := range ops {
		if op.Day == day && op.ID != carryOutOp {
			return 0, fmt.Errorf("ledger %s/%s: carry over: budget change %s unfinished: %w", campaign, day, op.ID, ErrCarryNotReady)
		}
	}
	// A cut's debt that its shard could not take back (its leases were
	// spent) is paid from what siblings kept: carried over, it would fund the
	// next day above the operator's budget.
	if _, err := l.PayDebts(ctx, campaign, day, shards, 0, now); err != nil {
		return 0, err
	}
	var amount int64
	taken := make([]int64, n)
	for i := range n {
		a, err := l.Adjust(ctx, ShardKey{campaign, day, i}, carryOutOp, -MaxBudgetMicros, AdjustTake, now)
		if err != nil {
			return 0, err
		}
		amount -= a.Applied
		taken[i] = a.Applied
	}
	dk := daysKey(campaign)
	if err := l.rdb.HSetNX(ctx, dk, day+":carry", amount).Err(); err != nil {
		return 0, fmt.Errorf("ledger %s/%s: carry over: %w", campaign, day, err)
	}
	if _, _, err := l.beginDayOp(ctx, campaign, day, carryOutOp, -amount, taken); err != nil {
		return 0, err
	}
	if _, _, err := l.dayOp(ctx, "done", campaign, day, carryOutOp, -amount); err != nil {
		return 0, err
	}
	if amount == 0 {
		return 0, nil
	}
	if err := l.carryIn(ctx, campaign, day, next, amount, now); err != nil {
		return 0, err
	}
	return amount, nil
}

// carryIn is step 4's second half: the next day's budget goes up by what
// the closed day carried out, split over its shards, once.
func (l *Ledger) carryIn(ctx context.Context, campaign, day, next string, amount int64, now time.Time) error {
	nn, err := l.DayShards(ctx, campaign, next)
	if err != nil {
		return err
	}
	if nn == 0 {
		return fmt.Errorf("ledger %s/%s: carry over: next day %s is not open yet: %w", campaign, day, next, ErrCarryNotReady)
	}
	op := carryInOp + day
	nextShards := make([]Shard, nn)
	for i := range nn {
		if nextShards[i], err = l.ReadShard(ctx, ShardKey{campaign, next, i}); err != nil {
			return err
		}
	}
	delta, parts, err := l.beginDayOp(ctx, campaign, next, op, amount, SplitChange(amount, nextShards))
	if err != nil {
		return err
	}
	if _, err := l.applyDayOp(ctx, campaign, next, op, delta, parts, AdjustOwe, now); err != nil {
		return fmt.Errorf("carry over %d micros from %s: %w", amount, day, err)
	}
	l.log.Info("carried over a closed day's remaining budget", zap.String("campaign", campaign),
		zap.String("day", day), zap.String("to", next), zap.Int64("micros", amount))
	return nil
}

// CarriedOver returns what a closed day carried over to the next (0 if none).
func (l *Ledger) CarriedOver(ctx context.Context, campaign, day string) (int64, error) {
	v, err := l.rdb.HGet(ctx, daysKey(campaign), day+":carry").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}
