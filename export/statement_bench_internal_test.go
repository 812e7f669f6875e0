package export

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
)

// BenchmarkExportStatement shows where PostgreSQL's time goes in a batch's
// one statement (commitSQL): 50 batches of 1,000 release entries written,
// then one more under EXPLAIN (ANALYZE, BUFFERS, WAL), logged, then rounds
// of 40 batches, one at a time, each reporting PostgreSQL's CPU time per
// event (every server process): as exported; with fields '{}' (no jsonb to
// parse); without the (campaign, at) index; both; and ledger_events
// unlogged too (no WAL). The variants change the database, so they run in
// that order on a server of their own.
//
//	go test -run '^$' -bench ExportStatement -benchtime 1x -v ./export/
func BenchmarkExportStatement(b *testing.B) {
	for range b.N {
		exportStatement(b)
	}
}

func exportStatement(t *testing.B) {
	ctx := context.Background()
	srv := pgtest.OwnDurable(t)
	_, db := pgtest.Pool(t, srv)
	if _, err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	batch := func(shard, b int) []any {
		k := lease.ShardKey{Campaign: "bench", Day: "2026-11-21", Shard: shard}
		evs := make([]event, 1000)
		for i := range evs {
			n := b*1000 + i
			at := t0.Add(time.Duration(n) * time.Millisecond)
			evs[i] = event{id: streamID{at.UnixMilli(), 0}, kind: "release", micros: 25000, unused: 1250, ref: "h1-" + strconv.Itoa(n), holder: "h1", at: at,
				fields: map[string]string{"ev": "release", "lease": "h1-" + strconv.Itoa(n), "holder": "h1", "amount": "25000", "unused": "1250", "ms": strconv.FormatInt(at.UnixMilli(), 10)}}
		}
		args, err := commitArgs(k, evs, time.UTC, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return args
	}
	for b := range 50 {
		if _, err := db.Exec(ctx, commitSQL, batch(b%8, b)...); err != nil {
			t.Fatal(err)
		}
	}
	explain(t, db, batch(2, 50))
	b := 51
	round := func(name string, mod func([]any)) {
		c0, _ := srv.CPU()
		w0 := time.Now()
		for range 40 {
			args := batch(b%8, b)
			b++
			if mod != nil {
				mod(args)
			}
			if _, err := db.Exec(ctx, commitSQL, args...); err != nil {
				t.Fatal(err)
			}
		}
		c1, _ := srv.CPU()
		t.ReportMetric(float64((c1-c0).Nanoseconds())/40_000, name+"-pg-cpu-ns/event")
		t.Logf("%-24s PostgreSQL CPU %5.1f µs an event, wall %5.1f µs", name, float64((c1-c0).Nanoseconds())/40_000/1000,
			float64(time.Since(w0).Nanoseconds())/40_000/1000)
	}
	t.Logf("load average %s", loadAverageNow())
	empty := func(args []any) {
		f := args[11].([]string)
		for i := range f {
			f[i] = "{}"
		}
	}
	round("exported", nil)
	round("fields-empty", empty)
	if _, err := db.Exec(ctx, "DROP INDEX ledger_events_at"); err != nil {
		t.Fatal(err)
	}
	round("no-at-index", nil)
	round("no-at-index-fields-empty", empty)
	if _, err := db.Exec(ctx, "ALTER TABLE ledger_events SET UNLOGGED"); err != nil {
		t.Fatal(err)
	}
	round("unlogged-no-at-index", nil)
	t.Logf("load average %s", loadAverageNow())
}

// explain logs the plan of one batch's statement, run.
func explain(t *testing.B, db *pgxpool.Pool, args []any) {
	rows, err := db.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, WAL) "+commitSQL, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		t.Log(line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func loadAverageNow() string {
	l, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(l))[:3], " ")
}
