package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// RepairCarry makes whole a carry-over that a loss of acknowledged writes
// split, and returns the micros the closed day carries (0: no carry begun).
// A carry spans the campaign's days record ({c}: the day ops, "<day>:carry")
// and every shard of both days (each its own slot); on a Cluster each master
// comes back from its own copy, so the loss can undo some of its steps and
// keep others: a closed-day shard that forgot its take while the next day
// kept the credit (the micros on both days), a next-day shard that forgot
// its credit, a days record that forgot both days' changes.
//
// The rule, once the day is closed again and none of its leases is
// outstanding (the relook): a carry that any slot shows begun is finished,
// and the shards decide its amount. Every closed-day shard gives what it
// holds, once (op "carry-out": the take a shard kept stands, one that forgot
// it takes again); the next day's shards are credited exactly that sum (a
// shard that forgot its credit gets what the others lack; a difference left,
// up or down, is one "carry-fix" adjustment, owed if it cuts below what is
// leased); and the days record's two changes and "<day>:carry" are set to
// that sum. So each day's budget is its shards' again and the carry creates
// no micro: the next day is never funded above what the closed day gave.
func (l *Ledger) RepairCarry(ctx context.Context, campaign, day, next string, now time.Time) (int64, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n == 0 {
		return 0, err
	}
	nn, err := l.DayShards(ctx, campaign, next)
	if err != nil {
		return 0, err
	}
	in, credited, err := l.opApplied(ctx, campaign, next, nn, carryInOp+day)
	if err != nil {
		return 0, err
	}
	_, taken, err := l.opApplied(ctx, campaign, day, n, carryOutOp)
	if err != nil {
		return 0, err
	}
	recorded, err := l.rdb.HExists(ctx, daysKey(campaign), day+":carry").Result()
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: repair carry: %w", campaign, day, err)
	}
	if !recorded && !slices.Contains(taken, true) && !slices.Contains(credited, true) {
		return 0, nil // no carry begun
	}
	// A restored shard may have come back open: closed again before it
	// gives what it holds (what it has leased out stays with its leases).
	if err := l.CloseDay(ctx, campaign, day, now); err != nil {
		return 0, err
	}
	var amount int64
	parts := make([]int64, n)
	for i := range n {
		a, err := l.Adjust(ctx, ShardKey{campaign, day, i}, carryOutOp, -MaxBudgetMicros, AdjustTake, now)
		if err != nil {
			return 0, err
		}
		amount -= a.Applied
		parts[i] = a.Applied
	}
	if err := l.repairDayOp(ctx, campaign, day, carryOutOp, -amount, parts); err != nil {
		return 0, err
	}
	if err := l.rdb.HSet(ctx, daysKey(campaign), day+":carry", amount).Err(); err != nil {
		return 0, fmt.Errorf("ledger %s/%s: repair carry: %w", campaign, day, err)
	}
	if nn == 0 {
		if amount == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("ledger %s/%s: repair carry: next day %s is not open: %w", campaign, day, next, ErrCarryNotReady)
	}
	if parts, err = l.creditCarry(ctx, campaign, day, next, amount, in, credited, now); err != nil {
		return 0, err
	}
	if err := l.repairDayOp(ctx, campaign, next, carryInOp+day, amount, parts); err != nil {
		return 0, err
	}
	return amount, nil
}

// creditCarry credits the next day's shards with amount in all (in: what
// each shard credited, if credited says it did) and returns each shard's
// part.
func (l *Ledger) creditCarry(ctx context.Context, campaign, day, next string, amount int64, in []int64, credited []bool, now time.Time) ([]int64, error) {
	parts := slices.Clone(in)
	var got int64
	var missing []int
	var lacking []Shard
	for j := range parts {
		if credited[j] {
			got += parts[j]
			continue
		}
		sh, err := l.ReadShard(ctx, ShardKey{campaign, next, j})
		if err != nil {
			return nil, err
		}
		missing, lacking = append(missing, j), append(lacking, sh)
	}
	diff := amount - got
	if diff > 0 && len(missing) > 0 {
		for x, p := range SplitChange(diff, lacking) {
			a, err := l.Adjust(ctx, ShardKey{campaign, next, missing[x]}, carryInOp+day, p, AdjustOwe, now)
			if err != nil {
				return nil, err
			}
			parts[missing[x]] = a.Applied - a.Owed
			diff -= a.Applied - a.Owed
		}
	}
	if diff != 0 {
		// The op id names what it corrects, so a retry finds it applied.
		op := fmt.Sprintf("carry-fix:%s:%d>%d", day, got, amount)
		a, err := l.Adjust(ctx, ShardKey{campaign, next, 0}, op, diff, AdjustOwe, now)
		if err != nil {
			return nil, err
		}
		parts[0] += a.Applied - a.Owed
		l.log.Warn("corrected a carry-over's credit that a loss of writes split", zap.String("campaign", campaign),
			zap.String("day", day), zap.String("to", next), zap.Int64("credited", got), zap.Int64("carried", amount))
	}
	return parts, nil
}

// opApplied reads, for each of a day's n shards, whether op is applied there
// and the change it made to the day (its applied less owed: a raise that
// cancelled debt, or a cut the shard owes, counts whole).
func (l *Ledger) opApplied(ctx context.Context, campaign, day string, n int, op string) ([]int64, []bool, error) {
	amounts, applied := make([]int64, n), make([]bool, n)
	for i := range n {
		k := ShardKey{campaign, day, i}
		rec, err := l.rdb.HGet(ctx, k.keys()[6], op).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("ledger %s: op %s: %w", k, op, err)
		}
		a, o, _ := strings.Cut(rec, "|")
		av, err1 := strconv.ParseInt(a, 10, 64)
		ov, err2 := strconv.ParseInt(o, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("ledger %s: malformed op record %s=%q", k, op, rec)
		}
		amounts[i], applied[i] = av-ov, true
	}
	return amounts, applied, nil
}

// repairDayOp makes the days record's change op to a day's budget want:
// begun and done if the loss undid it, and a "fix" change for the
// difference if it was decided with another delta.
func (l *Ledger) repairDayOp(ctx context.Context, campaign, day, op string, want int64, parts []int64) error {
	if _, _, err := l.beginDayOp(ctx, campaign, day, op, want, parts); err != nil {
		return err
	}
	got, _, err := l.dayOp(ctx, "done", campaign, day, op, want)
	if err != nil || got == want {
		return err
	}
	fix := fmt.Sprintf("%s:fix:%d>%d", op, got, want)
	if _, _, err := l.beginDayOp(ctx, campaign, day, fix, want-got, make([]int64, len(parts))); err != nil {
		return err
	}
	_, _, err = l.dayOp(ctx, "done", campaign, day, fix, want-got)
	return err
}
