package daemon_test

import (
	"slices"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/transport"
)

// BenchmarkRevokePropagation measures a pause's broadcast over a real NATS
// server: from publish to the last of three daemons denying SPEND. It reports
// p50 and p99 in microseconds.
func BenchmarkRevokePropagation(b *testing.B) {
	f := newFixture(b)
	n := startNATS(b)
	f.campaign(b, "c", 8_640_000_000, 4)
	f.clock.Set(midnight.Add(12 * time.Hour))
	var ds []*daemon.Daemon
	for _, h := range []string{"a", "b", "c"} {
		d, _ := f.fleetDaemon(b, h, n.URL, daemon.Config{})
		ds = append(ds, d)
	}
	pub, err := transport.Connect(n.URL, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	var lat []time.Duration
	for b.Loop() {
		// Back to active everywhere (not timed in the figures below).
		for _, d := range ds {
			d.Step(ctx)
			if dec, _ := d.Spend("c", 1, ""); dec == transport.Exhausted {
				b.Fatal("daemon still denying before the revoke")
			}
		}
		start := time.Now()
		if err := pub.Publish(transport.Event{Kind: transport.EventRevoked, Campaign: "c"}); err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			for {
				if dec, _ := d.Spend("c", 1, ""); dec == transport.Exhausted {
					break
				}
				if time.Since(start) > 5*time.Second {
					b.Fatal("revoke not seen within 5s")
				}
			}
		}
		lat = append(lat, time.Since(start))
		// The campaign stays active in the ledger: each daemon's next Step
		// re-reads it and lifts the revoke.
		f.clock.Add(10 * time.Millisecond)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
