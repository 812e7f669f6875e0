package export_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/sim"
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
		srv := redistest.Start(b)
		rdb := srv.Client()
		f := &fixture{srv: srv, rdb: rdb, ledger: lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)}
		_, f.db = pgtest.Pool(b, pgtest.OwnDurable(b))
		if _, err := export.Migrate(ctx, f.db); err != nil {
			b.Fatal(err)
		}
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
			_, err := sim.Run(runCtx, sc, sim.Options{RedisAddr: srv.Socket})
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
