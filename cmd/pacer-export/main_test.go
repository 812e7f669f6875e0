package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

var pg pgtest.Shared

func TestMain(m *testing.M) {
	if os.Getenv("PACER_EXPORT_RUN_MAIN") == "1" {
		main() // a child process of TestSIGKILLMidBatch
		return
	}
	os.Exit(pgtest.Main(m, &pg))
}

func noEnv(string) string { return "" }

// migrate, run (until stopped) and replay, end to end on a real redis-server
// and PostgreSQL: the run exports an opened day, a replay finds it all there.
func TestMigrateRunReplay(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	c := lease.Campaign{ID: "demo", DailyMicros: 5_000_000, TZ: "UTC", Curve: "flat", Shards: 2, State: lease.StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	if _, err := l.OpenDay(ctx, c, "2026-11-21", t0, t0); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DB(t)
	flags := []string{"--redis", srv.Socket, "--sql", dsn, "--metrics", "", "--interval", "10ms"}
	var out, errOut bytes.Buffer
	if err := run(ctx, append(flags, "run"), noEnv, &out, &errOut); err == nil || !strings.Contains(err.Error(), "pacer-export migrate") {
		t.Fatalf("run on an empty database: %v; want a pointer to migrate", err)
	}
	if err := run(ctx, append(flags, "migrate"), noEnv, &out, &errOut); err != nil || !strings.Contains(out.String(), "schema at version 3") {
		t.Fatalf("migrate: %v, %q", err, out.String())
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, flags, noEnv, &out, &errOut) }()
	deadline := time.Now().Add(2 * time.Minute) // a loaded machine
	for n := 0; n < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("the two open events never reached PostgreSQL; log:\n%s", errOut.String())
		}
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM ledger_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, append(flags, "--campaign", "demo", "--day", "2026-11-21", "replay"), noEnv, &out, &errOut); err != nil ||
		!strings.Contains(out.String(), "0 rows written, 2 already there") {
		t.Fatalf("replay: %v, %q", err, out.String())
	}
	out.Reset()
	if err := run(ctx, append(flags, "--campaign", "demo", "--day", "2026-11-21", "backfill"), noEnv, &out, &errOut); err != nil ||
		!strings.Contains(out.String(), "0 shards backfilled") {
		t.Fatalf("backfill of a day exported whole: %v, %q", err, out.String())
	}
	if err := run(ctx, []string{"--redis", srv.Socket, "--sql", "host=/nonexistent user=x dbname=x"}, noEnv, &out, &errOut); err == nil || !strings.HasPrefix(err.Error(), "--sql:") {
		t.Fatalf("an unreachable DSN: %v", err)
	}
}

// docs/EXPORT.md's flag table quotes the defaults the command line has, and
// lists every flag.
func TestDocsQuoteTheFlags(t *testing.T) {
	b, err := os.ReadFile("../../docs/EXPORT.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flagSet(&options{}, noEnv, io.Discard)
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| ([^|]*) \\|")
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		name, def := m[1], strings.TrimSpace(m[2])
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("docs/EXPORT.md lists --%s, which pacer-export does not have", name)
			continue
		}
		seen[name] = true
		if q, ok := strings.CutPrefix(def, "`"); ok {
			if q = strings.TrimSuffix(q, "`"); q != f.DefValue {
				t.Errorf("docs/EXPORT.md: --%s defaults to %q, the code to %q", name, q, f.DefValue)
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !seen[f.Name] {
			t.Errorf("docs/EXPORT.md does not list --%s", f.Name)
		}
	})
}
