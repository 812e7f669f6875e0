package daemon_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// BenchmarkSpendJournaled is BenchmarkSpend on a daemon with a lease
// journal and its spent map, as pacerd runs with a state_dir: each allowed
// SPEND also stores the bucket's net spend in the campaign-day's slot of the
// map (one plain store to a MAP_SHARED page: no system call, no allocation).
func BenchmarkSpendJournaled(b *testing.B) {
	benchSpendJournaled(b, daemon.SystemClock)
}

// BenchmarkSpendJournaledFixedClock is BenchmarkSpendJournaled without
// reading the clock.
func BenchmarkSpendJournaledFixedClock(b *testing.B) {
	benchSpendJournaled(b, fixedClock())
}

func benchSpendJournaled(b *testing.B, clock daemon.Clock) {
	benchSpendOn(b, warmJournaledDaemon(b, clock))
}

// warmJournaledDaemon is warmDaemon with a journal in a temporary state
// directory.
func warmJournaledDaemon(b *testing.B, clock daemon.Clock) *daemon.Daemon {
	b.Helper()
	srv := redistest.Start(b)
	ledger := lease.New(srv.Client(), lease.Config{}, nil)
	if _, err := ledger.PutCampaign(ctx, lease.Campaign{ID: "demo", DailyMicros: benchDaily, TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive}); err != nil {
		b.Fatal(err)
	}
	j, _, err := daemon.OpenJournal(filepath.Join(b.TempDir(), "leases.journal"), nil)
	if err != nil {
		b.Fatal(err)
	}
	d, err := daemon.New(ledger, daemon.Config{Holder: "bench", Clock: clock, Journal: j})
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
		j.Close()
	})
	d.Warm([]string{"demo"})
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
	return d
}
