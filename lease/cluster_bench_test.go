package lease_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// BenchmarkClusterIndexRead is what the reconciler's index reads cost a pass
// on a Redis Cluster of 3 masters (no replicas): the due and low indexes,
// one key per slot each, 2 × 16,384 ZRANGEBYSCOREs pipelined over the
// masters, with nothing in them (docs/BENCHMARKS.md, Scale).
func BenchmarkClusterIndexRead(b *testing.B) {
	cl := redistest.StartCluster(b, 3, 0)
	l := lease.New(cl.Client(), lease.Config{}, nil)
	now := time.Now()
	b.ResetTimer()
	for range b.N {
		if _, err := l.DueShards(ctx, now, 1000); err != nil {
			b.Fatal(err)
		}
		if _, err := l.LowShards(ctx, 1000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*16384, "cmds/pass")
}

// BenchmarkClusterAnchorRead is what a reconciler step's index reads cost
// on a Redis Cluster of 3 masters with nothing to do: the 64 anchors
// (AnchoredSlots) and the reanchor script on a rotating slice of 55 slots,
// each slot once per 5-minute sweep at one step a second (docs/BENCHMARKS.md,
// Scale).
func BenchmarkClusterAnchorRead(b *testing.B) {
	cl := redistest.StartCluster(b, 3, 0)
	l := lease.New(cl.Client(), lease.Config{}, nil)
	now := time.Now()
	slot := 0
	b.ResetTimer()
	for range b.N {
		listed, err := l.AnchoredSlots(ctx, now)
		if err != nil {
			b.Fatal(err)
		}
		slots := make([]int, 55)
		for i := range slots {
			slots[i] = slot
			slot = (slot + 1) % lease.Slots
		}
		if _, err := l.Reanchor(ctx, slots, listed); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(64+55, "cmds/pass")
}
