package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// An operator's pause and resume, back to back, each reach a daemon at its
// next tick: an event naming a settings version newer than any seen is read
// whatever the per-campaign rate limit on events (a lease window / 8). One
// naming no newer version still waits for the limit.
func TestPauseAndResumeBackToBackEachTakeATick(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d := f.daemon(t, "h")
	for range 3 {
		f.Clock.Add(100 * time.Millisecond)
		d.Step(ctx)
		spendUntilDenied(t, d, "c", 1000)
	}
	tick := func() {
		f.Clock.Add(10 * time.Millisecond)
		d.Step(ctx)
	}
	paused, err := f.Ledger.SetState(ctx, "c", lease.StatePaused)
	if err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c", Version: paused.Version})
	tick()
	if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
		t.Fatalf("a tick after the pause's event, SPEND = %v; want exhausted (paused)", dec)
	}
	resumed, err := f.Ledger.SetState(ctx, "c", lease.StateActive)
	if err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventChanged, Campaign: "c", Version: resumed.Version})
	tick()
	if dec, _ := d.Spend("c", 1, ""); dec == pacer.Exhausted {
		t.Fatal("10 ms after the pause, a tick after the resume's event, the campaign is still paused; want it resumed")
	}

	// A pause whose event names no version waits for the rate limit.
	if _, err := f.Ledger.SetState(ctx, "c", lease.StatePaused); err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c"})
	tick()
	if dec, _ := d.Spend("c", 1, ""); dec == pacer.Exhausted {
		t.Fatal("an event naming no new version was read within the rate limit")
	}
	f.Clock.Add(5 * time.Second) // past the limit (30 s / 8)
	d.Step(ctx)
	if dec, _ := d.Spend("c", 1, ""); dec != pacer.Exhausted {
		t.Fatalf("past the rate limit, SPEND = %v; want exhausted (paused)", dec)
	}
}

// A running daemon acts on an operator's event at once, not at its next
// tick: with ticks 25 s apart (the test is over before the first), a pause
// and then a resume, each broadcast with its settings version, each reach
// the daemon's SPEND answers (the resume a tenth of a tick after the
// pause's step at most: the least gap between event steps).
func TestOperatorsEventsAreActedOnBetweenTicks(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 8_640_000_000, 4)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, TickInterval: 25 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	for range 3 {
		f.Clock.Add(100 * time.Millisecond)
		d.Step(ctx)
		spendUntilDenied(t, d, "c", 1000)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	// until polls SPEND until it answers as want says, for at most 20 s:
	// far more than a settings read takes at a load average of 20, less
	// than the tick.
	until := func(step string, want func(pacer.Decision) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; {
			dec, err := d.Spend("c", 1, "")
			if err != nil {
				t.Fatal(err)
			}
			if want(dec) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: SPEND still answers %v 20 s after the event, before the first tick", step, dec)
			}
			time.Sleep(time.Millisecond)
		}
	}
	paused, err := f.Ledger.SetState(ctx, "c", lease.StatePaused)
	if err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventRevoked, Campaign: "c", Version: paused.Version})
	until("pause", func(dec pacer.Decision) bool { return dec == pacer.Exhausted })
	resumed, err := f.Ledger.SetState(ctx, "c", lease.StateActive)
	if err != nil {
		t.Fatal(err)
	}
	d.HandleEvent(pacer.Event{Kind: pacer.EventChanged, Campaign: "c", Version: resumed.Version})
	until("resume", func(dec pacer.Decision) bool { return dec != pacer.Exhausted })
}
