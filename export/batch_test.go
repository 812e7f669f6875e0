package export_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// addReleases appends n release entries to shard 0's stream of campaign
// id, as the ledger writes them, the first numbered from.
func (f *fixture) addReleases(t *testing.T, id string, from, n int) {
	t.Helper()
	k := lease.ShardKey{Campaign: id, Day: day, Shard: 0}
	for i := from; i < from+n; i++ {
		ms := strconv.FormatInt(t0.Add(10*time.Hour+time.Duration(i)*time.Millisecond).UnixMilli(), 10)
		if err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.AuditKey(), Values: []any{"ev", "release", "lease", "h1-b0-" + strconv.Itoa(i),
			"holder", "h1", "amount", "25000", "unused", "1250", "ms", ms}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatchGrowsWhileBehind: a stream whose read came back full reads
// twice as many next, up to MaxBatch; a stream that caught up starts again
// at Batch; a trickle is one batch; a pass gives a stream at most
// BatchesPerPass × Batch entries; and every entry is written once.
func TestBatchGrowsWhileBehind(t *testing.T) {
	f := newFixture(t, lease.Config{})
	f.open(t, "grow", 1)
	var commits atomic.Int64
	cfg := export.Config{Batch: 10, MaxBatch: 40, BatchesPerPass: 50, Step: func(_ context.Context, step string) error {
		if step == "committed" {
			commits.Add(1)
		}
		return nil
	}}
	e := f.exporter("grow", cfg)
	// Opening the day wrote the stream's first entries: the backlog is
	// topped up to 100.
	opened, err := f.rdb.XLen(ctx, lease.ShardKey{Campaign: "grow", Day: day, Shard: 0}.AuditKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	written := int(opened)
	for _, c := range []struct {
		name           string
		add            int
		commits, moved int64
	}{
		{"a backlog of 100: 10, 20, 40, 30", 100 - int(opened), 4, 100},
		{"caught up, then 25: 10, then 15 of 20", 25, 2, 25},
		{"a trickle of 5: one batch", 5, 1, 5},
		{"nothing new: no batch", 0, 0, 0},
	} {
		f.addReleases(t, "grow", written, c.add)
		written += c.add
		commits.Store(0)
		st, err := e.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Exported != c.moved || commits.Load() != c.commits {
			t.Errorf("%s: exported %d in %d commits, want %d in %d", c.name, st.Exported, commits.Load(), c.moved, c.commits)
		}
	}
	// A pass's share of a stream stays BatchesPerPass × Batch entries.
	cfg.BatchesPerPass = 4
	e = f.exporter("grow", cfg)
	f.addReleases(t, "grow", written, 200)
	written += 200
	for pass, want := range []int64{40, 40} {
		commits.Store(0)
		st, err := e.Pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Exported != want || commits.Load() != 3 {
			t.Errorf("bounded pass %d: exported %d in %d commits, want %d in 3 (10, 20, then the 10 left of 40)", pass, st.Exported, commits.Load(), want)
		}
	}
	for range 10 {
		if _, err := e.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var rows, distinct int
	if err := f.db.QueryRow(ctx, `SELECT count(*), count(DISTINCT (entry_ms, entry_seq)) FROM ledger_events WHERE campaign = 'grow'`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != written || distinct != written {
		t.Errorf("ledger_events holds %d rows (%d distinct), want %d", rows, distinct, written)
	}
}
