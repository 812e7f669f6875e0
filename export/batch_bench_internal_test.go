package export

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// BenchmarkExportBatchSize is the exporter's sustained throughput with a
// fixed batch of 1,000 entries against the adaptive batch (a stream that
// read a full batch reads twice as many next, up to DefaultMaxBatch), and
// the adaptive batch with 2 streams written at once instead of
// DefaultStreams, side by side in one run: each way has a database of its
// own on one PostgreSQL (fsync on), each round fills 8 shards' streams with
// 25,000 release entries each for each way and exports them until none is
// left (BenchmarkExportThroughput's round), and the ways rotate which goes
// first. Per way and round it logs events/s of wall time and CPU µs per
// event of the exporter, PostgreSQL and redis-server, the ratios to the
// fixed batch, and the load average. Run it with GOMAXPROCS=1 for "one
// core":
//
//	GOMAXPROCS=1 go test -run '^$' -bench ExportBatchSize -benchtime 1x -v ./export/
func BenchmarkExportBatchSize(b *testing.B) {
	ctx := context.Background()
	pgSrv := pgtest.OwnDurable(b)
	ways := []throughputWay{
		{name: "batch1000", cfg: Config{MaxBatch: 1000}},
		{name: "adaptive", cfg: Config{}},
		{name: "adaptive4000-2", cfg: Config{MaxBatch: 4000, Streams: 2}},
	}
	for i := range ways {
		dsn, _ := pgtest.Pool(b, pgSrv)
		db, err := NewPool(ctx, dsn, DefaultStreams)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(db.Close)
		if _, err := Migrate(ctx, db); err != nil {
			b.Fatal(err)
		}
		ways[i].db = db
	}
	rdb := redistest.Start(b).Client()
	ledger := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	round := 0
	for range b.N {
		for r := range 3 {
			res := map[string]throughput{}
			for i := range ways {
				w := ways[(r+i)%len(ways)]
				res[w.name] = w.run(b, ctx, rdb, ledger, pgSrv, fmt.Sprintf("b%d-%s", round, w.name))
			}
			round++
			b.Logf("round %d (%s first), load average %s", r, ways[r%len(ways)].name, loadAverageNow())
			base := res["batch1000"]
			for _, w := range ways {
				x := res[w.name]
				b.Logf("  %-17s %8.0f events/s (%.2fx)  CPU µs/event: exporter %5.2f (%.2fx)  PostgreSQL %5.2f (%.2fx)  redis %5.2f",
					w.name, x.perSecond, x.perSecond/base.perSecond, x.exporter, x.exporter/base.exporter, x.postgres, x.postgres/base.postgres, x.redis)
				if r == 2 {
					b.ReportMetric(x.perSecond, w.name+"-events/s")
					b.ReportMetric(x.exporter*1000, w.name+"-exporter-cpu-ns/event")
					b.ReportMetric(x.postgres*1000, w.name+"-pg-cpu-ns/event")
				}
			}
		}
	}
}
