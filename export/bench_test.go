package export_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// loadAverage is /proc/loadavg's three figures.
func loadAverage(b *testing.B) string {
	l, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(l))
	return strings.Join(f[:3], " ")
}

// benchFixture is a fresh redis-server with a ledger, and a migrated database
// of PostgreSQL server pgSrv.
func benchFixture(b *testing.B, pgSrv *pgtest.Server) *fixture {
	srv := redistest.Start(b)
	rdb := srv.Client()
	f := &fixture{srv: srv, rdb: rdb, ledger: lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)}
	dsn, err := pgSrv.CreateDB(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// As pacer-export sizes it: a connection for each of up to 8 streams.
	if f.db, err = export.NewPool(ctx, dsn, 8); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.db.Close)
	if _, err := export.Migrate(ctx, f.db); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkExportLag measures the export's lag while the ledger writes: 8
// writers, one per shard, grant and release leases as fast as the ledger
// (AOF, fsync always) answers, for 30 s, while an exporter passes every
// second with 2 streams at once;
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
		e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "lag", Interval: time.Second, Streams: 2}, nil, nil)
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
// hold yet (0 if none), over every stream the ledger holds: the first entry
// after each stream's cursor, read in one pipeline.
func oldestUnexported(b *testing.B, f *fixture) time.Duration {
	streams, err := f.ledger.AuditStreams(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cursors := map[lease.ShardKey]string{}
	rows, err := f.db.Query(ctx, `SELECT campaign, day::text, shard, last_ms || '-' || last_seq FROM export_cursors`)
	if err != nil {
		b.Fatal(err)
	}
	var k lease.ShardKey
	var last string
	if _, err := pgx.ForEachRow(rows, []any{&k.Campaign, &k.Day, &k.Shard, &last}, func() error {
		cursors[k] = last
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	p := f.rdb.Pipeline()
	next := make([]*redis.XMessageSliceCmd, len(streams))
	for i, k := range streams {
		from := "-"
		if c, ok := cursors[k]; ok {
			from = "(" + c
		}
		next[i] = p.XRangeN(ctx, k.AuditKey(), from, "+", 1)
	}
	_, _ = p.Exec(ctx) // a stream not written yet is an empty reply
	var oldest time.Duration
	for _, c := range next {
		msgs, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			b.Fatal(err)
		}
		if len(msgs) == 1 {
			idMS, _, _ := strings.Cut(msgs[0].ID, "-")
			v, _ := strconv.ParseInt(idMS, 10, 64)
			oldest = max(oldest, time.Since(time.UnixMilli(v)))
		}
	}
	return oldest
}
