package daemon_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// ledgerCalls returns pacer_lease_calls_total by op.
func ledgerCalls(t *testing.T, d *daemon.Daemon) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mf := range gather(t, d) {
		if mf.GetName() != "pacer_lease_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// Issue 11: a flood of events, 20 a second of each kind for a minute, is a
// hint the daemon acts on at most once per campaign per EventRecheck (30s/8 =
// 3.75s by default). It costs a bounded number of reads, no release or
// re-grant beyond the ones the campaign's traffic needs, and no denial: the
// ledger says the campaign is active with budget.
func TestEventFloodIsBounded(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4) // 100,000 micros/s flat
	f.Clock.Set(midnight.Add(12 * time.Hour))
	run := func(d *daemon.Daemon, flood bool) map[string]float64 {
		before := ledgerCalls(t, d)
		for i := range 600 { // 60 s in 100 ms ticks
			if flood {
				for _, kind := range []string{pacer.EventRevoked, pacer.EventChanged, pacer.EventExhausted, pacer.EventLostWrites} {
					d.HandleEvent(pacer.Event{Kind: kind, Campaign: "c", Day: day, From: "mallory", AtMillis: f.Clock.Now().UnixMilli()})
				}
			}
			f.Clock.Add(100 * time.Millisecond)
			d.Step(ctx)
			for range 2 {
				dec, err := d.Spend("c", 1_000, "")
				if err != nil {
					t.Fatal(err)
				}
				if dec == pacer.Exhausted {
					t.Fatalf("SPEND exhausted %v into the flood: events must not deny", time.Duration(i)*100*time.Millisecond)
				}
			}
		}
		after := ledgerCalls(t, d)
		for op := range after {
			after[op] -= before[op]
		}
		return after
	}
	quietD := f.daemon(t, "quiet")
	run(quietD, false) // warm up: leases held, demand known
	quiet := run(quietD, false)
	quietD.Close(ctx)

	d := f.daemon(t, "flooded")
	run(d, false)
	flood := run(d, true)
	t.Logf("ledger calls in 60 s: quiet %v; flooded %v", quiet, flood)
	// 60 s / 3.75 s = 16 windows: at most 17 event-triggered settings reads,
	// plus the two periodic ones.
	if flood["refresh"] > 17+2 {
		t.Errorf("%v settings reads in a minute of flood; want at most 19", flood["refresh"])
	}
	// Shard reads (exhausted hint): at most 4 shards per window.
	if flood["read"] > 4*17 {
		t.Errorf("%v shard reads in a minute of flood; want at most %d", flood["read"], 4*17)
	}
	// Re-asserts (lost-writes hint): the leases held, once per window.
	if flood["reassert"] > 4*17 {
		t.Errorf("%v re-asserts in a minute of flood; want at most %d", flood["reassert"], 4*17)
	}
	// A forged revoke never drops the leases: grants and releases as quiet.
	for _, op := range []string{"grant", "renew", "release", "open"} {
		if flood[op] > quiet[op]+2 {
			t.Errorf("%s: %v calls flooded vs %v quiet: a forged revoke made the daemon give back and re-take leases", op, flood[op], quiet[op])
		}
	}
	if b, _ := d.Balance("c"); b.State != "active" {
		t.Fatalf("state %q after the flood, want active", b.State)
	}
}

// A revoke is acted on when the ledger confirms it, one tick later: a cut
// gives back the leases held; the same event with nothing changed in the
// ledger gives back nothing.
func TestRevokeConfirmedByLedger(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d := f.daemon(t, "h")
	for range 5 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		spendAttempts(t, d, "c", 1_000, 20)
	}
	held := f.Check(t, "c").Leased
	if held == 0 {
		t.Fatal("no lease held")
	}
	// The ids of the leases held now: a confirmed cut must give back every
	// one of them (the daemon may then lease again under the new budget).
	heldIDs := func() map[string]bool {
		ids := map[string]bool{}
		for shard := range 4 {
			ls, err := f.Ledger.Leases(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: shard})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range ls {
				ids[l.ID] = true
			}
		}
		return ids
	}
	before := heldIDs()
	revoke := func() {
		d.HandleEvent(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c", From: "op", AtMillis: f.Clock.Now().UnixMilli()})
		f.Clock.Add(100 * time.Millisecond)
		d.Step(ctx)
	}
	revoke() // nothing changed in the ledger
	if got := f.Check(t, "c").Leased; got < held {
		t.Fatalf("leased %d after a revoke the ledger does not confirm; want the %d held kept", got, held)
	}
	c, err := f.Ledger.GetCampaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	c.DailyMicros /= 2
	if _, err := f.Ledger.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	f.Clock.Add(4 * time.Second) // past EventRecheck since the last revoke
	revoke()
	for id := range heldIDs() {
		if before[id] {
			t.Fatalf("lease %s still held after a confirmed cut; want every lease held before it (%d micros) given back", id, held)
		}
	}
	if _, err := f.Ledger.SetState(ctx, "c", lease.StatePaused); err != nil {
		t.Fatal(err)
	}
	f.Clock.Add(4 * time.Second)
	revoke()
	if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
		t.Fatalf("SPEND after a confirmed pause = %v, want exhausted", dec)
	}
}

// With the fleet's key, a forged revoke (unsigned, or signed with another
// key) and a replayed one never reach the daemon over a real NATS server: no
// ledger read at all; the operator's signed revoke of a paused campaign
// does, and the next tick denies.
func TestSignedBroadcastsReachTheDaemon(t *testing.T) {
	f := newFixture(t)
	n := startNATS(t)
	f.Campaign(t, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	key := []byte("the fleet's broadcast key, 32 bytes or more")
	connect := func(k []byte) *broadcast.Broadcaster {
		b, err := broadcast.ConnectWith(n.URL, broadcast.Options{Keys: [][]byte{k}, MaxAge: 10 * time.Second, Now: f.Clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	bc := connect(key)
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, Publisher: bc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	if err := bc.Subscribe(d.HandleEvent); err != nil {
		t.Fatal(err)
	}
	bc.Flush(5 * time.Second)
	for range 5 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
		spendAttempts(t, d, "c", 1_000, 20)
	}
	f.Clock.Add(time.Minute) // past every rate limit
	d.Step(ctx)
	before := ledgerCalls(t, d)

	mallory := connect([]byte("mallory's key, also 32 bytes or more"))
	unsigned, err := broadcast.Connect(n.URL, "unsigned", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsigned.Close)
	for range 50 {
		mallory.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c"})
		unsigned.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c", AtMillis: f.Clock.Now().UnixMilli()})
	}
	mallory.Flush(5 * time.Second)
	unsigned.Flush(5 * time.Second)
	waitFor(t, "the forgeries to be rejected", func() bool {
		r := bc.Stats().Rejected
		return r[broadcast.RejectForged] == 50 && r[broadcast.RejectUnsigned] == 50
	})
	f.Clock.Add(100 * time.Millisecond)
	d.Step(ctx)
	after := ledgerCalls(t, d)
	if after["refresh"] != before["refresh"] || after["release"] != before["release"] {
		t.Fatalf("forged events cost ledger calls: before %v, after %v", before, after)
	}
	if bc.Stats().Received != 0 {
		t.Fatalf("%d forged events reached the daemon", bc.Stats().Received)
	}

	if _, err := f.Ledger.SetState(ctx, "c", lease.StatePaused); err != nil {
		t.Fatal(err)
	}
	op := connect(key)
	if err := op.Publish(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c", From: "pacerctl"}); err != nil {
		t.Fatal(err)
	}
	op.Flush(5 * time.Second)
	waitFor(t, "the operator's revoke", func() bool { return bc.Stats().Received == 1 })
	f.Clock.Add(100 * time.Millisecond)
	d.Step(ctx)
	if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
		t.Fatalf("SPEND after the signed revoke of a paused campaign = %v, want exhausted", dec)
	}
}
