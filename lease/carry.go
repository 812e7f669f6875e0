package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// CarryOver moves what a closed campaign-day did not hand out (locked plus
// available: nothing leased, nothing spent) onto the next day's budget, and
// returns the micros moved. Call it once the closed day has no outstanding
// lease. It spans two days' shards (different slots), so it runs in steps
// that a crash can interrupt anywhere without minting a micro:
//
//  1. the amount is decided once (HSETNX "<day>:carry" in the day marker);
//  2. the closed day's shards are cut by what they hold (a retry cuts 0);
//  3. a guard is set (HSETNX "<day>:carry_in") and only then the next day
//     is raised by the amount.
//
// A crash between 3's guard and its raise loses the carry (under-delivery),
// never doubles it.
func (l *Ledger) CarryOver(ctx context.Context, campaign, day, next string, now time.Time) (int64, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n == 0 {
		return 0, err
	}
	dk := daysKey(campaign)
	shards := make([]Shard, n)
	var remaining int64
	for i := range n {
		if shards[i], err = l.ReadShard(ctx, ShardKey{campaign, day, i}); err != nil {
			return 0, err
		}
		if shards[i].Leased > 0 {
			return 0, fmt.Errorf("ledger %s/%s: carry over: %d micros still leased", campaign, day, shards[i].Leased)
		}
		remaining += shards[i].Remaining()
	}
	if err := l.rdb.HSetNX(ctx, dk, day+":carry", remaining).Err(); err != nil {
		return 0, fmt.Errorf("ledger %s/%s: carry over: %w", campaign, day, err)
	}
	amount, err := l.rdb.HGet(ctx, dk, day+":carry").Int64()
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: carry over: %w", campaign, day, err)
	}
	for i, s := range shards {
		if s.Remaining() == 0 {
			continue
		}
		applied, _, err := l.Adjust(ctx, ShardKey{campaign, day, i}, -s.Remaining(), now)
		if err != nil {
			return 0, err
		}
		if err := l.rdb.HIncrBy(ctx, dk, day+":budget", applied).Err(); err != nil {
			return 0, fmt.Errorf("ledger %s/%s: day budget: %w", campaign, day, err)
		}
	}
	if amount == 0 {
		return 0, nil
	}
	nn, err := l.DayShards(ctx, campaign, next)
	if err != nil {
		return 0, err
	}
	if nn == 0 {
		return 0, fmt.Errorf("ledger %s/%s: carry over: next day %s is not open yet", campaign, day, next)
	}
	first, err := l.rdb.HSetNX(ctx, dk, day+":carry_in", next).Result()
	if err != nil {
		return 0, fmt.Errorf("ledger %s/%s: carry over: %w", campaign, day, err)
	}
	if !first {
		return amount, nil // already moved
	}
	for i, part := range Split(amount, nn) {
		applied, _, err := l.Adjust(ctx, ShardKey{campaign, next, i}, part, now)
		if err != nil {
			return 0, fmt.Errorf("carry over %d micros from %s: %w", amount, day, err)
		}
		if err := l.rdb.HIncrBy(ctx, dk, next+":budget", applied).Err(); err != nil {
			return 0, fmt.Errorf("ledger %s/%s: day budget: %w", campaign, next, err)
		}
	}
	l.log.Info("carried over a closed day's remaining budget", zap.String("campaign", campaign),
		zap.String("day", day), zap.String("to", next), zap.Int64("micros", amount))
	return amount, nil
}

// CarriedOver returns what a closed day carried over to the next (0 if none).
func (l *Ledger) CarriedOver(ctx context.Context, campaign, day string) (int64, error) {
	v, err := l.rdb.HGet(ctx, daysKey(campaign), day+":carry").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}
