package export_test

import (
	"strconv"
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
