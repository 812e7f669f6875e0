package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
)

// reconcile agrees with an export that is complete, and after the ledger
// moves on without it exits 1 naming the day, the fields and both values.
func TestReconcileNamesEveryDifference(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	h.ok("campaign", "set", "rc", "--daily", "100units", "--shards", "2")
	day := h.openToday("rc")
	pg := pgtest.Own(t)
	dsn, err := pg.CreateDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := export.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	rdb := h.redis.Client()
	e := export.New(rdb, h.ledger, db, export.Config{}, nil, nil)
	if _, err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if out := h.ok("reconcile", "--sql", dsn); !strings.Contains(out, "1 campaign-days compared, 0 differ") {
		t.Fatalf("reconcile after a complete export: %q", out)
	}

	k := lease.ShardKey{Campaign: "rc", Day: day.Key, Shard: 1}
	g, err := h.ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "L1", Holder: "h", Want: 1_000_000, Expiry: t0.Add(30 * time.Second),
		Now: t0, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000}, Grace: 5 * time.Second, DayStart: day.Start})
	if err != nil || g.Granted == 0 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	if _, err := h.ledger.Release(ctx, k, "L1", 0, t0); err != nil {
		t.Fatal(err)
	}
	r := h.run("reconcile", "--sql", dsn, "--day", day.Key)
	want := "DIFF rc/" + day.Key + ": spent sql=0 ledger=" + strconv.FormatInt(g.Granted, 10)
	if r.code != 1 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "leases sql=0 ledger=1") {
		t.Fatalf("reconcile with the export behind: exit %d, %q; want 1 and %q", r.code, r.stdout, want)
	}
	if _, err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	h.ok("reconcile", "--sql", dsn, "--day", day.Key)
	if r := h.run("reconcile"); r.code != 2 || !strings.Contains(r.stderr, "--sql") {
		t.Fatalf("reconcile without --sql: exit %d, %q", r.code, r.stderr)
	}
}
