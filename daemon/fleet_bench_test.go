package daemon_test

import (
	"slices"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// BenchmarkRevokePropagation measures a pause's broadcast over a real NATS
// server: from publish to the last of three daemons denying SPEND. A
// broadcast is a hint (issue 11): each daemon's refill loop, run here as
// soon as its broadcaster has the event, reads the ledger, which says
// paused. It reports p50 and p99 in microseconds: one NATS hop and one
// settings read (HGETALL) per daemon, on loopback.
func BenchmarkRevokePropagation(b *testing.B) {
	f := newFixture(b)
	n := startNATS(b)
	f.Campaign(b, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	var ds []*daemon.Daemon
	var bcs []*broadcast.Broadcaster
	for _, h := range []string{"a", "b", "c"} {
		d, bc := f.fleetDaemon(b, h, n.URL, daemon.Config{})
		ds, bcs = append(ds, d), append(bcs, bc)
	}
	pub, err := broadcast.Connect(n.URL, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	var lat []time.Duration
	for b.Loop() {
		// Back to active everywhere (not timed in the figures below), and
		// past the daemons' event rate limit.
		if _, err := f.Ledger.SetState(ctx, "c", lease.StateActive); err != nil {
			b.Fatal(err)
		}
		f.Clock.Add(time.Minute)
		for _, d := range ds {
			d.Step(ctx)
			if dec, _ := d.Spend("c", 1, ""); dec == pacer.Exhausted {
				b.Fatal("daemon still denying before the revoke")
			}
		}
		if _, err := f.Ledger.SetState(ctx, "c", lease.StatePaused); err != nil {
			b.Fatal(err)
		}
		seen := make([]int64, len(bcs))
		for i, bc := range bcs {
			seen[i] = bc.Stats().Received
		}
		start := time.Now()
		if err := pub.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c"}); err != nil {
			b.Fatal(err)
		}
		for i, d := range ds {
			for bcs[i].Stats().Received == seen[i] {
				if time.Since(start) > 5*time.Second {
					b.Fatal("revoke not received within 5s")
				}
			}
			d.Step(ctx)
			if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
				b.Fatalf("SPEND after the revoke and a tick = %v, want exhausted", dec)
			}
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
