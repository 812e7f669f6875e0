package export_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// Two exporters share the group and the database and run passes at the same
// time while the ledger writes, each taking over what the other holds
// (ClaimIdle 1 ms): every event lands once.
func TestTwoExportersRacing(t *testing.T) {
	f := newFixture(t, lease.Config{})
	f.open(t, "race", 4)
	f.spend(t, "race", 4, 10, "a", t0.Add(9*time.Hour))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var dups [2]int64
	for i, name := range []string{"one", "two"} {
		e := f.exporter(name, export.Config{Batch: 5, ClaimIdle: time.Millisecond})
		wg.Go(func() {
			for {
				st, err := e.Pass(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				dups[i] += st.Duplicates
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	for i := range 4 {
		f.spend(t, "race", 4, 10, "b"+strings.Repeat("x", i), t0.Add(10*time.Hour+time.Duration(i)*time.Minute))
	}
	close(stop)
	wg.Wait()
	passes(t, f.exporter("one", export.Config{}))
	f.exact(t)
	t.Logf("entries read twice and skipped: %d and %d", dups[0], dups[1])
}

// ownServerFixture is a fixture whose database is on a PostgreSQL server of
// its own, for tests that stop or freeze the server.
func ownServerFixture(t *testing.T) (*pgtest.Server, *fixture) {
	t.Helper()
	srv := pgtest.Own(t)
	dsn, err := srv.CreateDB(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, lease.Config{})
	f.db.Close()
	f.db = openDB(t, dsn)
	return srv, f
}

// PostgreSQL crashes (pg_ctl stop -m immediate) while the ledger writes on:
// passes fail and are counted, the streams keep everything (the lag grows),
// and after PostgreSQL restarts the export catches up exactly, from the
// first pass: the failed pass dropped the pool's idle connections to the
// old server. (The pool here never pings a connection it lends, so that a
// dead idle one is found by the exporter, whatever the timing.)
func TestPostgresRestartedWhileSpending(t *testing.T) {
	srv, f := ownServerFixture(t)
	cfg := f.db.Config()
	var err error
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	f.db.Close()
	if f.db, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.db.Close)
	f.open(t, "pg", 2)
	m := export.NewMetrics(nil)
	e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "one", Batch: 10}, m, nil)
	f.spend(t, "pg", 2, 10, "a", t0.Add(9*time.Hour))
	passes(t, e)
	holdIdle(t, f.db, 4)
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	f.spend(t, "pg", 2, 30, "b", t0.Add(10*time.Hour))
	if _, err := e.Pass(ctx); err == nil {
		t.Fatal("a pass with PostgreSQL down succeeded")
	}
	if n := errorsTotal(t, m); n < 1 {
		t.Fatalf("pacer_export_errors_total is %v after a failed pass", n)
	}
	for s := range 2 {
		if n := f.rdb.XLen(ctx, lease.ShardKey{Campaign: "pg", Day: day, Shard: s}.AuditKey()).Val(); n < 30 {
			t.Fatalf("shard %d's stream holds %d entries while PostgreSQL is down: trimmed what was not exported", s, n)
		}
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n, age := gaugeValue(t, m.LagEntries), gaugeValue(t, m.LagSeconds); n < 2*30 || age <= 0 {
		t.Errorf("the catch-up pass measured a lag of %v entries, %v s; want the 60+ written while PostgreSQL was down", n, age)
	}
	passes(t, e)
	f.exact(t)
}

// PostgreSQL unreachable (its processes stopped: every connection and query
// hangs, none is refused) while the ledger writes on, over several passes
// that each give up: the streams keep everything, the lag grows, and once
// PostgreSQL answers again the export catches up exactly.
func TestPostgresUnreachableWhileSpending(t *testing.T) {
	srv, f := ownServerFixture(t)
	f.open(t, "cut", 2)
	m := export.NewMetrics(nil)
	e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "one", Batch: 10}, m, nil)
	f.spend(t, "cut", 2, 10, "a", t0.Add(9*time.Hour))
	passes(t, e)
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			srv.Thaw()
		}
	})
	for i, tag := range []string{"b", "c", "d"} {
		f.spend(t, "cut", 2, 10, tag, t0.Add(time.Duration(10+i)*time.Hour))
		// A pass cannot finish while PostgreSQL hangs, whatever the time
		// given: this one is given a second.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := e.Pass(pctx)
		cancel()
		if err == nil {
			t.Fatal("a pass with PostgreSQL unreachable succeeded")
		}
	}
	for s := range 2 {
		if n := f.rdb.XLen(ctx, lease.ShardKey{Campaign: "cut", Day: day, Shard: s}.AuditKey()).Val(); n < 30 {
			t.Fatalf("shard %d's stream holds %d entries while PostgreSQL is unreachable: trimmed what was not exported", s, n)
		}
	}
	if err := srv.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	passes(t, e)
	if n := gaugeValue(t, m.LagEntries); n != 0 {
		t.Errorf("after the catch-up, pacer_export_lag_entries is %v", n)
	}
	f.exact(t)
}

// A stream the ledger capped before any exporter read it (a day written
// before the exporter existed, on a small cap), and a stream restored from an
// older copy after it was exported: both are recorded as gaps, counted, and
// reconcile names the days; what is there is still exported.
func TestGapsAreRecordedAndReported(t *testing.T) {
	f := newFixture(t, lease.Config{AuditMaxLen: 10})
	f.open(t, "capped", 1)
	f.spend(t, "capped", 1, 200, "a", t0.Add(9*time.Hour))
	m := export.NewMetrics(nil)
	e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "one"}, m, nil)
	st, err := e.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Gaps) != 1 || st.Gaps[0].Kind != "trimmed" || st.Gaps[0].After != "0-0" || st.Gaps[0].Missing < 300 {
		t.Fatalf("gaps %+v: want one trimmed gap from the start of ~400 entries", st.Gaps)
	}
	if st.Exported == 0 {
		t.Fatal("nothing exported after the gap: the rest of the stream was skipped")
	}
	if v := counterValue(t, m.Gaps.WithLabelValues("trimmed")); v != 1 {
		t.Fatalf("pacer_export_gaps_total{kind=trimmed} = %v", v)
	}
	if st, err = e.Pass(ctx); err != nil || len(st.Gaps) != 0 {
		t.Fatalf("a second pass reported %+v, %v: a gap is recorded once", st.Gaps, err)
	}
	diffs, _, err := export.Reconcile(ctx, f.db, f.ledger, day)
	if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0].String(), "capped/"+day) {
		t.Fatalf("reconcile: %v, %v; want the capped day named", diffs, err)
	}

	// A restore: the stream as it was, after more was exported.
	f.open(t, "restored", 1)
	k := lease.ShardKey{Campaign: "restored", Day: day, Shard: 0}
	f.spend(t, "restored", 1, 5, "a", t0.Add(9*time.Hour))
	snap := f.srv.Snapshot(k.RedisKeys()...)
	f.spend(t, "restored", 1, 5, "b", t0.Add(10*time.Hour))
	passes(t, e)
	f.srv.Restore(snap, k.RedisKeys()...)
	if st, err = e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if len(st.Gaps) != 1 || st.Gaps[0].Kind != "behind" || st.Gaps[0].Shard != k {
		t.Fatalf("after a restore: gaps %+v, want one behind on %v", st.Gaps, k)
	}
	var n int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM export_gaps`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("export_gaps holds %d rows, %v; want 2", n, err)
	}
}

// A database at another version, a table altered by hand and a DSN that
// fails are clear errors, and nothing is written.
func TestBadDatabasesAreRefused(t *testing.T) {
	f := newFixture(t, lease.Config{})
	if v, err := export.Migrate(ctx, f.db); err != nil || v != export.SchemaVersion() {
		t.Fatalf("a second Migrate: %d, %v", v, err)
	}
	if err := export.CheckSchema(ctx, f.db); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec(ctx, `ALTER TABLE spend_days DROP COLUMN lost; ALTER TABLE ledger_events ALTER COLUMN micros TYPE numeric`); err != nil {
		t.Fatal(err)
	}
	err := export.CheckSchema(ctx, f.db)
	if !errors.Is(err, export.ErrSchemaAltered) || !strings.Contains(err.Error(), "spend_days.lost is missing") ||
		!strings.Contains(err.Error(), "ledger_events.micros is numeric, not bigint") {
		t.Fatalf("altered tables: %v", err)
	}

	newer := openDB(t, pg.DB(t))
	if _, err := newer.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES (99, 'future')`); err != nil {
		t.Fatal(err)
	}
	if _, err := export.Migrate(ctx, newer); !errors.Is(err, export.ErrSchemaVersion) || !strings.Contains(err.Error(), "at 99") {
		t.Fatalf("Migrate on a newer schema: %v", err)
	}
	if err := export.CheckSchema(ctx, newer); !errors.Is(err, export.ErrSchemaVersion) {
		t.Fatalf("CheckSchema on a newer schema: %v", err)
	}

	bad, err := pgxpool.New(ctx, "host=/nonexistent/dir user=pacer dbname=none")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := export.Migrate(ctx, bad); err == nil || !strings.Contains(err.Error(), "export: migrate") {
		t.Fatalf("Migrate on an unreachable DSN: %v", err)
	}
}

// ledger_events is append-only: an UPDATE or DELETE is refused by the
// database itself.
func TestLedgerEventsAreAppendOnly(t *testing.T) {
	f := newFixture(t, lease.Config{})
	f.open(t, "ao", 1)
	passes(t, f.exporter("one", export.Config{}))
	for _, q := range []string{`UPDATE ledger_events SET micros = 0`, `DELETE FROM ledger_events`, `TRUNCATE ledger_events`} {
		if _, err := f.db.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// Replay re-exports a day from a stream id into a database that lost it (a
// fresh one stands for a restored backup), and changes nothing where the
// rows are there.
func TestReplayFillsWhatIsMissingOnly(t *testing.T) {
	f := newFixture(t, lease.Config{})
	f.open(t, "rp", 2)
	f.spend(t, "rp", 2, 10, "a", t0.Add(9*time.Hour))
	e := f.exporter("one", export.Config{NoTrim: true})
	passes(t, e)
	f.exact(t)
	in, dup, err := e.Replay(ctx, "rp", day, "-")
	if err != nil || in != 0 || dup == 0 {
		t.Fatalf("replay over a complete export: %d inserted, %d already there, %v", in, dup, err)
	}
	f.db = openDB(t, pg.DB(t))
	e = f.exporter("one", export.Config{NoTrim: true})
	in, _, err = e.Replay(ctx, "rp", day, "0")
	if err != nil || in == 0 {
		t.Fatalf("replay into an empty database: %d, %v", in, err)
	}
	f.exact(t)
}

// A day the ledger capped before the exporter read it is completed from the
// shards' report counters: once each stream is exported to its end,
// Backfill writes one row per shard with what the lost entries added, and
// reconcile agrees; a second Backfill writes nothing, and a shard with
// entries not exported yet is refused.
func TestBackfillFromCounters(t *testing.T) {
	f := newFixture(t, lease.Config{AuditMaxLen: 10})
	f.open(t, "old", 2)
	f.spend(t, "old", 2, 100, "a", t0.Add(9*time.Hour))
	e := f.exporter("one", export.Config{})
	passes(t, e)
	if diffs, _, err := export.Reconcile(ctx, f.db, f.ledger, day); err != nil || len(diffs) != 1 {
		t.Fatalf("reconcile before the backfill: %v, %v; want the day named", diffs, err)
	}
	f.spend(t, "old", 2, 1, "b", t0.Add(10*time.Hour))
	if _, err := e.Backfill(ctx, "old", day); !errors.Is(err, export.ErrNotCaughtUp) {
		t.Fatalf("backfill with entries not exported: %v", err)
	}
	passes(t, e)
	n, err := e.Backfill(ctx, "old", day)
	if err != nil || n != 2 {
		t.Fatalf("backfill: %d shards, %v; want 2", n, err)
	}
	diffs, _, err := export.Reconcile(ctx, f.db, f.ledger, day)
	if err != nil || len(diffs) != 0 {
		t.Fatalf("reconcile after the backfill: %v, %v", diffs, err)
	}
	if n, err := e.Backfill(ctx, "old", day); err != nil || n != 0 {
		t.Fatalf("a second backfill: %d shards, %v; want none", n, err)
	}
}

// An audit entry that is not what the ledger writes (an amount that is not
// an integer) stops its stream there, with an error naming the shard and the
// entry, and is never skipped; the other streams are exported.
func TestMalformedEntryStopsItsStreamOnly(t *testing.T) {
	f := newFixture(t, lease.Config{})
	f.open(t, "bad", 1)
	f.open(t, "good", 1)
	bad := lease.ShardKey{Campaign: "bad", Day: day, Shard: 0}
	id, err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: bad.AuditKey(), Values: []any{"ev", "release", "amount", "1e9", "ms", "1"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	f.spend(t, "good", 1, 5, "a", t0.Add(9*time.Hour))
	m := export.NewMetrics(nil)
	e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "one"}, m, nil)
	for range 2 {
		if _, err := e.Pass(ctx); err == nil || !strings.Contains(err.Error(), bad.String()+" entry "+id) || !strings.Contains(err.Error(), `amount "1e9"`) {
			t.Fatalf("pass over a malformed entry: %v", err)
		}
	}
	if v := counterValue(t, m.Errors.WithLabelValues("entry")); v != 2 {
		t.Fatalf("pacer_export_errors_total{stage=entry} = %v, want 2", v)
	}
	good, ok, err := export.DayTotals(ctx, f.db, "good", day)
	if err != nil || !ok || good.Leases != 5 {
		t.Fatalf("the good campaign's totals: %+v, %v, %v", good, ok, err)
	}
	if n := f.rdb.XLen(ctx, bad.AuditKey()).Val(); n != 2 {
		t.Fatalf("the bad stream holds %d entries, want its 2 (nothing past the bad one acknowledged or trimmed)", n)
	}
}

// A retired exporter's group is dropped from every stream, and the ledger
// caps those streams again.
func TestDropGroupCapsTheStreamsAgain(t *testing.T) {
	f := newFixture(t, lease.Config{AuditMaxLen: 10})
	f.open(t, "dg", 1)
	e := f.exporter("one", export.Config{NoTrim: true})
	passes(t, e)
	k := lease.ShardKey{Campaign: "dg", Day: day, Shard: 0}
	f.spend(t, "dg", 1, 50, "a", t0.Add(9*time.Hour))
	if n := f.rdb.XLen(ctx, k.AuditKey()).Val(); n < 100 {
		t.Fatalf("the exported stream holds %d entries: capped while its group was there", n)
	}
	if n, err := e.DropGroup(ctx); err != nil || n != 1 {
		t.Fatalf("DropGroup: %d, %v; want 1", n, err)
	}
	f.spend(t, "dg", 1, 50, "b", t0.Add(10*time.Hour))
	if n := f.rdb.XLen(ctx, k.AuditKey()).Val(); n >= 100 {
		t.Fatalf("after the group was dropped the stream holds %d entries: not capped", n)
	}
}

// holdIdle leaves n connections idle in db's pool.
func holdIdle(t *testing.T, db *pgxpool.Pool, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := db.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
	if idle := db.Stat().IdleConns(); idle < int32(n) {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
}
