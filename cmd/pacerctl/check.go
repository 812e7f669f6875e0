package main

import (
	"context"
	"fmt"

	"github.com/pacer/pacer/lease"
)

// dayCheck is one campaign-day's result, for check --json.
type dayCheck struct {
	Campaign string          `json:"campaign"`
	Day      string          `json:"day"`
	OK       bool            `json:"ok"`
	Totals   lease.Shard     `json:"totals"`
	Problems []lease.Problem `json:"problems,omitempty"`
}

// check verifies conservation on every open day of one campaign or of all:
// budget = locked + available + leased + spent, on every shard. It prints
// one line per day, and fails (exit status 1) if any day is off.
func (a *app) check(ctx context.Context, args []string) error {
	pos, err := a.parseArgs(newFlagSet("check"), args, "[<id>]")
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
	var ids []string
	if len(pos) == 1 {
		id, err := campaignArg("check", pos)
		if err != nil {
			return err
		}
		// An unknown id would otherwise pass with nothing checked.
		if _, err := l.GetCampaign(ctx, id); err != nil {
			return err
		}
		ids = []string{id}
	} else {
		cs, err := l.ListCampaigns(ctx)
		if err != nil {
			return err
		}
		for _, c := range cs {
			ids = append(ids, c.ID)
		}
	}

	var results []dayCheck
	problems := 0
	for _, id := range ids {
		days, err := l.OpenDays(ctx, id)
		if err != nil {
			return err
		}
		for _, day := range days {
			total, ps, err := l.CheckDay(ctx, id, day)
			if err != nil {
				return err
			}
			r := dayCheck{Campaign: id, Day: day, OK: len(ps) == 0, Totals: total, Problems: ps}
			results = append(results, r)
			problems += len(ps)
			if a.json {
				continue
			}
			if r.OK {
				fmt.Fprintf(a.stdout, "ok %s %s budget=%d locked=%d available=%d leased=%d spent=%d\n",
					id, day, total.Budget, total.Locked, total.Available, total.Leased, total.Spent)
				continue
			}
			for _, p := range ps {
				fmt.Fprintf(a.stdout, "FAIL %s %s: %s\n", id, day, p)
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
