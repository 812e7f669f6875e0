package export

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pacer/pacer/lease"
)

// store is the exporter's PostgreSQL side: rows, totals and cursors, each
// batch in one transaction.
type store struct {
	db    *pgxpool.Pool
	step  func(ctx context.Context, step string) error
	now   func() time.Time
	zones *zones // each campaign's time zone, for spend_hours
}

// cursor is a stream's export position: the highest entry id exported and
// how many entries were.
type cursor struct {
	last   streamID
	events int64
	// skipped: entries recorded as gone in trimmed and missing gaps.
	skipped int64
}

// cursors reads every stream's cursor (one query per pass).
func (s *store) cursors(ctx context.Context) (map[lease.ShardKey]cursor, error) {
	rows, err := s.db.Query(ctx, `SELECT campaign, day::text, shard, last_ms, last_seq, events FROM export_cursors`)
	if err != nil {
		return nil, fmt.Errorf("export: cursors: %w", err)
	}
	out := map[lease.ShardKey]cursor{}
	var k lease.ShardKey
	var c cursor
	_, err = pgx.ForEachRow(rows, []any{&k.Campaign, &k.Day, &k.Shard, &c.last.ms, &c.last.seq, &c.events}, func() error {
		out[k] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("export: cursors: %w", err)
	}
	rows, err = s.db.Query(ctx, `SELECT campaign, day::text, shard, sum(missing)::bigint FROM export_gaps
		WHERE kind IN ('trimmed', 'missing') GROUP BY campaign, day, shard`)
	if err != nil {
		return nil, fmt.Errorf("export: gaps: %w", err)
	}
	var skipped int64
	_, err = pgx.ForEachRow(rows, []any{&k.Campaign, &k.Day, &k.Shard, &skipped}, func() error {
		c := out[k]
		c.skipped = skipped
		out[k] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("export: gaps: %w", err)
	}
	return out, nil
}

// commit writes a batch of one stream's entries, the totals they add and the
// stream's cursor in one statement (commitSQL), so in one round trip and one
// transaction: all of it or none. Entries already exported (a redelivery
// after a crash between commit and XACK, an entry two exporters both read, a
// replay) are skipped by the rows' primary key, and only the rows inserted
// count towards the totals. It returns how many were inserted.
func (s *store) commit(ctx context.Context, k lease.ShardKey, evs []event) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	loc, err := s.zones.of(ctx, k.Campaign)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", k, err)
	}
	args, err := commitArgs(k, evs, loc, s.now())
	if err != nil {
		return 0, err
	}
	if err := s.step(ctx, "encoded"); err != nil {
		return 0, err
	}
	var inserted int
	if err := s.db.QueryRow(ctx, commitSQL, args...).Scan(&inserted); err != nil {
		return 0, fmt.Errorf("export %s: commit: %w", k, err)
	}
	return inserted, nil
}

// commitSQL inserts a batch's rows ($4-$12, one array a column), adds what
// the rows inserted add to the day's totals and to each hour's ($13: each
// entry's hour; $14-$24: each entry's part of every total but events, from
// Totals.add), and moves the stream's cursor to the batch's last id ($25,
// $26) if it is past it, counting the rows inserted. The day's row is
// written before the hours' (the hours read the day's RETURNING), so two
// streams of a campaign lock them in one order.
var commitSQL = func() string {
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

// commitArgs are commitSQL's arguments for a batch of stream k: the rows,
// each entry's hour in loc and its part of the totals, the batch's last id.
func commitArgs(k lease.ShardKey, evs []event, loc *time.Location, now time.Time) ([]any, error) {
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
		fields[i] = string(appendFieldsJSON(nil, e.fields))
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

// upsertTotals is an INSERT … ON CONFLICT that adds to a totals row.
func upsertTotals(table, key, keyValues string, first int) string {
	cols := strings.Split(totalsColumns, ", ")
	vals := make([]string, len(cols))
	sets := make([]string, len(cols))
	for i, c := range cols {
		vals[i] = "$" + strconv.Itoa(first+i)
		sets[i] = c + " = " + table + "." + c + " + EXCLUDED." + c
	}
	return "INSERT INTO " + table + " (" + key + ", " + totalsColumns + ") VALUES (" + keyValues + ", " +
		strings.Join(vals, ", ") + ") ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(sets, ", ")
}

// Gap is a stretch of a stream that was not exported: entries gone before
// the exporter read them ("trimmed": capped or trimmed past the cursor,
// "missing": the stream is gone while its shard's counters say it held more)
// or a stream behind what was exported ("behind": Redis restored from an
// older copy).
type Gap struct {
	Shard   lease.ShardKey
	Kind    string
	After   string // trimmed, missing: the last id exported before it ("0-0": none); behind: Redis's last id
	Until   string // trimmed: the stream's first id now; behind: the last id exported; missing: ""
	Missing int64  // entries it holds (from the streams' and shards' counters)
}

// recordGap stores a gap once (per stream, kind and cursor) and reports
// whether it is new.
func (s *store) recordGap(ctx context.Context, g Gap) (bool, error) {
	tag, err := s.db.Exec(ctx, `INSERT INTO export_gaps (campaign, day, shard, kind, after_id, until_id, missing, detected_at)
		VALUES ($1, $2::text::date, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
		g.Shard.Campaign, g.Shard.Day, g.Shard.Shard, g.Kind, g.After, g.Until, g.Missing, s.now())
	if err != nil {
		return false, fmt.Errorf("export %s: record gap: %w", g.Shard, err)
	}
	return tag.RowsAffected() == 1, nil
}

// hourOf is the start of t's hour in loc: in a zone offset by a fraction of
// an hour from UTC (Asia/Kolkata, +05:30), the campaign's hours start at
// half past, UTC.
func hourOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), 0, 0, 0, loc)
}

// zones caches each campaign's time zone, read from the ledger's settings
// the first time a campaign's events are exported. A campaign the ledger no
// longer holds counts in UTC (and is asked again next time). Safe for
// concurrent use.
type zones struct {
	ledger *lease.Ledger
	mu     sync.Mutex
	byID   map[string]*time.Location
}

func newZones(l *lease.Ledger) *zones { return &zones{ledger: l, byID: map[string]*time.Location{}} }

func (z *zones) of(ctx context.Context, campaign string) (*time.Location, error) {
	z.mu.Lock()
	loc, ok := z.byID[campaign]
	z.mu.Unlock()
	if ok {
		return loc, nil
	}
	c, err := z.ledger.GetCampaign(ctx, campaign)
	var unknown *lease.UnknownCampaignError
	if errors.As(err, &unknown) {
		return time.UTC, nil
	}
	if err != nil {
		return nil, fmt.Errorf("time zone: %w", err)
	}
	loc = c.Location()
	z.mu.Lock()
	z.byID[campaign] = loc
	z.mu.Unlock()
	return loc, nil
}
