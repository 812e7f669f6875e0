package daemon_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"go.uber.org/goleak"
)

// ignoreRedial: go-redis re-dials a refused pool in the background (see
// TestMain).
var ignoreRedial = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// Open assembles a daemon as pacerd runs it (its own Redis client, the ledger
// gate, the lease journal, NATS, the refill loop); Close releases its leases
// and leaves none of the goroutines Open started.
func TestOpenCloseLeavesNothing(t *testing.T) {
	f := newFixture(t)
	n := startNATS(t)
	f.Campaign(t, "c", 86_400_000_000, 2)
	today := time.Now().UTC().Format(time.DateOnly)
	stateDir := t.TempDir()
	before := goleak.IgnoreCurrent()

	d, err := daemon.Open(ctx, daemon.Config{Holder: "h1", TickInterval: 10 * time.Millisecond,
		Links: daemon.Links{
			Redis: []string{f.Redis.Socket}, CheckLedger: true,
			Ledger:   lease.Config{Durability: lease.Durability{Policy: lease.PolicyFsync}},
			StateDir: stateDir, NATS: n.URL,
		}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Broadcaster() == nil {
		t.Error("Open with a NATS URL: no broadcaster")
	}
	if dec, err := d.Spend("c", 1_000, ""); err != nil || dec != pacer.Allowed {
		t.Fatalf("first SPEND = %v, %v; want allowed (the gate open after Open's first check)", dec, err)
	}
	held, err := f.Ledger.DayLeases(ctx, "c", today)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) == 0 {
		t.Fatal("no lease held after an allowed SPEND")
	}
	if err := goleak.Find(before, ignoreRedial); err == nil {
		t.Fatal("Open started no goroutine (refill loop, gate, NATS): the check below would prove nothing")
	}
	if err := d.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	goleak.VerifyNone(t, before, ignoreRedial)
	held, err = f.Ledger.DayLeases(ctx, "c", today)
	if err != nil {
		t.Fatal(err)
	}
	for _, lr := range held {
		if lr.Holder == "h1" {
			t.Errorf("lease %s of %d micros still held after Close", lr.ID, lr.Amount)
		}
	}
	// The journal Open kept was closed with nothing left open in it.
	j, left, err := daemon.OpenJournal(stateDir+"/leases.journal", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if len(left) != 0 {
		t.Errorf("journal after Close holds %d leases, want 0", len(left))
	}
}

// A Redis that does not meet the durability policy refuses the start, and
// Open closes what it had opened on the way (its client, the journal, NATS).
func TestOpenRefusesAndClosesWhatItOpened(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, AppendFsync: "everysec"})
	n := startNATS(t)
	before := goleak.IgnoreCurrent()
	d, err := daemon.Open(ctx, daemon.Config{Holder: "h1",
		Links: daemon.Links{
			Redis: []string{srv.Socket}, CheckLedger: true,
			Ledger:   lease.Config{Durability: lease.Durability{Policy: lease.PolicyFsync}},
			StateDir: t.TempDir(), NATS: n.URL,
		}})
	if err == nil {
		d.Close(ctx)
		t.Fatal("Open accepted a Redis with appendfsync everysec under the fsync policy")
	}
	if !errors.Is(err, daemon.ErrRefused) || !errors.Is(err, lease.ErrNotDurable) {
		t.Errorf("Open: %v; want ErrRefused and lease.ErrNotDurable", err)
	}
	goleak.VerifyNone(t, before, ignoreRedial)

	if _, err := daemon.Open(ctx, daemon.Config{}); err == nil {
		t.Error("Open without Redis addresses or a client succeeded")
	}
}
