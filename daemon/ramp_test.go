package daemon_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// rampMinute is what one simulated minute of the ramp test cost and decided.
type rampMinute struct {
	commands      map[string]int64
	spends, paced int
}

// A wave of idle campaigns turning busy at once, on one daemon over a real
// redis-server, the refill loop ticking every 100 ms of a manual clock:
// each campaign's demand is a fifth of its pace (a flat curve of a
// currency unit a second; SPENDs of 20,000 micros, ten a second), so no
// SPEND should be paced. Counted: Redis commands per campaign-minute in
// the ramp's first minute against the steady minutes after, and the SPENDs
// paced. SparseWait is a second, so that a campaign's first SPENDs wait
// for their fetched lease however loaded the machine: what is counted is
// the daemon's sizing, not the speed of Redis.
//
// Goals (issue 36): the first minute costs at most twice a steady one, and
// no SPEND is paced. The campaign's first SPENDs fetch their leases; the
// jump in demand (followJump) sizes its first regular leases within half a
// second, the first of them asked at once, not a minGrantGap after the
// floor lease asked before the jump was seen; and those regular leases
// renew the fetched ones, so a fetched lease costs no release call of its
// own.
func TestIdleToBusyRamp(t *testing.T) {
	const n = 20
	f := newFixture(t)
	ledger, kinds := countingLedger(f)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "r" + strconv.Itoa(i)
		f.Campaign(t, ids[i], 86_400_000_000, 8)
	}
	f.Clock.Set(midnight.Add(12 * time.Hour))
	d, err := daemon.New(ledger, daemon.Config{Holder: "h", Clock: f.Clock, LeaseTiming: daemon.LeaseTiming{SparseWait: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	d.Warm(ids)
	for range 600 { // a minute idle
		f.Clock.Add(100 * time.Millisecond)
		d.Step(ctx)
	}
	// A fleet that has run a while has the demand script loaded: its first
	// use on this fresh redis-server (NOSCRIPT, then EVAL) is no cost of
	// the ramp.
	if _, err := ledger.AddDemand(ctx, "primer", day, midnight, lease.Recent{}, lease.Demand{Slot: 1, Allowed: 1, Requests: 1, MicrosAsked: 1}); err != nil {
		t.Fatal(err)
	}
	kinds.take()
	var minutes []rampMinute
	for range 5 {
		m := rampMinute{}
		for range 600 {
			f.Clock.Add(100 * time.Millisecond)
			d.Step(ctx)
			for _, id := range ids {
				m.spends++
				if dec, err := d.Spend(pacer.CampaignID(id), 20_000, ""); err != nil {
					t.Fatal(err)
				} else if dec != pacer.Allowed {
					m.paced++
				}
			}
		}
		m.commands = kinds.take()
		minutes = append(minutes, m)
	}
	perMinute := make([]float64, len(minutes))
	for i, m := range minutes {
		var all int64
		for _, v := range m.commands {
			all += v
		}
		perMinute[i] = float64(all) / n
		t.Logf("minute %d: %.1f commands per campaign-minute, %d of %d SPENDs paced: %v", i, perMinute[i], m.paced, m.spends, m.commands)
	}
	steady := slices.Sorted(slices.Values(perMinute[1:]))[len(perMinute[1:])/2] // the median
	if perMinute[0] > 2*steady {
		t.Errorf("the ramp's first minute cost %.1f commands per campaign-minute, %.1fx the steady %.1f: want at most 2x", perMinute[0], perMinute[0]/steady, steady)
	}
	for i, m := range minutes {
		if m.paced > 0 {
			t.Errorf("minute %d: %d SPENDs paced at a fifth of the pace", i, m.paced)
		}
	}
}
