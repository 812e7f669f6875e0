package export

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// migrationEntries are entries of every kind with fields that no column
// held before migration 3 (a grant's expiry, a release's refunds, a
// settle's reason, an adjust's owed), as the ledger's scripts write them,
// for shard's stream: n of each, in id order.
func migrationEntries(t *testing.T, k lease.ShardKey, n int) ([]event, []map[string]string) {
	t.Helper()
	base := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC).UnixMilli()
	var evs []event
	var fields []map[string]string
	add := func(ms int64, kv ...string) {
		m := redis.XMessage{ID: strconv.FormatInt(ms, 10) + "-" + strconv.Itoa(k.Shard), Values: map[string]any{}}
		f := map[string]string{"ms": strconv.FormatInt(ms, 10)}
		for i := 0; i < len(kv); i += 2 {
			f[kv[i]] = kv[i+1]
		}
		for key, v := range f {
			m.Values[key] = v
		}
		e, err := parseEntry(k, m)
		if err != nil {
			t.Fatal(err)
		}
		evs, fields = append(evs, e), append(fields, f)
	}
	add(base, "ev", "open", "amount", "1000000")
	for i := range n {
		ms, id := base+int64(1+10*i), "h1-b0-"+strconv.Itoa(i)
		add(ms, "ev", "grant", "lease", id, "holder", "h1", "amount", "5000", "expiry", strconv.FormatInt(ms+30_000, 10))
		add(ms+1, "ev", "release", "lease", id, "holder", "h1", "amount", "5000", "unused", "1000", "refunded", "200")
		add(ms+2, "ev", "grant", "lease", id+"x", "holder", "h1", "amount", "3000", "expiry", strconv.FormatInt(ms+30_000, 10))
		add(ms+3, "ev", "settle", "lease", id+"x", "holder", "h1", "amount", "3000", "by", "expired")
		add(ms+4, "ev", "adjust", "op", "cut-"+strconv.Itoa(i), "amount", "-100", "owed", "0")
	}
	return evs, fields
}

// A database that schema version 2's exporter wrote migrates to this
// build's schema with every row kept (what fields held and now has a column
// moved there), every cursor in place and every total as it was; entries
// delivered again after the migration (those exported before it, with the
// rest of the stream) are written once.
func TestMigrationKeepsRowsAndCursors(t *testing.T) {
	ctx := context.Background()
	_, db := pgtest.Pool(t, pgtest.Own(t))
	if v, err := migrate(ctx, db, 2); err != nil || v != 2 {
		t.Fatalf("migrate to 2: %d, %v", v, err)
	}
	keys := []lease.ShardKey{{Campaign: "m", Day: "2026-11-21", Shard: 0}, {Campaign: "m", Day: "2026-11-21", Shard: 1}}
	var all []event
	before := map[lease.ShardKey]int{}
	for _, k := range keys {
		evs, fields := migrationEntries(t, k, 30)
		all = append(all, evs...)
		before[k] = 2 * len(evs) / 3
		for _, part := range [][2]int{{0, before[k] / 2}, {before[k] / 2, before[k]}} {
			if n, err := legacyCommit(ctx, db, k, evs[part[0]:part[1]], fields[part[0]:part[1]]); err != nil || n != part[1]-part[0] {
				t.Fatalf("version 2's statement wrote %d of %d rows: %v", n, part[1]-part[0], err)
			}
		}
	}
	days, hours := totalsTable(t, db, "spend_days"), totalsTable(t, db, "spend_hours")
	if v, err := Migrate(ctx, db); err != nil || v != SchemaVersion() || v != 3 {
		t.Fatalf("Migrate: %d, %v; want 3", v, err)
	}
	if err := CheckSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	checkMigratedRows(t, db, before)
	if got := totalsTable(t, db, "spend_days"); got != days {
		t.Errorf("spend_days changed across the migration:\n%s\nwant\n%s", got, days)
	}
	if got := totalsTable(t, db, "spend_hours"); got != hours {
		t.Errorf("spend_hours changed across the migration")
	}

	s := &store{db: db, step: func(context.Context, string) error { return nil }, now: time.Now,
		zones: &zones{byID: map[string]*time.Location{"m": time.UTC}}}
	for _, k := range keys {
		evs, _ := migrationEntries(t, k, 30)
		n, err := s.commit(ctx, k, evs)
		if err != nil || n != len(evs)-before[k] {
			t.Fatalf("%s: the stream delivered again wrote %d rows (%v), want the %d not exported before", k, n, err, len(evs)-before[k])
		}
	}
	var want Totals
	for _, e := range all {
		if err := want.add(e); err != nil {
			t.Fatal(err)
		}
	}
	var rows, cursorEvents int64
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_events), (SELECT sum(events) FROM export_cursors)`).Scan(&rows, &cursorEvents); err != nil {
		t.Fatal(err)
	}
	if rows != int64(len(all)) || cursorEvents != int64(len(all)) {
		t.Errorf("ledger_events holds %d rows, the cursors count %d; %d entries", rows, cursorEvents, len(all))
	}
	got, ok, err := DayTotals(ctx, db, "m", "2026-11-21")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got != want {
		t.Errorf("spend_days after the migration and the rest of the streams: %+v, want %+v", got, want)
	}
}

// checkMigratedRows checks what migration 3 made of version 2's rows: the
// count per stream, the new columns filled from fields, fields left with
// only what no column holds (NULL for a grant and a release), the streams'
// ids unique and the key refusing a duplicate.
func checkMigratedRows(t *testing.T, db *pgxpool.Pool, before map[lease.ShardKey]int) {
	t.Helper()
	ctx := context.Background()
	for k, n := range before {
		var rows int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM ledger_events WHERE stream = (SELECT stream FROM export_cursors
			WHERE campaign = $1 AND day = $2::text::date AND shard = $3)`, k.Campaign, k.Day, k.Shard).Scan(&rows); err != nil || rows != n {
			t.Errorf("%s: %d rows after the migration (%v), want %d", k, rows, err, n)
		}
	}
	byKind := map[string]string{}
	rows, err := db.Query(ctx, `SELECT DISTINCT ON (kind) kind, json_build_object('refunded', refunded, 'expiry', expiry - at, 'fields', fields, 'ref', ref)::text
		FROM ledger_events WHERE shard = 0 ORDER BY kind, entry_ms`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var kind, v string
		if err := rows.Scan(&kind, &v); err != nil {
			t.Fatal(err)
		}
		byKind[kind] = v
	}
	for kind, want := range map[string]string{
		"open":    `{"refunded" : 0, "expiry" : null, "fields" : null, "ref" : ""}`,
		"grant":   `{"refunded" : 0, "expiry" : "00:00:30", "fields" : null, "ref" : "h1-b0-0"}`,
		"release": `{"refunded" : 200, "expiry" : null, "fields" : null, "ref" : "h1-b0-0"}`,
		"settle":  `{"refunded" : 0, "expiry" : null, "fields" : {"by": "expired"}, "ref" : "h1-b0-0x"}`,
		"adjust":  `{"refunded" : 0, "expiry" : null, "fields" : {"owed": "0"}, "ref" : "cut-0"}`,
	} {
		if byKind[kind] != want {
			t.Errorf("a %s row after the migration: %s, want %s", kind, byKind[kind], want)
		}
	}
	var streams, ids int
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT stream) FROM export_cursors`).Scan(&streams, &ids); err != nil || streams != 2 || ids != 2 {
		t.Errorf("export_cursors: %d rows, %d stream ids (%v); want 2 and 2", streams, ids, err)
	}
	_, err = db.Exec(ctx, `INSERT INTO ledger_events (stream, entry_ms, entry_seq, campaign, day, shard, kind, micros, unused, refunded, ref, holder, at)
		SELECT stream, entry_ms, entry_seq, campaign, day, shard, kind, micros, unused, refunded, ref, holder, at FROM ledger_events LIMIT 1`)
	if !isUniqueViolation(err) {
		t.Errorf("a row inserted twice after the migration: %v, want a unique violation", err)
	}
}

// totalsTable is a totals table's rows, as JSON text in key order.
func totalsTable(t *testing.T, db *pgxpool.Pool, table string) string {
	t.Helper()
	var s string
	if err := db.QueryRow(context.Background(), `SELECT coalesce(json_agg(x ORDER BY x::text)::text, '') FROM `+table+` x`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil || s == "" {
		t.Fatalf("%s: %q, %v", table, s, err)
	}
	return s
}
