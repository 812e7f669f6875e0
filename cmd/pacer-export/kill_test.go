package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// pacer-export processes are SIGKILLed while they export (small batches, so
// a kill lands mid-batch: rows read, in a transaction, committed and not
// acknowledged) and the ledger writes on; a restart under the same name
// re-reads what the dead one held, and another name takes it over. In the
// end PostgreSQL holds every event exactly once: one row per event the
// shards counted, and pacerctl reconcile's comparison agrees.
func TestSIGKILLMidBatch(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	const day, shards = "2026-11-21", 2
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	c := lease.Campaign{ID: "kill", DailyMicros: 100_000_000_000, TZ: "UTC", Curve: "flat", Shards: shards, State: lease.StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, day, t0, t0); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DB(t)
	var out, errOut proctest.Buffer
	if err := run(ctx, []string{"--sql", dsn, "migrate"}, noEnv, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows := func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM ledger_events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { spendUntil(t, l, day, shards, t0, stop) })
	for i, consumer := range []string{"a", "a", "b", "a"} {
		before := rows()
		cmd := exec.Command(os.Args[0], "--redis", srv.Socket, "--sql", dsn, "--metrics", "", "--interval", "5ms",
			"--batch", "3", "--consumer", consumer, "--claim-idle", "1ms", "run")
		cmd.Env = append(os.Environ(), "PACER_EXPORT_RUN_MAIN=1")
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute) // a loaded machine
		for rows() < before+20 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := cmd.Process.Signal(os.Kill); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if rows() < before+20 {
			t.Fatalf("kill %d: the exporter wrote %d rows in 2 minutes; log:\n%s", i, rows()-before, errOut.String())
		}
	}
	close(stop)
	wg.Wait()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"--redis", srv.Socket, "--sql", dsn, "--metrics", "", "--interval", "5ms", "--consumer", "c", "--claim-idle", "1ms"}, noEnv, &out, &errOut)
	}()
	want := int64(0)
	for s := range shards {
		n, _, err := l.AuditEvents(ctx, lease.ShardKey{Campaign: "kill", Day: day, Shard: s})
		if err != nil {
			t.Fatal(err)
		}
		want += n
	}
	deadline := time.Now().Add(2 * time.Minute)
	for rows() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := rows(); got != want {
		t.Fatalf("PostgreSQL holds %d rows, the shards wrote %d events", got, want)
	}
	out.Reset()
	if err := run(ctx, []string{"--redis", srv.Socket, "--sql", dsn, "--campaign", "kill", "--day", day, "replay"}, noEnv, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	r, err := l.BuildReport(ctx, "kill", day)
	if err != nil {
		t.Fatal(err)
	}
	var spent, events int64
	if err := conn.QueryRow(ctx, `SELECT spent, events FROM spend_days WHERE campaign = 'kill'`).Scan(&spent, &events); err != nil {
		t.Fatal(err)
	}
	if spent != r.Spent || events != r.Events {
		t.Fatalf("spend_days: spent %d, events %d; the ledger's report: spent %d, events %d", spent, events, r.Spent, r.Events)
	}
}

// spendUntil grants and releases leases on every shard until stop closes.
func spendUntil(t *testing.T, l *lease.Ledger, day string, shards int, t0 time.Time, stop <-chan struct{}) {
	ctx := context.Background()
	now := t0.Add(10 * time.Hour)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		k := lease.ShardKey{Campaign: "kill", Day: day, Shard: i % shards}
		id := "L" + strconv.Itoa(i)
		g, err := l.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h", Want: 10_000, Expiry: now.Add(30 * time.Second),
			Now: now, Pace: lease.Pace{Now: 500_000_000, Cap: 600_000_000}, Grace: 5 * time.Second, DayStart: t0})
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := l.Release(ctx, k, id, g.Granted/3, now); err != nil {
			t.Error(err)
			return
		}
	}
}
