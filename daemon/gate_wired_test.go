package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
)

// A daemon whose clock runs 60 s ahead of Redis takes no lease: its SPENDs
// are paced and the ledger leases nothing; once its clock is right, it does.
func TestClockAheadGetsNoLease(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c1", 86_400_000_000, 2)
	ahead := clocktest.At(time.Now().Add(60 * time.Second))
	gate := daemon.NewLedgerGate(daemon.GateConfig{})
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: ahead, LedgerGate: gate.Err})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	gate.Add("clock", d.CheckClock)
	if err := gate.Check(ctx); err == nil || !strings.Contains(err.Error(), "ahead of redis") {
		t.Fatalf("gate: %v", err)
	}
	for range 10 {
		if dec, err := d.Spend("c1", 1000, ""); err != nil || dec == pacer.Allowed {
			t.Fatalf("SPEND with the clock 60s ahead: %v, %v", dec, err)
		}
		d.Step(ctx)
	}
	day := ahead.Now().UTC().Format("2006-01-02")
	if tot, err := f.Ledger.DayTotals(ctx, "c1", day); err != nil || tot.Leased != 0 || tot.Spent != 0 {
		t.Fatalf("ledger after refused grants: %+v, %v", tot, err)
	}

	// The control: the same, with the clock right.
	right := clocktest.At(time.Now())
	gate2 := daemon.NewLedgerGate(daemon.GateConfig{})
	d2, err := daemon.New(f.Ledger, daemon.Config{Holder: "h2", Clock: right, LedgerGate: gate2.Err})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close(ctx)
	gate2.Add("clock", d2.CheckClock)
	if err := gate2.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if dec, err := d2.Spend("c1", 1000, ""); err != nil || dec != pacer.Allowed {
		t.Fatalf("SPEND with the clock right: %v, %v", dec, err)
	}
}
