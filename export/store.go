package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
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
	// commitWith, if set, writes batches instead of commit: a benchmark's
	// comparison with the statement an older schema used.
	commitWith func(ctx context.Context, k lease.ShardKey, evs []event) (int, error)
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
// stream's cursor in one transaction (write): all of it or none. Entries
// already exported (a redelivery after a crash between commit and XACK, an
// entry two exporters both read, a replay) are skipped by the rows' unique
// key, and only the rows inserted count towards the totals. It returns how
// many were inserted.
func (s *store) commit(ctx context.Context, k lease.ShardKey, evs []event) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	if s.commitWith != nil {
		return s.commitWith(ctx, k, evs)
	}
	loc, err := s.zones.of(ctx, k.Campaign)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", k, err)
	}
	b := batch{k: k, evs: evs, loc: loc}
	if b.day, err = time.Parse(time.DateOnly, k.Day); err != nil {
		return 0, fmt.Errorf("export %s: day: %w", k, err)
	}
	if err := s.step(ctx, "encoded"); err != nil {
		return 0, err
	}
	n, err := s.write(ctx, &b, true)
	if isUniqueViolation(err) {
		// A row past the cursor that no exporter wrote (by hand): the
		// copy hit the unique key, and rolled back. Every entry goes
		// through the conflict check instead.
		n, err = s.write(ctx, &b, false)
	}
	return n, err
}

// batch is one stream's entries on their way into one transaction.
type batch struct {
	k   lease.ShardKey
	day time.Time
	loc *time.Location // the campaign's, for spend_hours
	evs []event
	buf []byte // the COPY data, kept for a second try
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// write is commit's transaction. The stream's cursor row is locked first
// (created, with the stream's id, for a stream's first batch). Every row of
// the stream has an id at or below its cursor, since the cursor moves with
// the rows under that lock: so an entry past it cannot be a duplicate, and
// those go in by COPY (copyNew), the cheap way; an entry at or below it
// (delivered again, read by two exporters, replayed) goes through INSERT …
// ON CONFLICT DO NOTHING, which skips it if it is there. Then the totals of
// the rows inserted (the day's, each hour's: summed here) and the cursor,
// in one round trip. The day's row is written before the hours', and a
// stream's cursor before both, so two streams of a campaign lock them in
// one order.
func (s *store) write(ctx context.Context, b *batch, copyNew bool) (int, error) {
	k := b.k
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("export %s: begin: %w", k, err)
	}
	defer tx.Rollback(ctx)
	stream, last, err := lockCursor(ctx, tx, k, s.now())
	if err != nil {
		return 0, err
	}
	fresh, again := b.evs, []event(nil)
	if !copyNew {
		fresh, again = nil, b.evs
	} else if !last.less(minID(b.evs)) {
		fresh, again = splitAt(b.evs, last)
	}
	inserted := fresh
	if len(fresh) > 0 {
		b.buf = copyRows(b.buf[:0], stream, k.Campaign, int32(b.day.Sub(pgEpoch).Hours()/24), int32(k.Shard), fresh)
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(b.buf), copySQL); err != nil {
			return 0, fmt.Errorf("export %s: copy: %w", k, err)
		}
	}
	if len(again) > 0 {
		ins, err := insertAgain(ctx, tx, stream, k, again)
		if err != nil {
			return 0, err
		}
		inserted = append(slices.Clip(inserted), ins...)
	}
	if err := s.step(ctx, "copied"); err != nil {
		return 0, err
	}
	q, err := totalsBatch(k, inserted, b.loc)
	if err != nil {
		return 0, err
	}
	last = laterID(last, maxID(b.evs))
	q.Queue(`UPDATE export_cursors SET last_ms = $1, last_seq = $2, events = events + $3, updated_at = $4 WHERE stream = $5`,
		last.ms, last.seq, len(inserted), s.now(), stream)
	if err := tx.SendBatch(ctx, q).Close(); err != nil {
		return 0, fmt.Errorf("export %s: totals: %w", k, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("export %s: commit: %w", k, err)
	}
	return len(inserted), nil
}

var copySQL = "COPY ledger_events (" + copyColumns + ") FROM STDIN (FORMAT binary)"

// lockCursor locks stream k's cursor row for the transaction and returns
// the stream's id and its last id exported; a stream without one gets its
// row (0-0, no events) and so its id.
func lockCursor(ctx context.Context, tx pgx.Tx, k lease.ShardKey, now time.Time) (int32, streamID, error) {
	var stream int32
	var last streamID
	for range 2 {
		err := tx.QueryRow(ctx, `SELECT stream, last_ms, last_seq FROM export_cursors
			WHERE campaign = $1 AND day = $2::text::date AND shard = $3 FOR UPDATE`, k.Campaign, k.Day, k.Shard).Scan(&stream, &last.ms, &last.seq)
		if !errors.Is(err, pgx.ErrNoRows) {
			if err != nil {
				return 0, last, fmt.Errorf("export %s: cursor: %w", k, err)
			}
			return stream, last, nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO export_cursors (campaign, day, shard, last_ms, last_seq, events, updated_at)
			VALUES ($1, $2::text::date, $3, 0, 0, 0, $4) ON CONFLICT DO NOTHING`, k.Campaign, k.Day, k.Shard, now); err != nil {
			return 0, last, fmt.Errorf("export %s: cursor: %w", k, err)
		}
	}
	return 0, last, fmt.Errorf("export %s: cursor: no row after inserting it", k)
}

func minID(evs []event) streamID {
	m := evs[0].id
	for _, e := range evs[1:] {
		if e.id.less(m) {
			m = e.id
		}
	}
	return m
}

func maxID(evs []event) streamID {
	var m streamID
	for _, e := range evs {
		if m.less(e.id) {
			m = e.id
		}
	}
	return m
}

func laterID(a, b streamID) streamID {
	if a.less(b) {
		return b
	}
	return a
}

// splitAt divides evs into the entries past last and the others.
func splitAt(evs []event, last streamID) (past, others []event) {
	for _, e := range evs {
		if last.less(e.id) {
			past = append(past, e)
		} else {
			others = append(others, e)
		}
	}
	return past, others
}

// insertAgain inserts the entries of evs ledger_events does not hold yet
// and returns them.
func insertAgain(ctx context.Context, tx pgx.Tx, stream int32, k lease.ShardKey, evs []event) ([]event, error) {
	n := len(evs)
	ms, seq, micros, unused, refunded := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	kind, ref, holder := make([]string, n), make([]string, n), make([]string, n)
	at, expiry, fields := make([]time.Time, n), make([]pgtype.Timestamptz, n), make([]pgtype.Text, n)
	for i, e := range evs {
		ms[i], seq[i], micros[i], unused[i], refunded[i] = e.id.ms, e.id.seq, e.micros, e.unused, e.refunded
		kind[i], ref[i], holder[i], at[i] = e.kind, e.ref, e.holder, e.at
		expiry[i] = pgtype.Timestamptz{Time: e.expiry, Valid: !e.expiry.IsZero()}
		if e.extra != nil {
			fields[i] = pgtype.Text{String: string(appendFieldsJSON(nil, e.extra)), Valid: true}
		}
	}
	rows, err := tx.Query(ctx, `INSERT INTO ledger_events (`+copyColumns+`)
		SELECT $1, u.ms, u.seq, $2, $3::text::date, $4, u.kind, u.micros, u.unused, u.refunded, u.ref, u.holder, u.at, u.expiry, u.f::jsonb
		FROM unnest($5::bigint[], $6::bigint[], $7::text[], $8::bigint[], $9::bigint[], $10::bigint[], $11::text[], $12::text[],
			$13::timestamptz[], $14::timestamptz[], $15::text[])
			AS u(ms, seq, kind, micros, unused, refunded, ref, holder, at, expiry, f)
		ON CONFLICT DO NOTHING RETURNING entry_ms, entry_seq`,
		stream, k.Campaign, k.Day, k.Shard, ms, seq, kind, micros, unused, refunded, ref, holder, at, expiry, fields)
	if err != nil {
		return nil, fmt.Errorf("export %s: insert: %w", k, err)
	}
	done := map[streamID]bool{}
	var id streamID
	if _, err := pgx.ForEachRow(rows, []any{&id.ms, &id.seq}, func() error { done[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("export %s: insert: %w", k, err)
	}
	var out []event
	for _, e := range evs {
		if done[e.id] {
			out = append(out, e)
			delete(done, e.id) // the same id twice in a batch is one row
		}
	}
	return out, nil
}

// hourTotals is what a batch adds to one hour of spend_hours.
type hourTotals struct {
	hour time.Time
	t    Totals
}

// totalsBatch sums evs (the rows a batch inserted) into the day's totals
// and each hour's (in loc), and queues their upserts: the day's, then the
// hours' in order. Nothing is queued for no rows.
func totalsBatch(k lease.ShardKey, evs []event, loc *time.Location) (*pgx.Batch, error) {
	q := &pgx.Batch{}
	if len(evs) == 0 {
		return q, nil
	}
	var day Totals
	var hours []hourTotals
	n := -1 // the hour the last entry went to
	for _, e := range evs {
		if err := day.add(e); err != nil {
			return nil, fmt.Errorf("export %s: %w", k, err)
		}
		if h := hourOf(e.at, loc); n < 0 || !hours[n].hour.Equal(h) {
			if n = slices.IndexFunc(hours, func(x hourTotals) bool { return x.hour.Equal(h) }); n < 0 {
				hours, n = append(hours, hourTotals{hour: h}), len(hours)
			}
		}
		if err := hours[n].t.add(e); err != nil {
			return nil, fmt.Errorf("export %s: %w", k, err)
		}
	}
	q.Queue(upsertDaySQL, append([]any{k.Campaign, k.Day}, day.values()...)...)
	slices.SortFunc(hours, func(a, b hourTotals) int { return a.hour.Compare(b.hour) })
	for _, h := range hours {
		q.Queue(upsertHourSQL, append([]any{k.Campaign, k.Day, h.hour}, h.t.values()...)...)
	}
	return q, nil
}

var (
	upsertDaySQL  = upsertTotals("spend_days", "campaign, day", "$1, $2::text::date", 3)
	upsertHourSQL = upsertTotals("spend_hours", "campaign, day, hour", "$1, $2::text::date, $3", 4)
)

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
