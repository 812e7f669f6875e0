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
//	leased = the sum of the shard's outstanding leases;
//
// and on the day: its budget = its shards' budgets less what cuts still
// owe, plus the moves in flight between them, less what budget changes
// begun and not finished already did to them (each such change is a
// problem: the reconciler finishes it).
//
// It returns the day's totals and the problems found (none when the ledger
// balances). Reads are not one snapshot across shards, but each shard is read
// in one MULTI, so a shard's own equation is checked at one instant.
// CheckDayReport says the same and names the moves in flight.
func (l *Ledger) CheckDay(ctx context.Context, campaign, day string) (Shard, []Problem, error) {
	r, err := l.CheckDayReport(ctx, campaign, day)
	return r.Totals, r.Problems, err
}

// DayReport is what CheckDayReport found on a campaign-day.
type DayReport struct {
	Totals   Shard // its shards' sums
	Problems []Problem
	// Moves are the moves of budget between its shards begun and not
	// finished: counted in flight by the day's equation, not yet in the
	// target shard's budget (Totals.Budget lacks them).
	Moves []MoveInFlight
}

// MoveInFlight is a move of budget between two shards of a day whose first
// step (out of the source) is done and whose last is not: its mover is at
// work (milliseconds), or died and left it to the reconciler, which
// finishes every move it finds pending (FinishMoves) when it looks at the
// day (at least once per sweep period).
type MoveInFlight struct {
	ID     string `json:"id"`
	From   int    `json:"from"`
	To     int    `json:"to"`
	Amount int64  `json:"amount"`
	// Began is when the mover began it, by its clock, as its id says
	// (the reconciler's ids end ".<unix ms>.<from>-<to>"); zero if the id
	// does not say.
	Began time.Time `json:"began,omitzero"`
}

// CheckDayReport is CheckDay, with the moves in flight named.
func (l *Ledger) CheckDayReport(ctx context.Context, campaign, day string) (DayReport, error) {
	var r DayReport
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n == 0 {
		return r, err
	}
	for i := range n {
		sh, problems := l.checkShard(ctx, ShardKey{campaign, day, i})
		r.Totals = r.Totals.Add(sh)
		r.Problems = append(r.Problems, problems...)
	}
	err = l.checkDayBudget(ctx, campaign, day, n, &r)
	return r, err
}

// checkShard reads one shard and returns it with its own equation's problems.
func (l *Ledger) checkShard(ctx context.Context, k ShardKey) (Shard, []Problem) {
	sh, leases, lost, err := l.readShardAndLeases(ctx, k)
	if err != nil {
		return Shard{}, []Problem{{k, err.Error()}}
	}
	var problems []Problem
	if sum := sh.Locked + sh.Available + sh.Leased + sh.Spent; sum != sh.Budget {
		problems = append(problems, Problem{k, fmt.Sprintf(
			"budget %d != locked %d + available %d + leased %d + spent %d = %d (off by %d)",
			sh.Budget, sh.Locked, sh.Available, sh.Leased, sh.Spent, sum, sum-sh.Budget)})
	}
	for name, v := range map[string]int64{"budget": sh.Budget, "locked": sh.Locked,
		"available": sh.Available, "leased": sh.Leased, "spent": sh.Spent, "lost": sh.Lost, "owed": sh.Owed} {
		if v < 0 {
			problems = append(problems, Problem{k, fmt.Sprintf("%s is negative: %d", name, v)})
		}
	}
	if sh.Lost > sh.Spent {
		problems = append(problems, Problem{k, fmt.Sprintf("lost %d exceeds spent %d", sh.Lost, sh.Spent)})
	}
	if lost != "" {
		at, why, _ := strings.Cut(lost, " ")
		ms, _ := strconv.ParseInt(at, 10, 64)
		problems = append(problems, Problem{k, fmt.Sprintf(
			"the ledger lost acknowledged writes (found %s: %s); the shard was frozen and the leases held re-asserted: check Redis's durability (ledger.durability)",
			time.UnixMilli(ms).UTC().Format(time.RFC3339), why)})
	}
	if leases != sh.Leased {
		problems = append(problems, Problem{k, fmt.Sprintf(
			"leased %d != sum of outstanding leases %d", sh.Leased, leases)})
	}
	return sh, problems
}

// checkDayBudget checks the day's equation across its n shards: the day's
// budget is its shards' targets (budget less what cuts still owe), plus
// moves in flight between two shards, less what begun-but-unfinished
// budget changes already did to the shards. It names the moves in r.
func (l *Ledger) checkDayBudget(ctx context.Context, campaign, day string, n int, r *DayReport) error {
	pending, err := l.PendingMoves(ctx, campaign, day, n)
	if err != nil {
		return err
	}
	var inFlight int64
	for _, m := range pending {
		inFlight += m.Amount
		began, _ := moveBegan(m.ID)
		r.Moves = append(r.Moves, MoveInFlight{ID: m.ID, From: m.From.Shard, To: m.To, Amount: m.Amount, Began: began})
	}
	slices.SortFunc(r.Moves, func(a, b MoveInFlight) int { return strings.Compare(a.ID, b.ID) })
	ops, err := l.PendingDayOps(ctx, campaign)
	if err != nil {
		return err
	}
	var unfinished int64
	for _, op := range ops {
		if op.Day != day {
			continue
		}
		for i := range n {
			d, err := l.shardOpDelta(ctx, ShardKey{campaign, day, i}, op.ID)
			if err != nil {
				return err
			}
			unfinished += d
		}
	}
	dayKey := ShardKey{campaign, day, -1}
	dayBudget, err := l.DayBudget(ctx, campaign, day)
	if err != nil {
		r.Problems = append(r.Problems, Problem{dayKey, fmt.Sprintf("day budget record unreadable: %v", err)})
	} else if got := r.Totals.Target() + inFlight - unfinished; got != dayBudget {
		r.Problems = append(r.Problems, Problem{dayKey, fmt.Sprintf(
			"day budget %d != shards' budgets %d - owed %d + in-flight moves %d - unfinished changes %d = %d",
			dayBudget, r.Totals.Budget, r.Totals.Owed, inFlight, unfinished, got)})
	}
	for _, op := range ops {
		if op.Day == day {
			r.Problems = append(r.Problems, Problem{dayKey, fmt.Sprintf(
				"budget change %s (%+d micros) begun and not finished: the reconciler finishes it", op.ID, op.Delta)})
		}
	}
	return nil
}

// moveBegan reads when a move began from its id, where the mover put its
// clock's unix milliseconds before ".<from>-<to>" (the reconciler's
// rebalancing and debt-paying moves do); false if it did not.
func moveBegan(id string) (time.Time, bool) {
	f := strings.Split(id, ".")
	if len(f) < 3 {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(f[len(f)-2], 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// shardOpDelta returns what a budget change did to one shard's target (0 if
// it has not reached the shard).
func (l *Ledger) shardOpDelta(ctx context.Context, k ShardKey, opID string) (int64, error) {
	rec, err := l.rdb.HGet(ctx, k.keys()[6], opID).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger %s: op %s: %w", k, opID, err)
	}
	a, o, ok := strings.Cut(rec, "|")
	applied, err1 := strconv.ParseInt(a, 10, 64)
	owed, err2 := strconv.ParseInt(o, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("ledger %s: malformed op record %q", k, rec)
	}
	return applied - owed, nil
}

func (l *Ledger) readShardAndLeases(ctx context.Context, k ShardKey) (sh Shard, leased int64, lost string, err error) {
	keys := k.keys()
	pipe := l.rdb.TxPipeline()
	st := pipe.HMGet(ctx, keys[0], shardFields...)
	lw := pipe.HGet(ctx, keys[0], "lost_writes")
	ls := pipe.HVals(ctx, keys[1])
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Shard{}, 0, "", fmt.Errorf("read: %w", err)
	}
	if sh, err = parseShard(st.Val()); err != nil {
		return Shard{}, 0, "", err
	}
	lost = lw.Val()
	for _, rec := range ls.Val() {
		amount, _, ok := strings.Cut(rec, "|")
		n, err := strconv.ParseInt(amount, 10, 64)
		if !ok || err != nil {
			return Shard{}, 0, "", fmt.Errorf("malformed lease record %q", rec)
		}
		leased += n
	}
	return sh, leased, lost, nil
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
	return parseLeases(k, m)
}

// LeaseOf returns a shard's outstanding lease id, and whether the shard
// holds it (not granted, or closed already: false).
func (l *Ledger) LeaseOf(ctx context.Context, k ShardKey, id string) (LeaseRecord, bool, error) {
	rec, err := l.rdb.HGet(ctx, k.keys()[1], id).Result()
	if errors.Is(err, redis.Nil) {
		return LeaseRecord{}, false, nil
	}
	if err != nil {
		return LeaseRecord{}, false, fmt.Errorf("ledger %s: lease %s: %w", k, id, err)
	}
	recs, err := parseLeases(k, map[string]string{id: rec})
	if err != nil {
		return LeaseRecord{}, false, err
	}
	return recs[0], true, nil
}

// DayLeases lists the outstanding leases of every shard of a campaign-day,
// in one pipelined round trip (not a transaction: under Cluster each shard
// is its own slot). A day not (completely) opened has none.
func (l *Ledger) DayLeases(ctx context.Context, campaign, day string) ([]LeaseRecord, error) {
	n, err := l.DayShards(ctx, campaign, day)
	if err != nil || n == 0 {
		return nil, err
	}
	cmds := make([]*redis.MapStringStringCmd, n)
	pipe := l.rdb.Pipeline()
	for i := range n {
		cmds[i] = pipe.HGetAll(ctx, ShardKey{Campaign: campaign, Day: day, Shard: i}.keys()[1])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("ledger %s/%s: leases: %w", campaign, day, err)
	}
	var out []LeaseRecord
	for i, cmd := range cmds {
		recs, err := parseLeases(ShardKey{Campaign: campaign, Day: day, Shard: i}, cmd.Val())
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// parseLeases parses a shard's lease hash: lease id -> "amount|holder|expiry_ms".
func parseLeases(k ShardKey, m map[string]string) ([]LeaseRecord, error) {
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
