package lease_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A demand flush returns the fleet's micros asked in the slot it wrote, its
// own included, and in the slot before, and the day's SPENDs and micros
// asked so far (fewer than lease.FleetSpends here), which daemons judge their share of
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
	if got := add(lease.Demand{Slot: 0, Requests: 1, MicrosAsked: 700, Fleet: true}); got != (lease.FleetAsked{Slot: 700, Spends: 1, Micros: 700}) {
		t.Errorf("slot 0: %+v, want 700 and none before", got)
	}
	add(lease.Demand{Slot: 4, Requests: 2, MicrosAsked: 3_000, Fleet: true})
	add(lease.Demand{Slot: 4, Requests: 1, MicrosAsked: 1_000, Fleet: true})
	if got := add(lease.Demand{Slot: 5, Requests: 1, MicrosAsked: 500, Fleet: true}); got != (lease.FleetAsked{Slot: 500, Before: 4_000, Spends: 5, Micros: 5_200}) {
		t.Errorf("slot 5: %+v, want 500 and slot 4's 4,000", got)
	}
	// A flush covering several slots answers for the last.
	if got := add(lease.Demand{Slot: 5, Requests: 1, MicrosAsked: 100, Fleet: true}, lease.Demand{Slot: 6, Requests: 1, MicrosAsked: 200, Fleet: true}); got != (lease.FleetAsked{Slot: 200, Before: 600, Spends: 7, Micros: 5_500}) {
		t.Errorf("slots 5 and 6: %+v, want 200 and slot 5's 600", got)
	}
	if got := add(lease.Demand{Slot: 9, Requests: 1, MicrosAsked: 10, Fleet: true}); got != (lease.FleetAsked{Slot: 10, Spends: 8, Micros: 5_510}) {
		t.Errorf("slot 9 after no count in 8: %+v, want 10 and 0 before", got)
	}
}

// A flush that does not ask for the fleet's SPENDs (Demand.Fleet: the
// campaign's advance does not depend on them) gets none, and reads only the
// slot before its own, however few SPENDs the slots before hold.
func TestAddDemandCountsTheFleetOnlyWhenAsked(t *testing.T) {
	l, srv := newLedger(t)
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const day = "2026-11-21"
	for slot := range 40 {
		if _, err := l.AddDemand(ctx, "c", day, t0, lease.Demand{Slot: slot, Requests: 1, MicrosAsked: 1_000}); err != nil {
			t.Fatal(err)
		}
	}
	reads := func() int64 {
		t.Helper()
		info, err := srv.Client().Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		return commandCalls(info, "hmget") + commandCalls(info, "hget")
	}
	before := reads()
	got, err := l.AddDemand(ctx, "c", day, t0, lease.Demand{Slot: 40, Requests: 1, MicrosAsked: 1_000})
	if err != nil {
		t.Fatal(err)
	}
	if got != (lease.FleetAsked{Slot: 1_000, Before: 1_000}) {
		t.Errorf("a flush not asking for the fleet: %+v, want its slot's and the one before's micros only", got)
	}
	if n := reads() - before; n != 1 {
		t.Errorf("a flush not asking for the fleet read %d fields' slots, want 1 (the slot before)", n)
	}
	got, err = l.AddDemand(ctx, "c", day, t0, lease.Demand{Slot: 40, Requests: 1, MicrosAsked: 1_000, Fleet: true})
	if err != nil || got.Spends != 42 || got.Micros != 42_000 {
		t.Errorf("the same flush asking for the fleet: %+v, %v; want 42 SPENDs asking 42,000", got, err)
	}
}

// commandCalls is the calls of cmd in an INFO commandstats reply.
func commandCalls(info, cmd string) int64 {
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest+",", ',')], 10, 64)
		return n
	}
	return 0
}

// A demand flush counts the fleet's latest lease.FleetSpends SPENDs and
// their micros: whole slots from the flushed one back until they hold that
// many. Counts a previous release's daemon wrote (the same fields, by its
// own script) are among them: in a rolling upgrade the new daemons' mean
// SPEND is the whole fleet's.
func TestAddDemandCountsTheFleetsLatestSpends(t *testing.T) {
	l, srv := newLedger(t)
	rdb := srv.Client()
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const day = "2026-11-21"
	key := lease.DemandKey("c", day)
	// A previous release's flush of slot 2: its script adds the same four
	// fields.
	for f, v := range map[string]int64{"req:2": 3, "ok:2": 3, "no:2": 0, "reqm:2": 6_000} {
		if err := rdb.HIncrBy(ctx, key, f, v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.AddDemand(ctx, "c", day, t0, lease.Demand{Slot: 3, Requests: 1, MicrosAsked: 1_000, Fleet: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spends != 4 || got.Micros != 7_000 {
		t.Errorf("slots 2 and 3: %d SPENDs asking %d micros, want 4 asking 7,000", got.Spends, got.Micros)
	}
	// Enough SPENDs in slots 9 and 10: slots 3 and before are not counted.
	half := int64(lease.FleetSpends / 2)
	if _, err := l.AddDemand(ctx, "c", day, t0, lease.Demand{Slot: 9, Requests: half, MicrosAsked: half * 10, Fleet: true}); err != nil {
		t.Fatal(err)
	}
	got, err = l.AddDemand(ctx, "c", day, t0, lease.Demand{Slot: 10, Requests: half, MicrosAsked: half * 20, Fleet: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spends != 2*half || got.Micros != half*30 {
		t.Errorf("slots 9 and 10: %d SPENDs asking %d micros, want %d asking %d", got.Spends, got.Micros, 2*half, half*30)
	}
}
