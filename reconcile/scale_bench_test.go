package reconcile_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/redis/go-redis/v9"
)

// scaleFixture stores n campaigns of 8 shards and opens each one's
// yesterday and today (as a fleet would have), in parallel.
func scaleFixture(tb testing.TB, n int) (*fixture, *redistest.Counter, *lease.Ledger) {
	tb.Helper()
	return scaleFixtureDays(tb, n, true)
}

// scaleFixtureDays is scaleFixture with yesterday opened or not.
func scaleFixtureDays(tb testing.TB, n int, withYesterday bool) (*fixture, *redistest.Counter, *lease.Ledger) {
	tb.Helper()
	f := newFixture(tb)
	days, starts := []string{day}, []time.Time{midnight}
	if withYesterday {
		days, starts = []string{"2026-11-20", day}, []time.Time{midnight.Add(-24 * time.Hour), midnight}
	}
	begin := time.Now()
	fillCampaigns(tb, func() redis.UniversalClient { return slowClient(f.Redis.Socket) }, 0, n, days, starts)
	if n >= 10_000 {
		tb.Logf("stored %d campaigns and opened %d days each in %v", n, len(days), time.Since(begin).Round(time.Millisecond))
	}
	counter := &redistest.Counter{}
	c := f.Redis.Client()
	c.AddHook(counter)
	return f, counter, lease.New(c, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
}

// slowClient is a client of the Redis at socket whose calls may take a
// minute: a pipeline of a thousand fsynced writes at a load average of 20
// can take longer than go-redis's default 3-s read timeout.
func slowClient(socket string) *redis.Client {
	return redis.NewClient(&redis.Options{Network: "unix", Addr: socket, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1})
}

// BenchmarkReconcilerScale measures the reconciler's passes over 1,000 and
// 10,000 campaigns of 8 shards with yesterday and today open and nothing to
// do (no lease expired, no shard low, yesterday reported): Redis commands
// per pass and pass time. "full" is a term's first pass (every shard of
// every campaign settled and read), "step" the pass the elected reconciler
// runs every second between sweeps (default SweepPeriod: 5 minutes). It
// takes minutes to set up 10,000 campaigns, so it runs only with
// PACER_BENCH_SCALE=1 (make bench-scale).
func BenchmarkReconcilerScale(b *testing.B) {
	if os.Getenv("PACER_BENCH_SCALE") == "" {
		b.Skip("set PACER_BENCH_SCALE=1 (make bench-scale)")
	}
	for _, n := range []int{1_000, 10_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			f, counter, ledger := scaleFixture(b, n)
			f.Clock.Set(midnight.Add(12 * time.Hour))
			rc := reconcile.New(ledger, reconcile.Config{Clock: f.Clock})
			// The first pass of a term does what there is: closes yesterday.
			if err := rc.Pass(ctx, 1); err != nil {
				b.Fatal(err)
			}
			for _, kind := range []string{"full", "step"} {
				pass := rc.Pass
				if kind == "step" {
					pass = rc.Step
				}
				b.Run(kind, func(b *testing.B) {
					counter.Reset()
					b.ResetTimer()
					for range b.N {
						f.Clock.Add(time.Second)
						if err := pass(ctx, 1); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(counter.N())/float64(b.N), "cmds/pass")
				})
			}
		})
	}
}

// BenchmarkReconcilerScale100k is a new leader at 100,000 campaigns of 8
// shards, today open and nothing to do (no yesterday to close): the term's
// full pass (every campaign surveyed, every shard fenced once, 16
// campaigns at a time) and then the steps. Setting up 100,000 campaigns
// takes many minutes, so it runs only with PACER_BENCH_SCALE=1 (make
// bench-scale).
func BenchmarkReconcilerScale100k(b *testing.B) {
	if os.Getenv("PACER_BENCH_SCALE") == "" {
		b.Skip("set PACER_BENCH_SCALE=1 (make bench-scale)")
	}
	f, counter, ledger := scaleFixtureDays(b, 100_000, false)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	fence := int64(0)
	for _, kind := range []string{"full", "step"} {
		rc := reconcile.New(ledger, reconcile.Config{Clock: f.Clock})
		b.Run(kind, func(b *testing.B) {
			if kind == "step" {
				fence++
				if err := rc.Step(ctx, fence); err != nil { // the term's full pass
					b.Fatal(err)
				}
			}
			counter.Reset()
			b.ResetTimer()
			for range b.N {
				if kind == "full" {
					fence++ // a new leader each time: the full pass fences every shard
				}
				f.Clock.Add(time.Second)
				pass := rc.Pass
				if kind == "step" {
					pass = rc.Step
				}
				if err := pass(ctx, fence); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(counter.N())/float64(b.N), "cmds/pass")
		})
	}
}
