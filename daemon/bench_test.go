package daemon_test

import (
	"context"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// benchDaily is the largest daily budget (1e15 micros, about 1.16e10 micros/s
// flat), so that SPEND 1 is always allowed and the benchmarks measure the
// allowed path, not the paced one.
const benchDaily = 1_000_000_000_000_000

// warmDaemon returns a daemon over a fresh redis-server with the campaign
// "demo" loaded and its first lease primed, and its refill loop running as
// pacerd runs it, all stopped at cleanup. (newFixture takes a *testing.T,
// hence this helper over the same pieces.)
func warmDaemon(b *testing.B, clock daemon.Clock) *daemon.Daemon {
	b.Helper()
	srv := redistest.Start(b)
	ledger := lease.New(srv.Client(), lease.Config{}, nil)
	if _, err := ledger.PutCampaign(ctx, lease.Campaign{ID: "demo", DailyMicros: benchDaily, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive}); err != nil {
		b.Fatal(err)
	}
	d, err := daemon.New(ledger, daemon.Config{Holder: "bench", Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(runCtx) }()
	b.Cleanup(func() {
		cancel()
		<-done
		d.Close(ctx)
	})
	d.Warm([]string{"demo"})
	// The first SPEND after a load may find the bucket's drip just started:
	// spend until the decision is the steady one.
	deadline := time.Now().Add(5 * time.Second)
	for {
		dec, err := d.Spend("demo", 1, "")
		if err != nil {
			b.Fatal(err)
		}
		if dec == pacer.Allowed {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("warm-up: SPEND demo 1 = %v after 5s, want allowed", dec)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 1000 {
		_, _ = d.Spend("demo", 1, "")
	}
	return d
}

// BenchmarkSpend is the in-process SPEND decision, as the socket server calls
// it for "SPEND demo 1": campaign lookup, the wall-clock read
// (daemon.SystemClock), the bucket's check-and-decrement and the counters.
// Target (issue 2): under 100 ns, 0 allocations.
func BenchmarkSpend(b *testing.B) {
	benchSpend(b, daemon.SystemClock)
}

// BenchmarkSpendParallel is the same with every P spending from one campaign
// at once, as many bidder connections do: the worst case for the bucket's
// mutex.
func BenchmarkSpendParallel(b *testing.B) {
	benchSpendParallel(b, daemon.SystemClock)
}

// fixedClock returns the same instant on every call: the decision's own cost,
// without the clock read (time.Now costs ~70 ns on some VMs, see
// bucket.BenchmarkTimeNow). The refill loop shares it, which is fine for the
// few seconds a benchmark lasts: the lease primed at warm-up holds far more
// than the benchmark spends.
func fixedClock() daemon.Clock {
	t := time.Now()
	return daemon.ClockFunc(func() time.Time { return t })
}

// BenchmarkSpendFixedClock is BenchmarkSpend without reading the clock.
func BenchmarkSpendFixedClock(b *testing.B) {
	benchSpend(b, fixedClock())
}

// BenchmarkSpendParallelFixedClock is BenchmarkSpendParallel without reading
// the clock.
func BenchmarkSpendParallelFixedClock(b *testing.B) {
	benchSpendParallel(b, fixedClock())
}

func benchSpend(b *testing.B, clock daemon.Clock) {
	benchSpendOn(b, warmDaemon(b, clock))
}

// benchSpendOn times SPENDs of one micro on a warm daemon, then checks
// they were all allowed.
func benchSpendOn(b *testing.B, d *daemon.Daemon) {
	before := notAllowed(d)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := d.Spend("demo", 1, ""); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	checkAllowed(b, d, before)
}

func benchSpendParallel(b *testing.B, clock daemon.Clock) {
	d := warmDaemon(b, clock)
	before := notAllowed(d)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := d.Spend("demo", 1, ""); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	checkAllowed(b, d, before)
}

// notAllowed is how many SPENDs the daemon has paced, refused as exhausted or
// failed so far, from its INFO counters.
func notAllowed(d *daemon.Daemon) int64 {
	var n int64
	for _, f := range d.Info() {
		switch f.Key {
		case "spend_paced", "spend_exhausted", "spend_errors":
			v, _ := strconv.ParseInt(f.Value, 10, 64)
			n += v
		}
	}
	return n
}

// checkAllowed fails the benchmark if more than 0.1% of its SPENDs were not
// allowed: the figure must be the allowed path's, not the paced one's.
func checkAllowed(b *testing.B, d *daemon.Daemon, before int64) {
	b.Helper()
	if n := notAllowed(d) - before; n > int64(b.N)/1000 {
		b.Fatalf("%d of %d SPENDs were not allowed: the benchmark measured the paced path", n, b.N)
	}
}

// BenchmarkSpendAuctionID is SPEND with a new auction id every time, as
// bidders send it: the id's 128-bit hash, its stripe of the daemon's auction
// memory and a remembered record, on top of BenchmarkSpendFixedClock's path.
// (The fixed clock keeps every id inside the window, so the memory bound is
// what forgets the oldest.)
func BenchmarkSpendAuctionID(b *testing.B) {
	d := warmDaemon(b, fixedClock())
	before := notAllowed(d)
	buf := []byte("auction-00000000000000000000")
	b.ReportAllocs()
	b.ResetTimer()
	var i uint64
	for b.Loop() {
		i++
		n := len(strconv.AppendUint(buf[:8], i, 10))
		// The daemon keeps only the id's hash, never the string: a string
		// over the reused buffer is safe here and keeps the benchmark's own
		// allocations out of the figure.
		if _, err := d.Spend("demo", 1, unsafe.String(&buf[0], n)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	checkAllowed(b, d, before)
}

// BenchmarkSpendAuctionIDRetry is a retried SPEND answered from memory.
func BenchmarkSpendAuctionIDRetry(b *testing.B) {
	d := warmDaemon(b, fixedClock())
	before := notAllowed(d)
	if dec, err := d.Spend("demo", 1, "auction-retried"); err != nil || dec != pacer.Allowed {
		b.Fatalf("first SPEND = %v, %v", dec, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := d.Spend("demo", 1, "auction-retried"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	checkAllowed(b, d, before)
}
