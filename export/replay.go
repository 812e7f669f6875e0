package export

import (
	"context"
	"fmt"

	"github.com/pacer/pacer/lease"
)

// Replay re-exports a campaign-day's audit streams from the entry id from
// (inclusive; "-" or "0" for the start) with XRANGE, outside the consumer
// group (whose position it leaves alone): rows PostgreSQL already holds are
// skipped, missing ones are written with their totals, as a normal export
// would. It is for a database restored from an older backup, or rows lost
// by hand; it is safe while exporters run. It returns the rows inserted and
// the entries that were already there.
func (e *Exporter) Replay(ctx context.Context, campaign, day, from string) (inserted, duplicates int64, err error) {
	n, err := e.ledger.DayShards(ctx, campaign, day)
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("export %s/%s: replay: %w", campaign, day, lease.ErrDayNotOpen)
	}
	if from == "" || from == "0" {
		from = "-"
	}
	var st PassStats
	for shard := range n {
		if err := e.replayShard(ctx, lease.ShardKey{Campaign: campaign, Day: day, Shard: shard}, from, &st); err != nil {
			return st.Exported, st.Duplicates, err
		}
	}
	return st.Exported, st.Duplicates, nil
}

func (e *Exporter) replayShard(ctx context.Context, k lease.ShardKey, from string, st *PassStats) error {
	for {
		msgs, err := e.rdb.XRangeN(ctx, k.AuditKey(), from, "+", e.cfg.Batch).Result()
		if err != nil {
			return fmt.Errorf("export %s: replay: %w", k, err)
		}
		if len(msgs) == 0 {
			return nil
		}
		evs := make([]event, 0, len(msgs))
		for _, m := range msgs {
			ev, err := parseEntry(k, m)
			if err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		n, err := e.store.commit(ctx, k, evs)
		if err != nil {
			return err
		}
		st.Exported += int64(n)
		st.Duplicates += int64(len(evs) - n)
		e.m.Events.Add(float64(n))
		e.m.Duplicates.Add(float64(len(evs) - n))
		if int64(len(msgs)) < e.cfg.Batch {
			return nil
		}
		from = "(" + msgs[len(msgs)-1].ID
	}
}

// DropGroup retires this exporter's consumer group: it is destroyed on every
// audit stream that has it, so those streams are trimmed below what the
// remaining groups acknowledged, or, with none left, capped by the ledger
// again (Config.AuditMaxLen). A group left behind by an exporter that no
// longer runs would keep its streams from being trimmed until the day's keys
// expire. It returns the streams the group was dropped from.
func (e *Exporter) DropGroup(ctx context.Context) (int, error) {
	streams, err := e.ledger.AuditStreams(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range streams {
		dropped, err := e.rdb.XGroupDestroy(ctx, k.AuditKey(), e.cfg.Group).Result()
		if isNoSuchKey(err) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("export %s: drop group %s: %w", k, e.cfg.Group, err)
		}
		n += int(dropped)
	}
	return n, nil
}
