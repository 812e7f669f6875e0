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
// stream's cursor, in one transaction: all of it or none. Entries already
// exported (a redelivery after a crash between commit and XACK, an entry two
// exporters both read, a replay) are skipped by the rows' primary key, and
// only the rows inserted count towards the totals. It returns how many were
// inserted.
func (s *store) commit(ctx context.Context, k lease.ShardKey, evs []event) (int, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("export %s: begin: %w", k, err)
	}
	defer tx.Rollback(ctx)
	if err := s.step(ctx, "begun"); err != nil {
		return 0, err
	}
	cur, err := lockCursor(ctx, tx, k, s.now())
	if err != nil {
		return 0, err
	}
	inserted, err := insertEvents(ctx, tx, k, evs)
	if err != nil {
		return 0, err
	}
	if err := s.step(ctx, "inserted"); err != nil {
		return 0, err
	}
	loc, err := s.zones.of(ctx, k.Campaign)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", k, err)
	}
	if err := addTotals(ctx, tx, k, loc, inserted); err != nil {
		return 0, err
	}
	if err := s.step(ctx, "totals"); err != nil {
		return 0, err
	}
	for _, e := range evs {
		if cur.last.less(e.id) {
			cur.last = e.id
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE export_cursors SET last_ms = $4, last_seq = $5, events = events + $6, updated_at = $7
		WHERE campaign = $1 AND day = $2::text::date AND shard = $3`, k.Campaign, k.Day, k.Shard, cur.last.ms, cur.last.seq, len(inserted), s.now()); err != nil {
		return 0, fmt.Errorf("export %s: cursor: %w", k, err)
	}
	if err := s.step(ctx, "cursor"); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("export %s: commit: %w", k, err)
	}
	return len(inserted), nil
}

// lockCursor returns the stream's cursor, created at 0-0 if it has none, and
// holds its row lock until the transaction ends: one statement.
func lockCursor(ctx context.Context, tx pgx.Tx, k lease.ShardKey, now time.Time) (cursor, error) {
	var cur cursor
	err := tx.QueryRow(ctx, `INSERT INTO export_cursors AS c (campaign, day, shard, last_ms, last_seq, events, updated_at)
		VALUES ($1, $2::text::date, $3, 0, 0, 0, $4) ON CONFLICT (campaign, day, shard) DO UPDATE SET last_ms = c.last_ms
		RETURNING last_ms, last_seq, events`, k.Campaign, k.Day, k.Shard, now).Scan(&cur.last.ms, &cur.last.seq, &cur.events)
	if err != nil {
		return cursor{}, fmt.Errorf("export %s: cursor: %w", k, err)
	}
	return cur, nil
}

// insertEvents inserts the rows not there yet, in one statement, and
// returns the events inserted.
func insertEvents(ctx context.Context, tx pgx.Tx, k lease.ShardKey, evs []event) ([]event, error) {
	n := len(evs)
	if n == 0 {
		return nil, nil
	}
	ms, seq, micros, unused := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	kind, ref, holder, fields := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at := make([]time.Time, n)
	byID := make(map[streamID]event, n)
	for i, e := range evs {
		ms[i], seq[i], micros[i], unused[i] = e.id.ms, e.id.seq, e.micros, e.unused
		kind[i], ref[i], holder[i], at[i] = e.kind, e.ref, e.holder, e.at
		fields[i] = string(appendFieldsJSON(nil, e.fields))
		byID[e.id] = e
	}
	rows, err := tx.Query(ctx, `INSERT INTO ledger_events (campaign, day, shard, entry_ms, entry_seq, kind, micros, unused, ref, holder, at, fields)
		SELECT $1, $2::text::date, $3, u.ms, u.seq, u.kind, u.micros, u.unused, u.ref, u.holder, u.at, u.f::jsonb
		FROM unnest($4::bigint[], $5::bigint[], $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::text[], $11::timestamptz[], $12::text[])
			AS u(ms, seq, kind, micros, unused, ref, holder, at, f)
		ON CONFLICT DO NOTHING RETURNING entry_ms, entry_seq`,
		k.Campaign, k.Day, k.Shard, ms, seq, kind, micros, unused, ref, holder, at, fields)
	if err != nil {
		return nil, fmt.Errorf("export %s: insert: %w", k, err)
	}
	var out []event
	var id streamID
	if _, err := pgx.ForEachRow(rows, []any{&id.ms, &id.seq}, func() error {
		out = append(out, byID[id])
		return nil
	}); err != nil {
		return nil, fmt.Errorf("export %s: insert: %w", k, err)
	}
	return out, nil
}

// addTotals adds the inserted events to their day's totals and to their
// hours' (the hour of the change in the campaign's time zone loc).
func addTotals(ctx context.Context, tx pgx.Tx, k lease.ShardKey, loc *time.Location, evs []event) error {
	if len(evs) == 0 {
		return nil
	}
	var day Totals
	hours := map[time.Time]*Totals{}
	for _, e := range evs {
		if err := day.add(e); err != nil {
			return fmt.Errorf("export %s: %w", k, err)
		}
		h := hourOf(e.at, loc)
		if hours[h] == nil {
			hours[h] = &Totals{}
		}
		if err := hours[h].add(e); err != nil {
			return fmt.Errorf("export %s: %w", k, err)
		}
	}
	args := []any{k.Campaign, k.Day}
	for _, v := range day.columns() {
		args = append(args, v)
	}
	if _, err := tx.Exec(ctx, upsertTotals("spend_days", "campaign, day", "$1, $2::text::date", 3), args...); err != nil {
		return fmt.Errorf("export %s: day totals: %w", k, err)
	}
	for h, t := range hours {
		args := []any{k.Campaign, k.Day, h}
		for _, v := range t.columns() {
			args = append(args, v)
		}
		if _, err := tx.Exec(ctx, upsertTotals("spend_hours", "campaign, day, hour", "$1, $2::text::date, $3", 4), args...); err != nil {
			return fmt.Errorf("export %s: hour totals: %w", k, err)
		}
	}
	return nil
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
