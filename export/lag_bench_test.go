package export_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/sim"
	"github.com/redis/go-redis/v9"
)

// BenchmarkExportLagSimulatedDay measures the export's lag under the
// simulator's default day (configs/scenarios/default.yaml: 3 hosts, 20
// campaigns, 34.5 simulated hours) run as fast as the simulator goes, which
// writes the ledger many times faster than the real day would (the real
// day: about 8 lease calls a second at its busiest hour), into a real
// redis-server, while an exporter with the default settings (1-s interval,
// batches of 1000) copies it into a PostgreSQL with fsync on. Every 100 ms
// the age of the oldest entry not yet in PostgreSQL is sampled, across every
// stream; after the day the export must catch up and agree with the
// ledger's counters on every campaign-day (export.Reconcile). It reports
// the events exported per second of the simulated day's wall time, and the
// lag's p50, p99 and max; it logs the load average.
//
//	go test -run '^$' -bench ExportLagSimulatedDay -benchtime 1x ./export/
func BenchmarkExportLagSimulatedDay(b *testing.B) {
	for range b.N {
		f := benchFixture(b, pgtest.OwnDurable(b))
		sc, err := sim.LoadScenario("../configs/scenarios/default.yaml")
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("load average %s", loadAverage(b))
		runCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		m := export.NewMetrics(nil)
		e := export.New(f.rdb, f.ledger, f.db, export.Config{Consumer: "lag"}, m, nil)
		wg.Go(func() { _ = e.Run(runCtx) })
		simDone := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := sim.Run(runCtx, sc, sim.Options{RedisAddr: f.srv.Socket})
			simDone <- err
		}()
		lags := sampleLag(b, f, simDone)
		wall := time.Since(start)
		caughtUp(b, f, m)
		stop()
		wg.Wait()
		b.Logf("load average %s", loadAverage(b))
		slices.Sort(lags)
		b.ReportMetric(counterValue(b, m.Events)/wall.Seconds(), "events/s")
		b.ReportMetric(lags[len(lags)/2].Seconds(), "lag-p50-s")
		b.ReportMetric(lags[len(lags)*99/100].Seconds(), "lag-p99-s")
		b.ReportMetric(lags[len(lags)-1].Seconds(), "lag-max-s")
	}
}

// sampleLag samples the export's lag every 100 ms until the simulated day
// ends.
func sampleLag(b *testing.B, f *fixture, simDone <-chan error) []time.Duration {
	var lags []time.Duration
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-simDone:
			if err != nil {
				b.Fatal(err)
			}
			if len(lags) == 0 {
				b.Fatal("the simulated day ended before a lag sample")
			}
			return lags
		case <-tick.C:
			lags = append(lags, oldestUnexported(b, f))
		}
	}
}

// caughtUp waits (up to 10 minutes) until the exporter's last pass saw
// nothing left, then checks that PostgreSQL agrees with the ledger.
func caughtUp(b *testing.B, f *fixture, m *export.Metrics) {
	for end := time.Now().Add(10 * time.Minute); oldestUnexported(b, f) > 0 || gaugeValue(b, m.LagEntries) > 0; time.Sleep(time.Second) {
		if time.Now().After(end) {
			b.Fatal("the export did not catch up within 10 minutes of the day's end")
		}
	}
	f.agrees(b)
}

// lagRates are BenchmarkExportLagAtRate's ledger event rates, a second: the
// real default day's busiest hour (about 8 lease calls a second fleet-wide,
// at most two entries each: 20 rounds it up), then ten to four hundred
// times that.
var lagRates = []int{20, 200, 1_000, 2_000, 4_000, 8_000}

// BenchmarkExportLagAtRate measures the export's lag at a given rate of
// ledger events: the default day's 20 campaigns and 134 shards (15 of 8
// shards, 2 of 4, 3 of 2) opened in a real redis-server, and a generator
// appending release and grant entries (as the ledger writes them) to
// streams picked at random, every 10 ms, at each rate of lagRates for 30 s,
// while an exporter with the default settings (batches of 1000, two streams
// at once) copies them into a PostgreSQL with fsync on.
// Every 100 ms the age of the oldest entry not yet in PostgreSQL is sampled
// across every stream. Each rate reports the events written a second and the
// lag's p50, p99 and max, and logs the load average; the export must catch
// up and agree with the ledger's counters afterwards.
//
//	go test -run '^$' -bench ExportLagAtRate -benchtime 1x ./export/
//
// Each rate runs with the defaults (interval=1s: --interval 1s, --streams 2)
// and with passes every 250 ms exporting 8 streams at once (interval=250ms:
// --interval 250ms --streams 8): the lag is the interval plus a pass, and a
// pass at a low rate is mostly a few round trips for each stream written
// (read, commit, acknowledge, trim), so more at once shortens it.
func BenchmarkExportLagAtRate(b *testing.B) {
	pgSrv := pgtest.OwnDurable(b)
	for _, cfg := range idleConfigs {
		for _, rate := range lagRates {
			b.Run(configName(cfg)+"/rate="+strconv.Itoa(rate), func(b *testing.B) {
				for range b.N {
					lagAtRate(b, pgSrv, rate, cfg)
				}
			})
		}
	}
}

// openDefaultDay opens the default day's 20 campaigns and 134 shards (15 of
// 8 shards, 2 of 4, 3 of 2) and returns their streams.
func openDefaultDay(b *testing.B, f *fixture) []lease.ShardKey {
	var streams []lease.ShardKey
	for i := range 20 {
		shards := 8
		if i >= 17 {
			shards = 2
		} else if i >= 15 {
			shards = 4
		}
		id := "c" + strconv.Itoa(i)
		f.open(b, id, shards)
		for s := range shards {
			streams = append(streams, lease.ShardKey{Campaign: id, Day: day, Shard: s})
		}
	}
	return streams
}

// runDefaultDay is a fresh fixture with the default day's streams opened
// and an exporter of cfg running on them until the benchmark ends.
func runDefaultDay(b *testing.B, pgSrv *pgtest.Server, cfg export.Config) (*fixture, []lease.ShardKey, *export.Metrics) {
	f := benchFixture(b, pgSrv)
	streams := openDefaultDay(b, f)
	m := export.NewMetrics(nil)
	cfg.Consumer = "bench"
	e := export.New(f.rdb, f.ledger, f.db, cfg, m, nil)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(runCtx) })
	b.Cleanup(func() { stop(); wg.Wait() })
	return f, streams, m
}

func lagAtRate(b *testing.B, pgSrv *pgtest.Server, rate int, cfg export.Config) {
	f, streams, m := runDefaultDay(b, pgSrv, cfg)
	// The day's 134 opens, all at once as at midnight, are exported first:
	// the lag is then the steady state's, and the burst is reported apart.
	opened := time.Now()
	for rows := int64(0); rows < int64(len(streams)); time.Sleep(20 * time.Millisecond) {
		if err := f.db.QueryRow(ctx, `SELECT count(*) FROM ledger_events`).Scan(&rows); err != nil {
			b.Fatal(err)
		}
		if time.Since(opened) > 10*time.Minute {
			b.Fatalf("the day's opens were not exported within 10 minutes: %d of %d rows", rows, len(streams))
		}
	}
	b.ReportMetric(time.Since(opened).Seconds(), "opens-exported-s")
	rowsCaughtUp(b, f, m, int64(len(streams)))
	b.Logf("load average %s", loadAverage(b))
	genDone := make(chan error, 1)
	var written int64
	start := time.Now()
	go func() { genDone <- generate(ctx, f.rdb, streams, rate, 30*time.Second, &written) }()
	lags := sampleLag(b, f, genDone)
	wall := time.Since(start)
	rowsCaughtUp(b, f, m, written+int64(len(streams))) // and the days' opens
	b.Logf("load average %s", loadAverage(b))
	slices.Sort(lags)
	b.ReportMetric(float64(written)/wall.Seconds(), "events/s")
	b.ReportMetric(lags[len(lags)/2].Seconds(), "lag-p50-s")
	b.ReportMetric(lags[len(lags)*99/100].Seconds(), "lag-p99-s")
	b.ReportMetric(lags[len(lags)-1].Seconds(), "lag-max-s")
}

// generate appends rate entries a second, in a pipeline every 10 ms, to
// streams picked at random (a seeded source: every run the same), for d
// (what is due by each tick's time, however late the tick):
// grants, each released (on its stream) in a later tick. It counts the
// entries in written.
func generate(ctx context.Context, rdb *redis.Client, streams []lease.ShardKey, rate int, d time.Duration, written *int64) error {
	rng := rand.New(rand.NewPCG(1, uint64(rate)))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	ms := strconv.FormatInt(t0.Add(10*time.Hour).UnixMilli(), 10)
	type held struct {
		k  lease.ShardKey
		id string
	}
	var due float64
	var open []held
	for n := 0; time.Since(start) < d; n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		// What is due by now, not a tick's share: a tick a loaded machine
		// skipped is made up in the next.
		due = float64(rate)*time.Since(start).Seconds() - float64(*written)
		p := rdb.Pipeline()
		granted := open[:0:0]
		for ; due >= 1; due-- {
			if len(open) > 0 {
				o := open[0]
				open = open[1:]
				p.XAdd(ctx, &redis.XAddArgs{Stream: o.k.AuditKey(), Values: []any{"ev", "release", "lease", o.id,
					"holder", "h1", "amount", "25000", "unused", "1250", "ms", ms}})
				continue
			}
			o := held{k: streams[rng.IntN(len(streams))], id: "h1-" + strconv.Itoa(n) + "-" + strconv.Itoa(len(granted))}
			p.XAdd(ctx, &redis.XAddArgs{Stream: o.k.AuditKey(), Values: []any{"ev", "grant", "lease", o.id,
				"holder", "h1", "amount", "25000", "ms", ms}})
			granted = append(granted, o)
		}
		open = append(open, granted...)
		k := p.Len()
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
		*written += int64(k)
	}
	return nil
}

// rowsCaughtUp waits (up to 10 minutes) until the exporter's last pass saw
// nothing left, then checks that ledger_events holds want rows.
func rowsCaughtUp(b *testing.B, f *fixture, m *export.Metrics, want int64) {
	for end := time.Now().Add(10 * time.Minute); oldestUnexported(b, f) > 0 || gaugeValue(b, m.LagEntries) > 0; time.Sleep(time.Second) {
		if time.Now().After(end) {
			b.Fatal("the export did not catch up within 10 minutes of the generator's end")
		}
	}
	var rows int64
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM ledger_events`).Scan(&rows); err != nil {
		b.Fatal(err)
	}
	if rows != want {
		b.Fatalf("ledger_events holds %d rows; %d entries were written", rows, want)
	}
}
