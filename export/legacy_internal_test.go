package export

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/lease"
)

// legacyCommit writes a batch as schema version 2's exporter did, in one
// statement (legacyCommitSQL): BenchmarkExportThroughput's "old" way.
// fields are each entry's fields as the ledger wrote them (nil: rebuilt by
// legacyFields).
func legacyCommit(ctx context.Context, db *pgxpool.Pool, k lease.ShardKey, evs []event, fields []map[string]string) (int, error) {
	if fields == nil {
		for _, e := range evs {
			fields = append(fields, legacyFields(e))
		}
	}
	args, err := legacyCommitArgs(k, evs, fields, time.UTC, time.Now())
	if err != nil {
		return 0, err
	}
	var inserted int
	if err := db.QueryRow(ctx, legacyCommitSQL, args...).Scan(&inserted); err != nil {
		return 0, fmt.Errorf("export %s: commit: %w", k, err)
	}
	return inserted, nil
}

// legacyFields are an entry's fields as the ledger wrote them, the jsonb
// copy schema version 2 kept of every entry.
func legacyFields(e event) map[string]string {
	f := map[string]string{"ev": e.kind, "amount": strconv.FormatInt(e.micros, 10), "ms": strconv.FormatInt(e.at.UnixMilli(), 10)}
	if e.kind == "release" {
		f["unused"] = strconv.FormatInt(e.unused, 10)
	}
	if e.ref != "" {
		f["lease"] = e.ref
	}
	if e.holder != "" {
		f["holder"] = e.holder
	}
	if !e.expiry.IsZero() {
		f["expiry"] = strconv.FormatInt(e.expiry.UnixMilli(), 10)
	}
	if e.refunded != 0 {
		f["refunded"] = strconv.FormatInt(e.refunded, 10)
	}
	for k, v := range e.extra {
		f[k] = v
	}
	return f
}

// legacyCommitSQL (schema version 2's statement) inserts a batch's rows ($4-$12, one array a column), adds what
// the rows inserted add to the day's totals and to each hour's ($13: each
// entry's hour; $14-$24: each entry's part of every total but events, from
// Totals.add), and moves the stream's cursor to the batch's last id ($25,
// $26) if it is past it, counting the rows inserted. The day's row is
// written before the hours' (the hours read the day's RETURNING), so two
// streams of a campaign lock them in one order.
var legacyCommitSQL = func() string {
	cols := strings.Split(totalsColumns, ", ")
	var parts, sums, sets []string
	for i, c := range cols {
		sets = append(sets, c+" = %[1]s."+c+" + EXCLUDED."+c)
		if c == "events" {
			sums = append(sums, "count(*)")
			continue
		}
		parts = append(parts, "$"+strconv.Itoa(14+len(parts))+"::bigint[]")
		sums = append(sums, "sum(p.v"+strconv.Itoa(i)+")::bigint")
	}
	var names []string
	for i, c := range cols {
		if c != "events" {
			names = append(names, "v"+strconv.Itoa(i))
		}
	}
	set := func(table string) string { return fmt.Sprintf(strings.Join(sets, ", "), table) }
	return `WITH ins AS (
		INSERT INTO ledger_events (campaign, day, shard, entry_ms, entry_seq, kind, micros, unused, ref, holder, at, fields)
		SELECT $1, $2::text::date, $3, u.ms, u.seq, u.kind, u.micros, u.unused, u.ref, u.holder, u.at, u.f::jsonb
		FROM unnest($4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::text[], $11::timestamptz[], $12::text[])
			AS u(ms, seq, kind, micros, unused, ref, holder, at, f)
		ON CONFLICT DO NOTHING RETURNING entry_ms, entry_seq),
	p AS (SELECT u.* FROM unnest($4::bigint[], $5::bigint[], $13::timestamptz[], ` + strings.Join(parts, ", ") + `)
			AS u(ms, seq, hour, ` + strings.Join(names, ", ") + `)
		JOIN ins ON ins.entry_ms = u.ms AND ins.entry_seq = u.seq),
	d AS (INSERT INTO spend_days (campaign, day, ` + totalsColumns + `)
		SELECT $1, $2::text::date, ` + strings.Join(sums, ", ") + ` FROM p HAVING count(*) > 0
		ON CONFLICT (campaign, day) DO UPDATE SET ` + set("spend_days") + ` RETURNING 1),
	h AS (INSERT INTO spend_hours (campaign, day, hour, ` + totalsColumns + `)
		SELECT $1, $2::text::date, p.hour, ` + strings.Join(sums, ", ") + ` FROM p WHERE EXISTS (SELECT FROM d) GROUP BY p.hour ORDER BY p.hour
		ON CONFLICT (campaign, day, hour) DO UPDATE SET ` + set("spend_hours") + ` RETURNING 1),
	c AS (INSERT INTO export_cursors AS x (campaign, day, shard, last_ms, last_seq, events, updated_at)
		VALUES ($1, $2::text::date, $3, $25, $26, (SELECT count(*) FROM ins), $27)
		ON CONFLICT (campaign, day, shard) DO UPDATE SET
			last_ms = CASE WHEN (EXCLUDED.last_ms, EXCLUDED.last_seq) > (x.last_ms, x.last_seq) THEN EXCLUDED.last_ms ELSE x.last_ms END,
			last_seq = CASE WHEN (EXCLUDED.last_ms, EXCLUDED.last_seq) > (x.last_ms, x.last_seq) THEN EXCLUDED.last_seq ELSE x.last_seq END,
			events = x.events + EXCLUDED.events, updated_at = EXCLUDED.updated_at
		RETURNING 1)
	SELECT (SELECT count(*) FROM ins)::int + 0 * ((SELECT count(*) FROM h) + (SELECT count(*) FROM c))`
}()

// commitArgs are legacyCommitSQL's arguments for a batch of stream k: the rows,
// each entry's hour in loc and its part of the totals, the batch's last id.
func legacyCommitArgs(k lease.ShardKey, evs []event, entryFields []map[string]string, loc *time.Location, now time.Time) ([]any, error) {
	n := len(evs)
	ms, seq, micros, unused := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	kind, ref, holder, fields := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at, hour := make([]time.Time, n), make([]time.Time, n)
	ncols := len(strings.Split(totalsColumns, ", "))
	parts := make([][]int64, ncols)
	for i := range parts {
		parts[i] = make([]int64, n)
	}
	var last streamID
	for i, e := range evs {
		ms[i], seq[i], micros[i], unused[i] = e.id.ms, e.id.seq, e.micros, e.unused
		kind[i], ref[i], holder[i], at[i] = e.kind, e.ref, e.holder, e.at
		fields[i] = string(appendFieldsJSON(nil, entryFields[i]))
		hour[i] = hourOf(e.at, loc)
		var t Totals
		if err := t.add(e); err != nil {
			return nil, fmt.Errorf("export %s: %w", k, err)
		}
		for j, v := range t.columns() {
			parts[j][i] = v
		}
		if last.less(e.id) {
			last = e.id
		}
	}
	args := []any{k.Campaign, k.Day, k.Shard, ms, seq, kind, micros, unused, ref, holder, at, fields, hour}
	for j, c := range strings.Split(totalsColumns, ", ") {
		if c != "events" {
			args = append(args, parts[j])
		}
	}
	return append(args, last.ms, last.seq, now), nil
}
