package export

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// exportStream brings one stream's export up to date: gaps first (recorded,
// never skipped silently), then what dead consumers held, what this
// consumer held from before, and what is new; then the trim.
func (e *Exporter) exportStream(ctx context.Context, s streamState, c cursor, st *PassStats) error {
	if !s.exists {
		return e.checkMissing(ctx, s.k, c, st)
	}
	if err := e.checkGaps(ctx, s, c, st); err != nil {
		return err
	}
	if s.idle() {
		return nil
	}
	if s.ours == nil {
		if err := e.createGroup(ctx, s.k); err != nil {
			return err
		}
	}
	acked := false
	// With nothing pending in the group when the pass began, no consumer
	// holds an entry to take over or to read again (one delivered since is
	// not idle long enough to claim): only new entries are read.
	pending := s.ours != nil && s.ours.Pending > 0
	var err error
	if pending {
		var claimed []redis.XMessage
		if claimed, err = e.claim(ctx, s.k); err == nil {
			acked = len(claimed) > 0
			err = e.exportBatch(ctx, s.k, claimed, st)
		}
	}
	// A stream whose read came back full is behind: its next read is twice
	// as large, up to MaxBatch; its turn ends when a read is not full.
	size, budget := e.cfg.Batch, int64(e.cfg.BatchesPerPass)*e.cfg.Batch
	for i := 0; err == nil && i < e.cfg.BatchesPerPass && budget > 0; i++ {
		var msgs []redis.XMessage
		// "0": what this consumer was delivered and never acknowledged
		// (a previous run under the same name); then ">": new entries.
		start := ">"
		if i == 0 {
			if !pending {
				continue
			}
			start = "0"
		}
		want := min(size, budget)
		if msgs, err = e.read(ctx, s.k, start, want); err != nil || (len(msgs) == 0 && i > 0) {
			break
		}
		acked = acked || len(msgs) > 0
		budget -= int64(len(msgs))
		if err = e.exportBatch(ctx, s.k, msgs, st); err == nil && i > 0 {
			if int64(len(msgs)) < want {
				break
			}
			size = min(2*size, e.cfg.MaxBatch)
		}
	}
	if err != nil || !acked || e.cfg.NoTrim {
		return err
	}
	n, _, err := e.ledger.TrimAudit(ctx, s.k)
	if err != nil {
		e.m.Errors.WithLabelValues("redis").Inc()
		return err
	}
	st.Trimmed += n
	e.m.Trimmed.Add(float64(n))
	return e.cfg.Step(ctx, "trimmed")
}

func (e *Exporter) createGroup(ctx context.Context, k lease.ShardKey) error {
	err := e.rdb.XGroupCreate(ctx, k.AuditKey(), e.cfg.Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		e.m.Errors.WithLabelValues("redis").Inc()
		return fmt.Errorf("export %s: create group: %w", k, err)
	}
	return nil
}

// claim takes over entries another consumer was delivered and has not
// acknowledged for ClaimIdle (it died, or is stuck).
func (e *Exporter) claim(ctx context.Context, k lease.ShardKey) ([]redis.XMessage, error) {
	msgs, _, err := e.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: k.AuditKey(), Group: e.cfg.Group,
		Consumer: e.cfg.Consumer, MinIdle: e.cfg.ClaimIdle, Start: "0-0", Count: e.cfg.Batch}).Result()
	if err != nil {
		e.m.Errors.WithLabelValues("redis").Inc()
		return nil, fmt.Errorf("export %s: xautoclaim: %w", k, err)
	}
	return msgs, nil
}

func (e *Exporter) read(ctx context.Context, k lease.ShardKey, start string, count int64) ([]redis.XMessage, error) {
	res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: e.cfg.Group, Consumer: e.cfg.Consumer,
		Streams: []string{k.AuditKey(), start}, Count: count, Block: -1}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		e.m.Errors.WithLabelValues("redis").Inc()
		return nil, fmt.Errorf("export %s: xreadgroup: %w", k, err)
	}
	if len(res) != 1 {
		return nil, nil
	}
	return res[0].Messages, nil
}

// exportBatch commits a batch and then acknowledges it. An entry delivered
// without its fields (gone from the stream since: a restore) is acknowledged
// with nothing written; the gap check names what went.
func (e *Exporter) exportBatch(ctx context.Context, k lease.ShardKey, msgs []redis.XMessage, st *PassStats) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := e.cfg.Step(ctx, "read"); err != nil {
		return err
	}
	evs := make([]event, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
		if m.Values == nil {
			continue
		}
		ev, err := parseEntry(k, m)
		if err != nil {
			e.m.Errors.WithLabelValues("entry").Inc()
			return err
		}
		evs = append(evs, ev)
	}
	n := 0
	if len(evs) > 0 {
		var err error
		if n, err = e.store.commit(ctx, k, evs); err != nil {
			if !errors.Is(err, errStep) {
				e.m.Errors.WithLabelValues("sql").Inc()
			}
			return err
		}
	}
	st.Exported += int64(n)
	st.Duplicates += int64(len(evs) - n)
	e.m.Events.Add(float64(n))
	e.m.Duplicates.Add(float64(len(evs) - n))
	if err := e.cfg.Step(ctx, "committed"); err != nil {
		return err
	}
	if err := e.rdb.XAck(ctx, k.AuditKey(), e.cfg.Group, ids...).Err(); err != nil {
		e.m.Errors.WithLabelValues("redis").Inc()
		return fmt.Errorf("export %s: xack: %w", k, err)
	}
	return e.cfg.Step(ctx, "acked")
}

// checkGaps records what a stream lost before it was exported: entries
// trimmed above the cursor (the ledger's cap applied before the exporter
// created its group), or a stream whose last id is
// below the cursor (Redis restored from an older copy: the export holds
// entries Redis no longer has).
func (e *Exporter) checkGaps(ctx context.Context, s streamState, c cursor, st *PassStats) error {
	// Trims take a stream's oldest entries: every entry before its first one
	// is gone. If that first one is past the cursor, what was deleted beyond
	// what was exported (or already counted in a gap) was never exported.
	deleted := s.info.EntriesAdded - s.info.Length
	if missing := deleted - c.events - c.skipped; c.last.less(s.first) && missing > 0 {
		if err := e.gap(ctx, Gap{Shard: s.k, Kind: "trimmed", After: c.last.String(), Until: s.first.String(), Missing: missing}, st); err != nil {
			return err
		}
	}
	if s.lastGen.less(c.last) {
		// The cursor was read after the stream's state: another exporter
		// may have exported entries added since. Redis is behind only if
		// its stream still ends before what was committed.
		now, err := e.rdb.XInfoStream(ctx, s.k.AuditKey()).Result()
		if err != nil && !isNoSuchKey(err) {
			e.m.Errors.WithLabelValues("redis").Inc()
			return fmt.Errorf("export %s: xinfo: %w", s.k, err)
		}
		if err == nil {
			if last, err := parseStreamID(now.LastGeneratedID); err != nil || !last.less(c.last) {
				return err
			}
		}
		missing := max(c.events-s.info.EntriesAdded, 0)
		return e.gap(ctx, Gap{Shard: s.k, Kind: "behind", After: s.lastGen.String(), Until: c.last.String(), Missing: missing}, st)
	}
	return nil
}

// checkMissing records a stream that is gone while its shard's counters say
// it wrote more than was exported (deleted, or expired with the exporter
// down for longer than the ledger's retention while its state stayed).
func (e *Exporter) checkMissing(ctx context.Context, k lease.ShardKey, c cursor, st *PassStats) error {
	n, ok, err := e.ledger.AuditEvents(ctx, k)
	if err != nil {
		e.m.Errors.WithLabelValues("redis").Inc()
		return err
	}
	if !ok || n <= c.events+c.skipped {
		return nil
	}
	return e.gap(ctx, Gap{Shard: k, Kind: "missing", After: c.last.String(), Until: "", Missing: n - c.events - c.skipped}, st)
}

func (e *Exporter) gap(ctx context.Context, g Gap, st *PassStats) error {
	fresh, err := e.store.recordGap(ctx, g)
	if err != nil {
		e.m.Errors.WithLabelValues("sql").Inc()
		return err
	}
	if fresh {
		st.Gaps = append(st.Gaps, g)
		e.m.Gaps.WithLabelValues(g.Kind).Inc()
		e.log.Error("audit stream gap: entries not exported", zap.Stringer("shard", g.Shard), zap.String("kind", g.Kind),
			zap.String("after", g.After), zap.String("until", g.Until), zap.Int64("missing", g.Missing))
		if g.Kind == "behind" {
			e.log.Error("the ledger lost writes PostgreSQL recorded (Redis restored from an older copy?): run pacerctl check --sql, then pacerctl recover --from-sql, while the reconciler's freeze holds (docs/EXPORT.md)",
				zap.Stringer("shard", g.Shard))
		}
	}
	return nil
}
