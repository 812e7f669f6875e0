package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/export"
)

// reconcileCommand compares the spend ledger in PostgreSQL (pacer-export's
// spend_days) with the Redis ledger's report counters.
func reconcileCommand() command {
	return command{name: "reconcile", args: "--sql DSN [--day YYYY-MM-DD]",
		help: "Compare the spend ledger in PostgreSQL (pacer-export, docs/EXPORT.md) with the Redis ledger:\n" +
			"for every campaign-day the ledger still holds (or those of --day), PostgreSQL's spend_days\n" +
			"totals against the ledger's report counters: budget, spent, returned, lost, leases, settled\n" +
			"and events. Prints one line per day; exit status 1 if any day differs or is missing from\n" +
			"PostgreSQL, naming each field and both values. An exporter that is behind shows as a\n" +
			"difference too: compare again once pacer_export_lag_entries is 0. --sql defaults to $PACER_SQL.",
		run: (*app).reconcile}
}

// reconcileView is reconcile's JSON.
type reconcileView struct {
	Days        int                 `json:"days"`
	Differences []export.Difference `json:"differences"`
}

func (a *app) reconcile(ctx context.Context, args []string) error {
	fs := newFlagSet("reconcile")
	dsn := fs.String("sql", a.getenvOr("PACER_SQL"), "PostgreSQL DSN of the spend ledger")
	dayFlag := fs.String("day", "", "compare only this day, YYYY-MM-DD")
	pos, err := a.parseArgs(fs, args, "--sql DSN [--day YYYY-MM-DD]")
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("reconcile: unexpected argument %q", pos[0])
	}
	if *dsn == "" {
		return usagef("reconcile: give --sql DSN (or set PACER_SQL)")
	}
	if *dayFlag != "" {
		if _, err := bucket.ParseDayKey(*dayFlag, time.UTC); err != nil {
			return usagef("reconcile: --day %q: want a date YYYY-MM-DD", *dayFlag)
		}
	}
	l, err := a.getLedger()
	if err != nil {
		return err
	}
	db, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		return fmt.Errorf("reconcile: --sql: %w", err)
	}
	defer db.Close()
	if err := export.CheckSchema(ctx, db); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	diffs, days, err := export.Reconcile(ctx, db, l, *dayFlag)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if a.json {
		if diffs == nil {
			diffs = []export.Difference{}
		}
		if err := a.printJSON(reconcileView{Days: days, Differences: diffs}); err != nil {
			return err
		}
	} else {
		for _, d := range diffs {
			fmt.Fprintln(a.stdout, "DIFF", d)
		}
		fmt.Fprintf(a.stdout, "%d campaign-days compared, %d differ\n", days, len(diffs))
	}
	if len(diffs) > 0 {
		return errReported
	}
	return nil
}

// getenvOr reads an environment default (none when getenv is nil).
func (a *app) getenvOr(name string) string {
	if a.getenv == nil {
		return ""
	}
	return a.getenv(name)
}
