package daemon_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/lease"
)

// An operator's pause and resume, back to back, each reach a daemon at its
// next tick: an event naming a settings version newer than any seen is read
// whatever the per-campaign rate limit on events (a lease window / 8). One
// naming no newer version still waits for the limit.
func TestPauseAndResumeBackToBackEachTakeATick(t *testing.T) {
	f := newFixture(t)
	f.campaign(t, "c", 8_640_000_000, 4)
	f.clock.Set(midnight.Add(12 * time.Hour))
	d := f.daemon(t, "h")
	for range 3 {
		f.clock.Add(100 * time.Millisecond)
		d.Step(ctx)
		spendUntilDenied(t, d, "c", 1000)
	}
	tick := func() {
		f.clock.Add(10 * time.Millisecond)
		d.Step(ctx)
	}
	paused, err := f.ledger.SetState(ctx, "c", lease.StatePaused)
	if err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c", Version: paused.Version})
	tick()
	if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
		t.Fatalf("a tick after the pause's event, SPEND = %v; want exhausted (paused)", dec)
	}
	resumed, err := f.ledger.SetState(ctx, "c", lease.StateActive)
	if err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventChanged, Campaign: "c", Version: resumed.Version})
	tick()
	if dec, _ := d.Spend("c", 1, ""); dec == pacer.Exhausted {
		t.Fatal("10 ms after the pause, a tick after the resume's event, the campaign is still paused; want it resumed")
	}

	// A pause whose event names no version waits for the rate limit.
	if _, err := f.ledger.SetState(ctx, "c", lease.StatePaused); err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c"})
	tick()
	if dec, _ := d.Spend("c", 1, ""); dec == pacer.Exhausted {
		t.Fatal("an event naming no new version was read within the rate limit")
	}
	f.clock.Add(5 * time.Second) // past the limit (30 s / 8)
	d.Step(ctx)
	if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
		t.Fatalf("past the rate limit, SPEND = %v; want exhausted (paused)", dec)
	}
}
