package lease_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A demand flush returns the fleet's micros asked in the slot it wrote, its
// own included, and in the slot before (a fresh daemon's stand-in share
// comes from the first: daemon's updateShare), and the day's SPENDs and
// micros asked so far (fewer than lease.FleetSpends here).
func TestAddDemandReturnsTheSlotAndTheOneBefore(t *testing.T) {
	l, _ := newLedger(t)
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const day = "2026-11-21"
	add := func(d ...lease.Demand) lease.FleetAsked {
		t.Helper()
		got, err := l.AddDemand(ctx, "c", day, t0, lease.Recent{}, d...)
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
		if _, err := l.AddDemand(ctx, "c", day, t0, lease.Recent{}, lease.Demand{Slot: slot, Requests: 1, MicrosAsked: 1_000}); err != nil {
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
	got, err := l.AddDemand(ctx, "c", day, t0, lease.Recent{}, lease.Demand{Slot: 40, Requests: 1, MicrosAsked: 1_000})
	if err != nil {
		t.Fatal(err)
	}
	if got != (lease.FleetAsked{Slot: 1_000, Before: 1_000}) {
		t.Errorf("a flush not asking for the fleet: %+v, want its slot's and the one before's micros only", got)
	}
	if n := reads() - before; n != 1 {
		t.Errorf("a flush not asking for the fleet read %d fields' slots, want 1 (the slot before)", n)
	}
	got, err = l.AddDemand(ctx, "c", day, t0, lease.Recent{}, lease.Demand{Slot: 40, Requests: 1, MicrosAsked: 1_000, Fleet: true})
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
	got, err := l.AddDemand(ctx, "c", day, t0, lease.Recent{}, lease.Demand{Slot: 3, Requests: 1, MicrosAsked: 1_000, Fleet: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spends != 4 || got.Micros != 7_000 {
		t.Errorf("slots 2 and 3: %d SPENDs asking %d micros, want 4 asking 7,000", got.Spends, got.Micros)
	}
	// Enough SPENDs in slots 9 and 10: slots 3 and before are not counted.
	half := int64(lease.FleetSpends / 2)
	if _, err := l.AddDemand(ctx, "c", day, t0, lease.Recent{}, lease.Demand{Slot: 9, Requests: half, MicrosAsked: half * 10, Fleet: true}); err != nil {
		t.Fatal(err)
	}
	got, err = l.AddDemand(ctx, "c", day, t0, lease.Recent{}, lease.Demand{Slot: 10, Requests: half, MicrosAsked: half * 20, Fleet: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spends != 2*half || got.Micros != half*30 {
		t.Errorf("slots 9 and 10: %d SPENDs asking %d micros, want %d asking %d", got.Spends, got.Micros, 2*half, half*30)
	}
}

// A flush counts its micros asked in the minute it names, in the ring of
// recent minutes, and reads back the fleet's micros over whole minutes
// before its own: flushes counted in the same minute add up whatever order
// they came in, a minute the ring has since reused for a later one is not
// counted, and a span outside the ring's reach is refused.
func TestAddDemandCountsRecentMinutes(t *testing.T) {
	l, srv := newLedger(t)
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const day = "2026-11-21"
	const m0 = 29_000_000
	add := func(rc lease.Recent, asked int64) lease.FleetAsked {
		t.Helper()
		got, err := l.AddDemand(ctx, "c", day, t0, rc, lease.Demand{Slot: 1, Requests: 1, MicrosAsked: asked})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	add(lease.Recent{Minute: m0}, 100)
	add(lease.Recent{Minute: m0 + 1}, 20)
	add(lease.Recent{Minute: m0 + 1}, 3) // another host's, the same minute
	add(lease.Recent{Minute: m0 + 3}, 4_000)
	got := add(lease.Recent{Minute: m0 + 4, From: m0, To: m0 + 3}, 1)
	if got.Span != 4_123 || got.SpanMinutes != 3 {
		t.Errorf("minutes m0..m0+3: %d micros in %d minutes, want 4,123 in 3 (none counted in m0+2)", got.Span, got.SpanMinutes)
	}
	// Minute m0 + 16 takes m0's field: m0 is no longer held.
	add(lease.Recent{Minute: m0 + lease.RecentMinutes}, 7)
	got = add(lease.Recent{Minute: m0 + lease.RecentMinutes + 1, From: m0 + 2, To: m0 + lease.RecentMinutes}, 0)
	if got.Span != 4_008 || got.SpanMinutes != 3 {
		t.Errorf("minutes m0+2..m0+16: %d micros in %d minutes, want 4,008 in 3", got.Span, got.SpanMinutes)
	}
	if n, err := srv.Client().HLen(ctx, lease.RecentDemandKey("c", day)).Result(); err != nil || n > lease.RecentMinutes {
		t.Errorf("the ring holds %d fields (%v), want at most %d", n, err, lease.RecentMinutes)
	}
	for _, rc := range []lease.Recent{
		{Minute: m0 + 20, From: m0 + 4, To: m0 + 19},  // from 16 minutes before
		{Minute: m0 + 20, From: m0 + 19, To: m0 + 20}, // the flush's own minute
		{Minute: m0 + 20, From: m0 + 10, To: m0 + 9},
		{From: m0, To: m0 + 1},
		{Minute: -1},
	} {
		if _, err := l.AddDemand(ctx, "c", day, t0, rc, lease.Demand{Slot: 1, Requests: 1}); err == nil {
			t.Errorf("%+v: want an error", rc)
		}
	}
}
