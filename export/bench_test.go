package export_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// BenchmarkExport measures the exporter's throughput: 8 shards' streams of
// 25,000 release entries each (fields as the ledger writes them) exported
// into a PostgreSQL on the same machine, in passes, with the default batch
// (1000) and a larger one. It reports events/s of wall time and the exporter's own CPU time
// per event (Redis and PostgreSQL are other processes); run it with
// GOMAXPROCS=1 for "one core". docs/BENCHMARKS.md has the figures.
//
//	GOMAXPROCS=1 go test -run '^$' -bench Export -benchtime 1x -count 3 ./export/
func BenchmarkExport(b *testing.B) {
	for _, batch := range []int64{1000, 5000} {
		b.Run("batch="+strconv.FormatInt(batch, 10), func(b *testing.B) { benchExport(b, batch) })
	}
}

func benchExport(b *testing.B, batch int64) {
	const shards, perShard = 8, 25_000
	for range b.N {
		b.StopTimer()
		f := newFixture(b, lease.Config{})
		f.open(b, "bench", shards)
		fill(b, f.rdb, "bench", shards, perShard)
		e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "bench", Batch: batch}, nil, nil)
		cpu0 := cpuTime(b)
		start := time.Now()
		b.StartTimer()
		var n int64
		for n < shards*perShard {
			st, err := e.Pass(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += st.Exported
		}
		b.StopTimer()
		wall, cpu := time.Since(start), cpuTime(b)-cpu0
		b.ReportMetric(float64(n)/wall.Seconds(), "events/s")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/event")
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fill appends n release entries to each of the day's shards' streams.
func fill(b *testing.B, rdb *redis.Client, id string, shards, n int) {
	b.Helper()
	for s := range shards {
		k := lease.ShardKey{Campaign: id, Day: day, Shard: s}
		p := rdb.Pipeline()
		for i := range n {
			ms := strconv.FormatInt(t0.Add(time.Duration(i)*time.Millisecond).UnixMilli(), 10)
			p.XAdd(ctx, &redis.XAddArgs{Stream: k.AuditKey(), Values: []any{"ev", "release", "lease", "h1-" + strconv.Itoa(i),
				"holder", "h1", "amount", "25000", "unused", "1250", "ms", ms}})
			if i%5000 == 4999 {
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, err := p.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExportLag measures the export's lag while the ledger writes: 8
// writers, one per shard, grant and release leases as fast as the ledger
// (AOF, fsync always) answers, for 30 s, while an exporter runs with the default interval (1 s);
// every 100 ms the age of the oldest entry not yet in PostgreSQL is sampled
// (as pacer_export_lag_seconds measures it, but at each sample rather than at
// each pass). It reports the events written per second, and the lag's p50,
// p99 and max.
//
//	go test -run '^$' -bench ExportLag -benchtime 1x ./export/
func BenchmarkExportLag(b *testing.B) {
	for range b.N {
		f := newFixture(b, lease.Config{})
		f.open(b, "lag", 8)
		runCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var written atomic.Int64
		for shard := range 8 {
			wg.Go(func() { writeLeases(f, runCtx, shard, &written) })
		}
		e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "lag"}, nil, nil)
		wg.Go(func() { _ = e.Run(runCtx) })
		var lags []time.Duration
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			lags = append(lags, oldestUnexported(b, f))
		}
		stop()
		wg.Wait()
		slices.Sort(lags)
		b.ReportMetric(float64(written.Load())/30, "events/s")
		b.ReportMetric(lags[len(lags)/2].Seconds(), "lag-p50-s")
		b.ReportMetric(lags[len(lags)*99/100].Seconds(), "lag-p99-s")
		b.ReportMetric(lags[len(lags)-1].Seconds(), "lag-max-s")
	}
}

// writeLeases grants and releases leases on one shard until ctx is done.
func writeLeases(f *fixture, ctx context.Context, shard int, written *atomic.Int64) {
	now := t0.Add(10 * time.Hour)
	k := lease.ShardKey{Campaign: "lag", Day: day, Shard: shard}
	for i := 0; ctx.Err() == nil; i++ {
		id := "L" + strconv.Itoa(shard) + "-" + strconv.Itoa(i)
		g, err := f.ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h", Want: 10_000, Expiry: now.Add(30 * time.Second),
			Now: now, Pace: lease.Pace{Now: ppb / 2, Cap: ppb/2 + ppb/8}, Grace: 5 * time.Second, DayStart: t0})
		if err != nil {
			return // cancelled
		}
		if _, err := f.ledger.Release(ctx, k, id, g.Granted/3, now); err != nil {
			return
		}
		written.Add(2)
	}
}

// oldestUnexported is the age of the oldest audit entry PostgreSQL does not
// hold yet (0 if none): the first entry after each stream's cursor.
func oldestUnexported(b *testing.B, f *fixture) time.Duration {
	var oldest time.Duration
	for s := range 8 {
		k := lease.ShardKey{Campaign: "lag", Day: day, Shard: s}
		var ms, seq int64
		err := f.db.QueryRow(ctx, `SELECT last_ms, last_seq FROM export_cursors WHERE campaign = $1 AND shard = $2`, k.Campaign, s).Scan(&ms, &seq)
		if err != nil {
			ms, seq = 0, 0
		}
		next, err := f.rdb.XRangeN(ctx, k.AuditKey(), "("+strconv.FormatInt(ms, 10)+"-"+strconv.FormatInt(seq, 10), "+", 1).Result()
		if err != nil {
			b.Fatal(err)
		}
		if len(next) == 1 {
			idMS, _, _ := strings.Cut(next[0].ID, "-")
			v, _ := strconv.ParseInt(idMS, 10, 64)
			oldest = max(oldest, time.Since(time.UnixMilli(v)))
		}
	}
	return oldest
}
