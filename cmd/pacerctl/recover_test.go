package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// A Redis restored from a copy taken before a run leased and spent: check
// --sql exits 1 naming the shard and run and pointing at recover;
// recover --dry-run says what it would do and writes nothing; recover
// raises the shard by what the run spent; then check --sql passes and a
// second recover does nothing.
func TestRecoverFromSQLAfterARestore(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	h.ok("campaign", "set", "rv", "--daily", "100units", "--shards", "2")
	day := h.openToday("rv")
	dsn, db := pgtest.Pool(t, pgtest.Own(t))
	if _, err := export.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	rdb := h.redis.Client()
	e := export.New(rdb, h.ledger, db, export.Config{}, nil, nil)
	if _, err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	backup := redistest.Snapshot(t, h.redis.Client())

	k := lease.ShardKey{Campaign: "rv", Day: day.Key, Shard: 1}
	g, err := h.ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "h-b1-1", Holder: "h", Want: 3_000_000, Expiry: t0.Add(30 * time.Second),
		Now: t0, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000}, Grace: 5 * time.Second, DayStart: day.Start})
	if err != nil || g.Granted != 3_000_000 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	if _, err := h.ledger.Release(ctx, k, "h-b1-1", 1_000_000, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	h.ok("check", "--sql", dsn)
	redistest.RestoreSnapshot(t, h.redis.Client(), backup)
	before, err := h.ledger.ReadShard(ctx, k)
	if err != nil {
		t.Fatal(err)
	}

	r := h.run("check", "--sql", dsn)
	if r.code != 1 || !strings.Contains(r.stdout, "FAIL sql rv/"+day.Key+"/1 run h-b1: ledger granted=0 returned=0, PostgreSQL granted=3000000 returned=1000000: 2000000 micros") ||
		!strings.Contains(r.stdout, "pacerctl recover --from-sql") {
		t.Fatalf("check --sql after the restore: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	out := h.ok("recover", "--from-sql", dsn, "--dry-run")
	if !strings.Contains(out, "behind rv/"+day.Key+"/1 run h-b1") || !strings.Contains(out, "would re-record 0 lease(s) and raise 1 run(s) by 2000000 micros consumed; nothing written") {
		t.Fatalf("recover --dry-run: %q", out)
	}
	if sh, _ := h.ledger.ReadShard(ctx, k); sh != before {
		t.Fatalf("recover --dry-run wrote: %+v -> %+v", before, sh)
	}
	out = h.ok("recover", "--from-sql", dsn)
	after, err := h.ledger.ReadShard(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "raised rv/"+day.Key+"/1 run h-b1: 2000000 micros counted spent") || after.Spent != before.Spent+2_000_000 ||
		after.Budget != before.Budget || after.Remaining() != before.Remaining()-2_000_000 {
		t.Fatalf("recover: %q; shard %+v -> %+v; want 2,000,000 more spent out of what it could grant", out, before, after)
	}
	h.ok("check", "--sql", dsn)
	if out := h.ok("recover", "--from-sql", dsn); !strings.Contains(out, "0 run(s) raised, 0 micros counted spent") {
		t.Fatalf("a second recover: %q", out)
	}
}

// Bad input gets a clear error and writes nothing: no DSN, a DSN that
// fails, a database at another schema version, an unreachable ledger.
func TestRecoverRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	pg := pgtest.Own(t)
	bare, err := pg.CreateDB(ctx) // not migrated
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"recover"}, 2, "give --from-sql DSN"},
		{[]string{"recover", "--from-sql", "postgres://nobody@127.0.0.1:1/none?connect_timeout=5"}, 1, "recover: PostgreSQL is unreachable"},
		{[]string{"recover", "--from-sql", "not a dsn ="}, 1, "recover: PostgreSQL DSN"},
		{[]string{"recover", "--from-sql", bare}, 1, "schema version: no schema_migrations table"},
		{[]string{"recover", "--from-sql", bare, "--day", "yesterday"}, 2, "want a date YYYY-MM-DD"},
		{[]string{"--redis", t.TempDir() + "/none.sock", "recover", "--from-sql", bare}, 1, "the Redis ledger (--redis"},
		{[]string{"check", "--sql", bare}, 1, "check: export: schema version"},
	} {
		r := h.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("pacerctl %s: exit %d, %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.want)
		}
	}
}
