package daemon_test

import (
	"slices"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// ledgerReads is how many shard reads d made, from its metrics.
func ledgerReads(t *testing.T, d *daemon.Daemon) float64 {
	t.Helper()
	return ledgerOpCalls(t, d, "read")
}

// ledgerOpCalls sums the daemon's ledger calls of the given kinds
// (pacer_lease_calls_total's op label), succeeded or failed.
func ledgerOpCalls(t *testing.T, d *daemon.Daemon, ops ...string) float64 {
	t.Helper()
	var n float64
	for _, mf := range gather(t, d) {
		if mf.GetName() != "pacer_lease_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && slices.Contains(ops, l.GetValue()) {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// Issue 9, item 6: exhaustion is not sticky. Daemon a drains the day while b
// holds a lease of 1,000 micros, of which b's one SPEND used 250; b then
// gives the other 750 back. a, at "exhausted", finds them on its next look
// at the ledger (within CampaignRefresh), or at once when the campaign is
// resumed, and spends them.
func TestExhaustedDaemonGetsReleasedBudget(t *testing.T) {
	for _, resume := range []bool{false, true} {
		name := "periodic"
		if resume {
			name = "resume"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			cfg := morningCampaign(t, f, "c", 10_000, 1)
			f.Clock.Set(midnight.Add(13 * time.Hour))
			cfg.Clock = f.Clock
			cfg.Holder = "b"
			cfg.LeaseWindow = 5 * time.Minute // b holds its lease while a drains the rest
			b, err := daemon.New(f.Ledger, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(ctx)
			cfg.Holder, cfg.LeaseWindow = "a", 0
			a, err := daemon.New(f.Ledger, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(ctx)

			// b's first SPEND of 250 leases four of them, 1,000, and is
			// served: a starting host's credit covers its largest SPEND
			// (condition 6).
			if dec, err := b.Spend("c", 250, ""); err != nil || dec != pacer.Allowed {
				t.Fatalf("b's first SPEND = %v, %v; want allowed", dec, err)
			}
			if sh := f.Check(t, "c"); sh.Leased != 1_000 {
				t.Fatalf("b leased %d, want 1,000", sh.Leased)
			}
			var allowed int64
			for i := 0; ; i++ {
				if i > 180 {
					t.Fatalf("a not exhausted after 180 s: allowed %d, ledger %+v", allowed, f.Check(t, "c"))
				}
				allowed += spendAttempts(t, a, "c", 1_000, 50)
				if dec, _ := a.Spend("c", 1_000, ""); dec == pacer.Exhausted {
					break
				}
				f.Clock.Add(time.Second)
				a.Step(ctx)
			}
			if allowed != 9_000 {
				t.Fatalf("a allowed %d before exhaustion; 9,000 were not leased to b", allowed)
			}
			if !resume {
				// No bids, no reads: a bidder that stops on -1 stops the
				// daemon's looks at the ledger too (one may be due from the
				// bids just made).
				reads := ledgerReads(t, a)
				for range 90 {
					f.Clock.Add(time.Second)
					a.Step(ctx)
				}
				if n := ledgerReads(t, a) - reads; n > 1 {
					t.Fatalf("%v shard reads in 90 s without a bid", n)
				}
			}
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if sh := f.Check(t, "c"); sh.Remaining() != 750 {
				t.Fatalf("after b released: %+v; want 750 remaining", sh)
			}
			if resume {
				if _, err := f.Ledger.SetState(ctx, "c", lease.StateActive); err != nil {
					t.Fatal(err)
				}
				a.HandleEvent(pacer.Event{Kind: pacer.EventChanged, Campaign: "c"})
			}
			var after int64
			for range 70 { // a looks again within CampaignRefresh; its lease then closes
				f.Clock.Add(time.Second)
				a.Step(ctx)
				after += spendAttempts(t, a, "c", 250, 50)
				if resume && after == 0 {
					t.Fatalf("a did not lease again right after the campaign was resumed")
				}
			}
			if after != 750 {
				t.Fatalf("a allowed %d of the 750 micros b released", after)
			}
			if dec, _ := a.Spend("c", 250, ""); dec != pacer.Exhausted {
				t.Fatalf("SPEND with the whole budget spent = %v, want exhausted", dec)
			}
			if sh := f.Check(t, "c"); sh.Spent+sh.Leased < 250+allowed+after {
				t.Fatalf("allowed %d > ledger spent %d + leased %d", 250+allowed+after, sh.Spent, sh.Leased)
			}
		})
	}
}

// Issue 9, item 6: an exhausted broadcast is a hint. A forged one, with
// today's date, makes the daemon read the shards at once, and it keeps
// spending the budget they hold.
func TestForgedExhaustedEventDoesNotStopSpending(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4) // 100,000 micros/s flat
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d := f.daemon(t, "h")
	for range 5 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		spendAttempts(t, d, "c", 1_000, 20)
	}
	reads := ledgerReads(t, d)
	d.HandleEvent(pacer.Event{Kind: pacer.EventExhausted, Campaign: "c", Day: day, From: "mallory", AtMillis: f.Clock.Now().UnixMilli()})
	var late int64
	for i := range 90 { // three lease windows: past every lease held at the broadcast
		f.Clock.Add(time.Second)
		d.Step(ctx)
		if i == 0 && ledgerReads(t, d) <= reads {
			t.Fatal("the broadcast did not make the daemon ask the ledger")
		}
		for range 20 {
			dec, err := d.Spend("c", 1_000, "")
			if err != nil {
				t.Fatal(err)
			}
			if dec == pacer.Exhausted {
				t.Fatalf("SPEND answered exhausted %d s after a forged broadcast; the ledger has budget", i+1)
			}
			if dec == pacer.Allowed && i >= 60 {
				late += 1_000
			}
		}
	}
	if late == 0 {
		t.Fatal("nothing allowed in the last 30 s: the daemon stopped leasing after a forged broadcast")
	}
	if b, _ := d.Balance("c"); b.State != "active" {
		t.Fatalf("state %q after a forged broadcast, want active", b.State)
	}
}
