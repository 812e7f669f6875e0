package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pacer/pacer/lease"
)

// ErrNotCaughtUp means a stream has entries not exported yet: backfill
// compares a shard's counters with what was exported, so it waits for them.
var ErrNotCaughtUp = errors.New("export: stream not exported up to its end")

// backfillID is the row id of a shard's backfill: 0-0, which Redis never
// gives a stream entry.
var backfillID = streamID{0, 0}

// Backfill completes the account of a campaign-day whose streams lost
// entries before they were exported (a trimmed gap: a day the ledger capped
// before the exporter existed), from the shards' report counters still in
// Redis. For each such shard it writes one ledger_events row of kind
// "backfill" (id 0-0; its fields hold each counter's difference) and adds
// the differences to the day's totals (not to an hour: the entries' times
// are gone), in the transaction that holds the stream's cursor, so it runs
// once and never races the export. A shard must be exported to its end
// first (ErrNotCaughtUp). It returns the shards backfilled.
func (e *Exporter) Backfill(ctx context.Context, campaign, day string) (int, error) {
	n, err := e.ledger.DayShards(ctx, campaign, day)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("export %s/%s: backfill: %w", campaign, day, lease.ErrDayNotOpen)
	}
	filled := 0
	for shard := range n {
		k := lease.ShardKey{Campaign: campaign, Day: day, Shard: shard}
		ok, err := e.backfillShard(ctx, k)
		if err != nil {
			return filled, err
		}
		if ok {
			filled++
		}
	}
	return filled, nil
}

func (e *Exporter) backfillShard(ctx context.Context, k lease.ShardKey) (bool, error) {
	tx, err := e.store.db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("export %s: backfill: %w", k, err)
	}
	defer tx.Rollback(ctx)
	var gaps int
	var cur cursor
	var stream int32
	err = tx.QueryRow(ctx, `SELECT c.stream, c.last_ms, c.last_seq, (SELECT count(*) FROM export_gaps g WHERE g.campaign = c.campaign
		AND g.day = c.day AND g.shard = c.shard AND g.kind = 'trimmed') FROM export_cursors c
		WHERE c.campaign = $1 AND c.day = $2::text::date AND c.shard = $3 FOR UPDATE`, k.Campaign, k.Day, k.Shard).Scan(&stream, &cur.last.ms, &cur.last.seq, &gaps)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && gaps == 0) {
		return false, nil // nothing exported yet, or nothing lost
	}
	if err != nil {
		return false, fmt.Errorf("export %s: backfill: %w", k, err)
	}
	// Counters first, then the stream's end: if nothing was added past the
	// cursor by then, the counters count only entries the cursor covers.
	r, ok, err := e.ledger.ShardReport(ctx, k)
	if err != nil || !ok {
		return false, err
	}
	info, err := e.rdb.XInfoStream(ctx, k.AuditKey()).Result()
	if err != nil {
		return false, fmt.Errorf("export %s: backfill: %w", k, err)
	}
	if last, err := parseStreamID(info.LastGeneratedID); err != nil || cur.last.less(last) {
		return false, fmt.Errorf("export %s: backfill: %w (exported to %s, the stream ends at %s)", k, ErrNotCaughtUp, cur.last, info.LastGeneratedID)
	}
	have, err := shardTotals(ctx, tx, k, stream)
	if err != nil {
		return false, err
	}
	d := Totals{Budget: r.Budget - have.Budget, Spent: r.Spent - have.Spent, Returned: r.Returned - have.Returned,
		Lost: r.Lost - have.Lost, Leases: r.Leases - have.Leases, Settled: r.Settled - have.Settled, Events: r.Events - have.Events}
	if d.Spent < 0 || d.Returned < 0 || d.Lost < 0 || d.Leases < 0 || d.Settled < 0 || d.Events < 0 {
		return false, fmt.Errorf("export %s: backfill: PostgreSQL holds more than the ledger's counters (%+v): not backfilled", k, d)
	}
	if inserted, err := insertBackfill(ctx, tx, k, stream, d, e.cfg.Now()); err != nil || !inserted {
		return false, err
	}
	args := []any{k.Campaign, k.Day}
	for _, v := range d.columns() {
		args = append(args, v)
	}
	if _, err := tx.Exec(ctx, upsertTotals("spend_days", "campaign, day", "$1, $2::text::date", 3), args...); err != nil {
		return false, fmt.Errorf("export %s: backfill: %w", k, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("export %s: backfill: commit: %w", k, err)
	}
	return true, nil
}

// shardTotals adds up the rows exported from one shard's stream (its id
// stream). An adjust's op is its ref.
func shardTotals(ctx context.Context, tx pgx.Tx, k lease.ShardKey, stream int32) (Totals, error) {
	rows, err := tx.Query(ctx, `SELECT kind, micros, unused, CASE WHEN kind = 'adjust' THEN ref ELSE '' END FROM ledger_events
		WHERE stream = $1`, stream)
	if err != nil {
		return Totals{}, fmt.Errorf("export %s: backfill: %w", k, err)
	}
	var t Totals
	var ev event
	var op string
	_, err = pgx.ForEachRow(rows, []any{&ev.kind, &ev.micros, &ev.unused, &op}, func() error {
		ev.carryOut = ev.kind == "adjust" && strings.HasPrefix(op, "carry-out")
		return t.add(ev)
	})
	if err != nil {
		return Totals{}, fmt.Errorf("export %s: backfill: %w", k, err)
	}
	return t, nil
}

func insertBackfill(ctx context.Context, tx pgx.Tx, k lease.ShardKey, stream int32, d Totals, now time.Time) (bool, error) {
	fields, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO ledger_events (stream, campaign, day, shard, entry_ms, entry_seq, kind, micros, unused, refunded, ref, holder, at, fields)
		VALUES ($9, $1, $2::text::date, $3, $4, $5, 'backfill', $6, 0, 0, 'counters', '', to_timestamp($7 / 1000.0), $8::text::jsonb)
		ON CONFLICT DO NOTHING`, k.Campaign, k.Day, k.Shard, backfillID.ms, backfillID.seq, d.Spent, now.UnixMilli(), string(fields), stream)
	if err != nil {
		return false, fmt.Errorf("export %s: backfill: %w", k, err)
	}
	return tag.RowsAffected() == 1, nil
}
