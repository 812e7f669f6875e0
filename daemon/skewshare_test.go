package daemon_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
)

// Issue 35: when one host's gate refuses leases (its clock skewed past the
// skew bound), its clients still ask it and are refused, and the host that
// serves takes the fleet's rate once its share follows. Two daemons see 4x a
// busy campaign's pace, h1 70% of the SPENDs and h2 30% (1.2x the pace); at
// 20 minutes h1's gate closes, and it keeps stepping, flushing its demand
// and refusing its SPENDs. While h1's refused SPENDs counted in the fleet's
// demand, h2 kept its 30% share all along: metered at 30% of the catch-up
// rate once the fleet was four windows behind, it spent 0.88x the pace over
// the hour after, 0.90x in its last half, and the fleet fell ever further
// behind its curve. Judged on the hosts that serve, h2's share moves to the
// whole over its spans of whole minutes (about six minutes after h1's
// first flush without micros), and once it is alone it records no demand
// at the shards, whose fair split still held it to h1's old records: 0.87x
// in the first ten minutes (at least 0.85x; judged on 15-minute slots,
// 0.82x), 0.99x over the hour (at least 0.98x; was 0.97x), at least 0.97x
// in every 10 minutes after the first, and in its last half the pace and
// what fell behind (0.99x or more).
func TestSharesFollowTheHostsThatServe(t *testing.T) {
	f := newFixture(t)
	const pace, bid = 100_000, 1_000
	const tick = 100 * time.Millisecond
	paceCampaign(t, f, pace, time.Minute)
	var skewed atomic.Bool
	refuse := func(context.Context) error {
		if skewed.Load() {
			return errors.New("clock 5s ahead of redis")
		}
		return nil
	}
	weights := []float64{0.7, 0.3}
	var ds []*daemon.Daemon
	for i, h := range []string{"h1", "h2"} {
		cfg := daemon.Config{Holder: h, Clock: f.Clock, TickInterval: tick}
		if i == 0 {
			cfg.LedgerGate = refuse
		}
		d, err := daemon.New(f.Ledger, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(ctx) })
		ds = append(ds, d)
	}
	const skew, run = 20 * time.Minute, 80 * time.Minute
	_, perMinute := spendHosts(t, f, ds, weights, 4.0*pace/bid, bid, tick, 0, run, func(at time.Duration) { skewed.Store(at >= skew) })
	rate := func(from, to time.Duration) float64 {
		var sum int64
		for _, a := range perMinute[from/time.Minute : to/time.Minute] {
			sum += a
		}
		return float64(sum) / (to - from).Seconds() / pace
	}
	hour, late := rate(skew, skew+time.Hour), rate(skew+30*time.Minute, skew+time.Hour)
	t.Logf("per minute (the pace: 6,000,000): %v", perMinute)
	t.Logf("before the skew %.3fx the pace; the first 10 minutes after %.3fx; the hour after %.3fx, its last half %.3fx",
		rate(5*time.Minute, skew), rate(skew, skew+10*time.Minute), hour, late)
	var windows []float64
	for from := skew + 10*time.Minute; from < skew+time.Hour; from += 10 * time.Minute {
		windows = append(windows, rate(from, from+10*time.Minute))
	}
	t.Logf("10-minute windows from 10 minutes after: %.3f", windows)
	if first := rate(skew, skew+10*time.Minute); first < 0.85 {
		t.Errorf("with h1 refused its leases the fleet spent %.3fx its pace in the first 10 minutes after; want at least 0.85x", first)
	}
	if hour < 0.98 || late < 0.99 {
		t.Errorf("with h1 refused its leases the fleet spent %.3fx its pace over the hour after, %.3fx in its last half; want at least 0.98x and 0.99x", hour, late)
	}
	for i, w := range windows {
		if w < 0.97 {
			t.Errorf("with h1 refused its leases the fleet spent %.3fx its pace in minutes %d-%d after; want at least 0.97x", w, 10*(i+1), 10*(i+2))
		}
	}
	f.Check(t, "c")
}

// A host whose gate refuses leases records its SPENDs for the curve's fit
// (requests, denials) but not their micros as demand the fleet shares: the
// ledger's micros asked are the demand of the hosts that serve. The
// control, a host whose gate is open, records its micros asked.
func TestRefusedHostAsksNoShare(t *testing.T) {
	for _, c := range []struct {
		name   string
		refuse error
	}{{"refused", errors.New("clock 5s ahead of redis")}, {"open", nil}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			paceCampaign(t, f, 100_000, time.Hour)
			gate := func(context.Context) error { return c.refuse }
			d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, LedgerGate: gate})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close(ctx) })
			for range 300 { // 2 minutes: two demand flushes
				d.Step(ctx)
				if _, err := d.Spend("c", 1_000, ""); err != nil {
					t.Fatal(err)
				}
				f.Clock.Add(400 * time.Millisecond)
			}
			dd, ok, err := f.Ledger.ReadDemand(ctx, "c", midnight.Format("2006-01-02"))
			if err != nil || !ok {
				t.Fatalf("demand: %v, %v", ok, err)
			}
			var asked int64
			for _, v := range dd.MicrosAsked {
				asked += v
			}
			t.Logf("requests %d, denied %d, micros asked %d", dd.Total.Requests, dd.Total.Denied, asked)
			if dd.Total.Requests < 100 {
				t.Fatalf("%d requests recorded; want the SPENDs of two minutes' flushes", dd.Total.Requests)
			}
			if want := c.refuse == nil; (asked > 0) != want {
				t.Errorf("micros asked %d with the gate's refusal %v; want them recorded: %v", asked, c.refuse, want)
			}
		})
	}
}
