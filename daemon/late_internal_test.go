package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/pacer/pacer/pace"
)

// A refill loop that runs late (a starved host: its tick came after a
// lease's end, not the tick before it) has the lease's successor credit at
// once the drip it missed since that end, at most a burst window of it
// (condition 14, pace.LateCredit). Before, the successor dripped from the
// late tick on, and the gap was lost: a -race pacerd ticking 0.3-2 s apart
// on a loaded machine lost up to a third of a 10-s window of its pace at a
// renewal. Real redis-server, the daemon's clock moved by hand.
func TestALateTickCreditsTheDripItMissed(t *testing.T) {
	ctx := context.Background()
	_, _, ledger, _ := proxiedLedger(t)
	d, clock := spendingDaemon(t, ledger, LeaseTiming{})
	c := campaignC(t, d)
	tick := c.cfg.TickInterval
	drain := func() {
		for {
			dec, err := d.Spend("c", 1000, "")
			if err != nil {
				t.Fatal(err)
			}
			if dec != 1 {
				return
			}
		}
	}
	// Ordinary ticks for a minute, the bucket drained at each.
	for range int(time.Minute / tick) {
		clock.Add(tick)
		d.Step(ctx)
		drain()
	}
	// Then tick on time until the next tick would renew the lease that ends
	// first, and stop there: the loop runs late by late past its end.
	const late = 900 * time.Millisecond
	var end time.Time
	for {
		end = time.Time{}
		for _, h := range c.day.Load().leases {
			if end.IsZero() || h.end.Before(end) {
				end = h.end
			}
		}
		if end.IsZero() {
			t.Fatal("no lease held after a minute's ticks")
		}
		if clock.Now().Add(2 * tick).After(end) {
			break
		}
		clock.Add(tick)
		d.Step(ctx)
		drain()
	}
	drain()
	clock.Set(end.Add(late))
	ds := c.day.Load()
	before := ds.b.Stats(clock.Now()).Tokens
	held := map[string]bool{}
	for id := range ds.leases {
		held[id] = true
	}
	d.Step(ctx)
	now := clock.Now()
	after := ds.b.Stats(now).Tokens
	var want int64
	for id, h := range ds.leases {
		if !held[id] {
			want += pace.LateCredit(h.amount, late, c.cfg.BurstWindow, h.end.Sub(now))
		}
	}
	t.Logf("late %v past a lease's end: tokens %d before the tick, %d after; the successor's late credit %d", late, before, after, want)
	if want <= 0 {
		t.Fatal("the late tick granted no successor")
	}
	if after-before < want {
		t.Errorf("the late tick credited %d micros at once; want at least the %d its successor missed since the lease's end", after-before, want)
	}
}
