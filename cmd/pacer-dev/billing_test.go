package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// devFleet is a fleet of a real redis-server alone, for startBilling.
func devFleet(t *testing.T, bin string) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	f := &fleet{cfg: &config{dir: t.TempDir(), bin: bin, adminPort: 20000 + os.Getpid()%20000, postgres: true},
		redis: srv.Socket, rdb: srv.Client(), sockets: []string{"pacer-1.sock"}}
	f.cfg.abs = f.cfg.dir
	t.Cleanup(f.stop)
	return f
}

// Without PostgreSQL the fleet goes on, and says why and how to get it.
func TestBillingOffWithoutPostgreSQL(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "pacer-export"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PACER_PG_BIN", filepath.Join(t.TempDir(), "none"))
	f := devFleet(t, bin)
	var out bytes.Buffer
	f.startBilling(context.Background(), &out)
	if f.billing != nil || !strings.Contains(out.String(), "PostgreSQL and pacer-export not started, the fleet runs without them") ||
		!strings.Contains(out.String(), "install Debian's postgresql-15") {
		t.Fatalf("billing %+v, said %q", f.billing, out.String())
	}
	f.printBanner(&out)
	if !strings.Contains(out.String(), "PostgreSQL (billing)   not started") || strings.Contains(out.String(), "psql") {
		t.Fatalf("banner without PostgreSQL: %q", out.String())
	}
}

// With PostgreSQL, a real pacer-export copies the ledger into it: a lease
// on the demo campaign shows in spend_hours; the env file names the
// database; stopping the fleet stops the exporter and the server.
func TestBillingExportsTheLedger(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../pacer-export")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build pacer-export: %v\n%s", err, out)
	}
	f := devFleet(t, bin)
	l := lease.New(f.rdb, lease.Config{}, nil)
	c := lease.Campaign{ID: "demo", DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 1, State: lease.StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	today := now.UTC().Format(time.DateOnly)
	midnight, _ := time.Parse(time.DateOnly, today)
	if _, err := l.OpenDay(ctx, c, today, midnight, now); err != nil {
		t.Fatal(err)
	}
	k := lease.ShardKey{Campaign: "demo", Day: today, Shard: 0}
	if _, err := l.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "dev-1-b-1", Holder: "dev-1", Want: 5_000_000, Expiry: now.Add(30 * time.Second),
		Now: now, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000}, Grace: 5 * time.Second, DayStart: midnight}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(ctx, k, "dev-1-b-1", 1_000_000, now); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	f.startBilling(ctx, &out)
	if f.billing == nil {
		t.Fatalf("billing not started: %s", out.String())
	}
	if err := f.writeEnv(); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(f.envPath())
	if err != nil || !strings.Contains(string(env), "export PACER_SQL=\""+f.billing.dsn+"\"") {
		t.Fatalf("env: %q, %v", env, err)
	}
	f.printBanner(&out)
	if !strings.Contains(out.String(), `psql "$PACER_SQL"`) {
		t.Fatalf("banner: %q", out.String())
	}
	db, err := pgxpool.New(ctx, f.billing.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The exporter passes every second; allow for a machine at a load
	// average of 20.
	var spent int64
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		err = db.QueryRow(ctx, `SELECT coalesce(sum(spent), 0) FROM spend_hours WHERE campaign = 'demo' AND day = current_date`).Scan(&spent)
		if err == nil && spent > 0 {
			break
		}
	}
	if spent != 4_000_000 {
		t.Fatalf("today's spend in spend_hours: %d, %v; want the 4,000,000 the lease spent", spent, err)
	}
	db.Close()
	f.stop()
	f.stops = nil
	select {
	case <-f.billing.exporter.done:
	default:
		t.Fatal("pacer-export still runs after the fleet stopped")
	}
	if _, err := os.Stat(f.billing.dir); !os.IsNotExist(err) {
		t.Fatalf("PostgreSQL's directory after the fleet stopped: %v", err)
	}
}
