package daemon_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
)

// A state_dir belongs to one pacerd: a second daemon opened on it while the
// first runs refuses to start, naming the directory and the holder's pid,
// and leaves the first's journal and leases alone (reading them, it would
// have released the undripped part of leases the first is still spending).
// Once the first is closed, a new daemon opens on the directory.
func TestStateDirBelongsToOneDaemon(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000, 1)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	dir := t.TempDir()
	open := func(holder string) (*daemon.Daemon, error) {
		return daemon.Open(ctx, daemon.Config{Holder: holder, Clock: f.Clock,
			Links: daemon.Links{Redis: []string{f.Redis.Socket}, StateDir: dir, ManualStep: true}})
	}
	first, err := open("h")
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := first.Spend("c", 100, ""); err != nil || dec != pacer.Allowed {
		t.Fatalf("first SPEND = %v, %v; want allowed", dec, err)
	}
	held := f.Check(t, "c").Leased
	if held == 0 {
		t.Fatal("the first daemon holds no lease: the refusal below would protect nothing")
	}

	second, err := open("h")
	if err == nil {
		now := f.Check(t, "c").Leased
		second.Close(ctx)
		t.Fatalf("a second daemon opened on %s while the first runs (the first's leases: %d micros leased before, %d after)", dir, held, now)
	}
	if !errors.Is(err, daemon.ErrStateDirInUse) {
		t.Errorf("second Open: %v; want daemon.ErrStateDirInUse", err)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("second Open: %q; want it to name %s and the holder's pid %d", msg, dir, os.Getpid())
	}
	if now := f.Check(t, "c").Leased; now != held {
		t.Errorf("the refused daemon changed the first's leases: %d leased, was %d", now, held)
	}

	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := open("h")
	if err != nil {
		t.Fatalf("Open after the first daemon closed: %v", err)
	}
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if tot := f.Check(t, "c"); tot.Leased != 0 {
		t.Errorf("leases outstanding after both daemons closed: %+v", tot)
	}
}
