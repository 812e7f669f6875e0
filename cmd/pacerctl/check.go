package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pacer/pacer/lease"
)

// defaultStaleAfter is how old a move between two shards of a day may be
// before check fails on it: two of the reconciler's sweep periods (5 min by
// default), within which an elected reconciler finishes every move a dead
// mover left (a live mover finishes its own in milliseconds).
const defaultStaleAfter = 10 * time.Minute

// dayCheck is one campaign-day's result, for check --json.
type dayCheck struct {
	Campaign string          `json:"campaign"`
	Day      string          `json:"day"`
	OK       bool            `json:"ok"`
	Totals   lease.Shard     `json:"totals"`
	Problems []lease.Problem `json:"problems,omitempty"`
	// Moves are the moves of budget between the day's shards begun and not
	// finished: the day's budget counts them, its shards' totals do not.
	Moves []lease.MoveInFlight `json:"moves,omitempty"`
}

// check verifies conservation on every open day of one campaign or of all:
// budget = locked + available + leased + spent, on every shard, and the
// day's budget across them. It prints one line per day, a line per move
// still in flight between two of its shards, and fails (exit status 1) if
// any day is off or a move is older than --stale-after. With --etcd it also
// fails on a Redis master behind the watermark recorded in etcd
// (checkWatermarks).
func (a *app) check(ctx context.Context, args []string) error {
	fs := newFlagSet("check")
	staleAfter := fs.Duration("stale-after", defaultStaleAfter, "fail on a move between shards begun longer ago than this")
	sqlDSN := fs.String("sql", a.getenvOr("PACER_SQL"), "compare every shard's run totals with PostgreSQL's copy (pacer-export's DSN)")
	pos, err := a.parseArgs(fs, args, "[<id>]")
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("check: want at most one campaign id, got %d arguments", len(pos))
	}
	l, err := a.getLedger()
	if err != nil {
		return err
	}
	durable, err := a.checkDurability(ctx)
	if err != nil {
		return err
	}
	ids, err := a.checkIDs(ctx, l, pos)
	if err != nil {
		return err
	}
	behind, sqlBehind, err := a.checkBehind(ctx, l, ids, len(pos) == 1, *sqlDSN)
	if err != nil {
		return err
	}
	var results []dayCheck
	problems := 0
	for _, id := range ids {
		days, err := l.OpenDays(ctx, id)
		if err != nil {
			return err
		}
		for _, day := range days {
			rep, err := l.CheckDayReport(ctx, id, day)
			if err != nil {
				return err
			}
			r := dayCheck{Campaign: id, Day: day, Totals: rep.Totals, Problems: rep.Problems, Moves: rep.Moves}
			r.Problems = append(r.Problems, a.staleMoves(id, day, rep.Moves, *staleAfter)...)
			r.OK = len(r.Problems) == 0
			results = append(results, r)
			problems += len(r.Problems)
			if !a.json {
				a.printDayCheck(r)
			}
		}
	}
	if a.json {
		if results == nil {
			results = []dayCheck{}
		}
		if err := a.printJSON(results); err != nil {
			return err
		}
	}
	if problems > 0 {
		fmt.Fprintf(a.stderr, "pacerctl: check: %d problem(s) in %d campaign-day(s) checked\n", problems, len(results))
	}
	if behind > 0 {
		fmt.Fprintf(a.stderr, "pacerctl: check: %d Redis master(s) behind, or not compared with, the watermark recorded in etcd\n", behind)
	}
	if sqlBehind > 0 {
		fmt.Fprintf(a.stderr, "pacerctl: check: %d shard run(s) or day(s) behind PostgreSQL's copy: pacerctl recover --from-sql\n", sqlBehind)
	}
	if problems > 0 || behind > 0 || sqlBehind > 0 {
		return errReported
	}
	if !durable {
		fmt.Fprintf(a.stderr, "pacerctl: check: Redis does not meet ledger.durability=%s\n", a.durability)
		return errReported
	}
	if len(results) == 0 && !a.json {
		fmt.Fprintln(a.stdout, "no open campaign-days to check")
	}
	return nil
}

// checkBehind compares the ledger with the copies kept outside it: the
// watermark in etcd (checkWatermarks) and, with a DSN, PostgreSQL's
// (checkSQL). It returns how many masters and how many shard runs or days
// are behind or could not be compared.
func (a *app) checkBehind(ctx context.Context, l *lease.Ledger, ids []string, one bool, dsn string) (masters, runs int, err error) {
	masters, err = a.checkWatermarks(ctx, l, ids)
	if err != nil || dsn == "" {
		return masters, 0, err
	}
	campaign := ""
	if one {
		campaign = ids[0]
	}
	runs, err = a.checkSQL(ctx, dsn, campaign)
	return masters, runs, err
}

// checkIDs returns the campaigns check looks at: the one named, which must
// exist (an unknown id would otherwise pass with nothing checked), or all.
func (a *app) checkIDs(ctx context.Context, l *lease.Ledger, pos []string) ([]string, error) {
	if len(pos) == 1 {
		id, err := campaignArg("check", pos)
		if err != nil {
			return nil, err
		}
		if _, err := l.GetCampaign(ctx, id); err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
	cs, err := l.ListCampaigns(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// staleMoves returns a problem for each move begun longer than staleAfter
// ago: no reconciler is finishing it. A move whose id does not say when it
// began is never stale.
func (a *app) staleMoves(id, day string, moves []lease.MoveInFlight, staleAfter time.Duration) []lease.Problem {
	var out []lease.Problem
	for _, m := range moves {
		if age := a.now().Sub(m.Began); !m.Began.IsZero() && age > staleAfter {
			out = append(out, lease.Problem{Shard: lease.ShardKey{Campaign: id, Day: day, Shard: m.From}, What: fmt.Sprintf(
				"move %s of %d micros to shard %d begun %v ago and not finished (--stale-after %v): is a reconciler elected? (pacerctl status)",
				m.ID, m.Amount, m.To, age.Round(time.Second), staleAfter)})
		}
	}
	return out
}

// printDayCheck prints a day's result: ok with its shards' totals (and the
// micros moving between them, which the day's budget counts), or each
// problem; then each move in flight.
func (a *app) printDayCheck(r dayCheck) {
	if r.OK {
		t := r.Totals
		fmt.Fprintf(a.stdout, "ok %s %s budget=%d locked=%d available=%d leased=%d spent=%d",
			r.Campaign, r.Day, t.Budget, t.Locked, t.Available, t.Leased, t.Spent)
		var moving int64
		for _, m := range r.Moves {
			moving += m.Amount
		}
		if moving > 0 {
			fmt.Fprintf(a.stdout, " moving=%d", moving)
		}
		fmt.Fprintln(a.stdout)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(a.stdout, "FAIL %s %s: %s\n", r.Campaign, r.Day, p)
	}
	for _, m := range r.Moves {
		age := "at an unknown time"
		if !m.Began.IsZero() {
			age = a.now().Sub(m.Began).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(a.stdout, "pending %s %s: move %s of %d micros from shard %d to shard %d, begun %s (the day's budget counts it; the reconciler finishes it)\n",
			r.Campaign, r.Day, m.ID, m.Amount, m.From, m.To, age)
	}
}
