package lease_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A demand flush returns the fleet's micros asked in the slot it wrote, its
// own included, and in the slot before, which daemons judge their share of
// the campaign's demand on once it is over (daemon's updateShare).
func TestAddDemandReturnsTheSlotAndTheOneBefore(t *testing.T) {
	l, _ := newLedger(t)
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const day = "2026-11-21"
	add := func(d ...lease.Demand) lease.FleetAsked {
		t.Helper()
		got, err := l.AddDemand(ctx, "c", day, t0, d...)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := add(lease.Demand{Slot: 0, Requests: 1, MicrosAsked: 700}); got != (lease.FleetAsked{Slot: 700}) {
		t.Errorf("slot 0: %+v, want 700 and none before", got)
	}
	add(lease.Demand{Slot: 4, Requests: 2, MicrosAsked: 3_000})
	add(lease.Demand{Slot: 4, Requests: 1, MicrosAsked: 1_000})
	if got := add(lease.Demand{Slot: 5, Requests: 1, MicrosAsked: 500}); got != (lease.FleetAsked{Slot: 500, Before: 4_000}) {
		t.Errorf("slot 5: %+v, want 500 and slot 4's 4,000", got)
	}
	// A flush covering several slots answers for the last.
	if got := add(lease.Demand{Slot: 5, Requests: 1, MicrosAsked: 100}, lease.Demand{Slot: 6, Requests: 1, MicrosAsked: 200}); got != (lease.FleetAsked{Slot: 200, Before: 600}) {
		t.Errorf("slots 5 and 6: %+v, want 200 and slot 5's 600", got)
	}
	if got := add(lease.Demand{Slot: 9, Requests: 1, MicrosAsked: 10}); got != (lease.FleetAsked{Slot: 10}) {
		t.Errorf("slot 9 after no count in 8: %+v, want 10 and 0 before", got)
	}
}
