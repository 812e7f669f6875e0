package lease

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Problem is one conservation failure found by Check.
type Problem struct {
	Shard ShardKey `json:"shard"`
	What  string   `json:"what"`
}

func (p Problem) String() string { return p.Shard.String() + ": " + p.What }

// CheckDay verifies conservation on every shard of a campaign-day:
//
//	budget = locked + available + leased + spent, exactly;
//	every field >= 0, lost <= spent;
//	leased = the sum of the shard's outstanding leases.
//
// It returns the day's totals and the problems found (none when the ledger
// balances). Reads are not one snapshot across shards, but each shard is read
// in one MULTI, so a shard's own equation is checked at one instant.
func (l *Ledger) CheckDay(ctx context.Context, campaign, day string) (Shard, []Problem, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil {
		return Shard{}, nil, err
	}
	if n == 0 {
		return Shard{}, nil, nil
	}
	var total Shard
	var problems []Problem
	for i := range n {
		k := ShardKey{campaign, day, i}
		sh, leases, err := l.readShardAndLeases(ctx, k)
		if err != nil {
			problems = append(problems, Problem{k, err.Error()})
			continue
		}
		total = total.Add(sh)
		if sum := sh.Locked + sh.Available + sh.Leased + sh.Spent; sum != sh.Budget {
			problems = append(problems, Problem{k, fmt.Sprintf(
				"budget %d != locked %d + available %d + leased %d + spent %d = %d (off by %d)",
				sh.Budget, sh.Locked, sh.Available, sh.Leased, sh.Spent, sum, sum-sh.Budget)})
		}
		for name, v := range map[string]int64{"budget": sh.Budget, "locked": sh.Locked,
			"available": sh.Available, "leased": sh.Leased, "spent": sh.Spent, "lost": sh.Lost} {
			if v < 0 {
				problems = append(problems, Problem{k, fmt.Sprintf("%s is negative: %d", name, v)})
			}
		}
		if sh.Lost > sh.Spent {
			problems = append(problems, Problem{k, fmt.Sprintf("lost %d exceeds spent %d", sh.Lost, sh.Spent)})
		}
		if leases != sh.Leased {
			problems = append(problems, Problem{k, fmt.Sprintf(
				"leased %d != sum of outstanding leases %d", sh.Leased, leases)})
		}
	}
	// Across shards: the day's budget is in its shards or in flight between
	// two of them (a rebalancing move whose second half has not landed).
	pending, err := l.PendingMoves(ctx, campaign, day, n)
	if err != nil {
		return total, problems, err
	}
	var inFlight int64
	for _, m := range pending {
		inFlight += m.Amount
	}
	dayBudget, err := l.rdb.HGet(ctx, daysKey(campaign), day+":budget").Int64()
	if err != nil {
		problems = append(problems, Problem{ShardKey{campaign, day, -1}, fmt.Sprintf("day budget record unreadable: %v", err)})
	} else if total.Budget+inFlight != dayBudget {
		problems = append(problems, Problem{ShardKey{campaign, day, -1}, fmt.Sprintf(
			"day budget %d != shards' budgets %d + in-flight moves %d", dayBudget, total.Budget, inFlight)})
	}
	return total, problems, nil
}

func (l *Ledger) readShardAndLeases(ctx context.Context, k ShardKey) (Shard, int64, error) {
	keys := k.keys()
	pipe := l.rdb.TxPipeline()
	st := pipe.HMGet(ctx, keys[0], shardFields...)
	ls := pipe.HVals(ctx, keys[1])
	if _, err := pipe.Exec(ctx); err != nil {
		return Shard{}, 0, fmt.Errorf("read: %w", err)
	}
	sh, err := parseShard(st.Val())
	if err != nil {
		return Shard{}, 0, err
	}
	var leased int64
	for _, rec := range ls.Val() {
		amount, _, ok := strings.Cut(rec, "|")
		n, err := strconv.ParseInt(amount, 10, 64)
		if !ok || err != nil {
			return Shard{}, 0, fmt.Errorf("malformed lease record %q", rec)
		}
		leased += n
	}
	return sh, leased, nil
}

// OpenDays lists the days of a campaign that have been opened, oldest first.
func (l *Ledger) OpenDays(ctx context.Context, campaign string) ([]string, error) {
	days, err := l.rdb.HKeys(ctx, daysKey(campaign)).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger %s: days: %w", campaign, err)
	}
	days = slices.DeleteFunc(days, func(d string) bool { return strings.Contains(d, ":") })
	slices.Sort(days)
	return days, nil
}

// LeaseRecord is one outstanding lease.
type LeaseRecord struct {
	ID     string    `json:"id"`
	Amount int64     `json:"amount"`
	Holder string    `json:"holder"`
	Expiry time.Time `json:"expiry"`
}

// Leases lists a shard's outstanding leases.
func (l *Ledger) Leases(ctx context.Context, k ShardKey) ([]LeaseRecord, error) {
	m, err := l.rdb.HGetAll(ctx, k.keys()[1]).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger %s: leases: %w", k, err)
	}
	out := make([]LeaseRecord, 0, len(m))
	for id, rec := range m {
		f := strings.Split(rec, "|")
		if len(f) != 3 {
			return nil, fmt.Errorf("ledger %s: malformed lease record %q", k, rec)
		}
		amount, err1 := strconv.ParseInt(f[0], 10, 64)
		expiry, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("ledger %s: malformed lease record %q", k, rec)
		}
		out = append(out, LeaseRecord{ID: id, Amount: amount, Holder: f[1], Expiry: time.UnixMilli(expiry)})
	}
	slices.SortFunc(out, func(a, b LeaseRecord) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
