package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/lease"
)

// recoverCommand raises a ledger restored from an older copy to what
// PostgreSQL's copy of the money (pacer-export's ledger_events) saw.
func recoverCommand() command {
	return command{name: "recover", args: "--from-sql DSN [--campaign ID] [--day YYYY-MM-DD] [--dry-run]",
		help: "Raise a Redis ledger that lost acknowledged writes (restored from an older copy) to what\n" +
			"PostgreSQL recorded (pacer-export's ledger_events, docs/EXPORT.md). For every campaign-day\n" +
			"PostgreSQL holds from the day before yesterday (UTC) on, or those of --campaign and --day, and\n" +
			"every shard of it, each daemon run's totals (micros granted to it, micros it gave back) are\n" +
			"compared with the ledger's; where the ledger records less, the leases PostgreSQL holds open\n" +
			"and the ledger forgot are recorded again, then the run's totals are re-asserted, as a daemon\n" +
			"re-asserts its own: what its clients spent from the forgotten leases is counted spent, out of\n" +
			"what the shard can still grant (any shortfall is owed). Safe to run twice, after a crash, and\n" +
			"while daemons and the reconciler run; a closed day is left alone. --dry-run prints what it\n" +
			"would do and writes nothing. Exit status 1 if a day could not be raised (closed, not open in\n" +
			"the ledger). --from-sql defaults to $PACER_SQL. Run it while the reconciler's freeze holds\n" +
			"(docs/OPERATIONS.md, runbook: Redis restored from an older copy).",
		run: (*app).recoverFromSQL}
}

// recoverView is recover's JSON.
type recoverView struct {
	Plan      export.Plan       `json:"plan"`
	DryRun    bool              `json:"dry_run"`
	Recovered *export.Recovered `json:"recovered,omitempty"`
}

func (a *app) recoverFromSQL(ctx context.Context, args []string) error {
	fs := newFlagSet("recover")
	dsn := fs.String("from-sql", a.getenvOr("PACER_SQL"), "PostgreSQL DSN of the spend ledger (pacer-export's database)")
	campaign := fs.String("campaign", "", "only this campaign")
	dayFlag := fs.String("day", "", "only this day, YYYY-MM-DD")
	dryRun := fs.Bool("dry-run", false, "print what would be raised; write nothing")
	pos, err := a.parseArgs(fs, args, "--from-sql DSN [--campaign ID] [--day YYYY-MM-DD] [--dry-run]")
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("recover: unexpected argument %q", pos[0])
	}
	if *dsn == "" {
		return usagef("recover: give --from-sql DSN (or set PACER_SQL)")
	}
	if *dayFlag != "" {
		if _, err := bucket.ParseDayKey(*dayFlag, time.UTC); err != nil {
			return usagef("recover: --day %q: want a date YYYY-MM-DD", *dayFlag)
		}
	}
	l, db, err := a.ledgerAndSQL(ctx, "recover", *dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	now := a.now()
	plan, err := export.CompareCopy(ctx, db, l, export.CompareOptions{Campaign: *campaign, Day: *dayFlag, Now: now})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if *dryRun {
		return a.printRecoverPlan(plan)
	}
	return a.applyRecovery(ctx, l, plan, now)
}

// ledgerAndSQL connects to the Redis ledger and to PostgreSQL, whose schema
// must be the one this build reads: each failure says which side and why.
func (a *app) ledgerAndSQL(ctx context.Context, cmd, dsn string) (*lease.Ledger, *pgxpool.Pool, error) {
	l, err := a.getLedger()
	if err != nil {
		return nil, nil, err
	}
	if err := l.Ping(ctx); err != nil {
		return nil, nil, fmt.Errorf("%s: the Redis ledger (--redis %s) is unreachable: %w%s", cmd, a.redisAddrs, err, a.nextStep(cmd, err))
	}
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: PostgreSQL DSN: %w", cmd, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.Ping(pctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("%s: PostgreSQL is unreachable: %w", cmd, err)
	}
	if err := export.CheckSchema(ctx, db); err != nil {
		db.Close()
		if errors.Is(err, export.ErrSchemaVersion) {
			return nil, nil, fmt.Errorf("%s: %w (a pacer-export of this release migrates it: pacer-export migrate)", cmd, err)
		}
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return l, db, nil
}

// printRecoverPlan prints what recover would do (--dry-run).
func (a *app) printRecoverPlan(plan export.Plan) error {
	if a.json {
		return a.printJSON(recoverView{Plan: plan, DryRun: true})
	}
	a.printPlanLines(plan)
	fmt.Fprintf(a.stdout, "dry run: %d campaign-days, %d shards compared; would re-record %d lease(s) and raise %d run(s) by %d micros consumed; nothing written\n",
		plan.Days, plan.Shards, len(plan.Leases), len(plan.Runs), plan.Unseen())
	return nil
}

func (a *app) printPlanLines(plan export.Plan) {
	for _, r := range plan.Runs {
		fmt.Fprintln(a.stdout, "behind", r)
	}
	for _, lb := range plan.Leases {
		fmt.Fprintf(a.stdout, "lease %s %s of %d micros (holder %s, expiry %s): open in PostgreSQL, not held by the ledger\n",
			lb.Shard, lb.Lease.ID, lb.Lease.Amount, lb.Lease.Holder, lb.Lease.Expiry.UTC().Format(time.RFC3339))
	}
	for _, f := range plan.Findings {
		fmt.Fprintln(a.stdout, "FAIL", f)
	}
}

// applyRecovery raises the ledger as plan says and fails if a day could
// not be raised.
func (a *app) applyRecovery(ctx context.Context, l *lease.Ledger, plan export.Plan, now time.Time) error {
	if !a.json {
		a.printPlanLines(plan)
	}
	got, err := export.Recover(ctx, l, plan, now, func(s string) {
		if !a.json {
			fmt.Fprintln(a.stdout, s)
		}
	})
	if err != nil {
		return fmt.Errorf("recover: %w (what was done stands; run recover again to finish)", err)
	}
	if a.json {
		if err := a.printJSON(recoverView{Plan: plan, Recovered: &got}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "recovered: %d campaign-days, %d shards compared; %d lease(s) re-recorded, %d run(s) raised, %d micros counted spent; %d closed shard(s) left alone\n",
			plan.Days, plan.Shards, got.Leases, got.Runs, got.Spent, got.Closed)
	}
	if len(plan.Findings) > 0 {
		fmt.Fprintf(a.stderr, "pacerctl: recover: %d campaign-day(s) or shard(s) not raised (FAIL lines)\n", len(plan.Findings))
		return errReported
	}
	return nil
}

// checkSQL compares every shard's run totals with PostgreSQL's copy
// (check --sql): it prints a FAIL line per run the ledger records less for
// than PostgreSQL saw, and per day it could not compare, and returns how
// many.
func (a *app) checkSQL(ctx context.Context, dsn, campaign string) (int, error) {
	out := a.stdout
	if a.json {
		out = a.stderr
	}
	l, db, err := a.ledgerAndSQL(ctx, "check", dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	plan, err := export.CompareCopy(ctx, db, l, export.CompareOptions{Campaign: campaign, Now: a.now()})
	if err != nil {
		return 0, fmt.Errorf("check: %w", err)
	}
	for _, r := range plan.Runs {
		fmt.Fprintf(out, "FAIL sql %s: the ledger lost acknowledged writes that PostgreSQL recorded; `pacerctl recover --from-sql` raises it\n", r)
	}
	for _, f := range plan.Findings {
		fmt.Fprintf(out, "FAIL sql %s\n", f)
	}
	if !plan.Behind() {
		fmt.Fprintf(out, "ok sql: %d campaign-days, %d shards: the ledger counts at least what PostgreSQL recorded for every run\n", plan.Days, plan.Shards)
	}
	return len(plan.Runs) + len(plan.Findings), nil
}
