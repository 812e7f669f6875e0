package sim

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/lease"
)

// A daemon's read of the watermark, made while the step's watermark check
// is still running beside it, returns the value that check advanced it to,
// not the one before; other commands go through while it waits. Without
// the gate the read returns the old value (here: none yet).
func TestWatermarkGateOrdersReadsAfterTheCheck(t *testing.T) {
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	daemons, err := newClient(srv.Socket, newCounter(nil, new(atomic.Bool), lease.KeyCampaign))
	if err != nil {
		t.Fatal(err)
	}
	defer daemons.Close()
	recon, err := lease.NewClientWith([]string{srv.Socket}, lease.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer recon.Close()
	gate := &watermarkGate{}
	daemons.AddHook(gate)
	daemonLedger, reconLedger := lease.New(daemons, ledgerConfig(), nil), lease.New(recon, ledgerConfig(), nil)
	masters, err := reconLedger.Masters(ctx)
	if err != nil || len(masters) != 1 {
		t.Fatalf("masters %v, %v", masters, err)
	}
	m := masters[0]

	gate.hold() // the step's check has started
	type read struct {
		w   lease.Watermark
		ok  bool
		err error
	}
	got := make(chan read, 1)
	go func() {
		w, ok, err := daemonLedger.ReadWatermark(ctx, m)
		got <- read{w, ok, err}
	}()
	for gate.waiting.Load() == 0 && len(got) == 0 {
		runtime.Gosched()
	}
	if len(got) > 0 {
		r := <-got
		t.Fatalf("the daemon's read returned %v (set %v, %v) while the step's check was running; want it to wait for the check", r.w, r.ok, r.err)
	}
	if err := daemons.Set(ctx, "other", "1", 0).Err(); err != nil {
		t.Fatalf("another command while a read waits: %v", err)
	}
	advanced, err := reconLedger.AdvanceWatermark(ctx, m, lease.Watermark{}, false, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	gate.release() // the check is done
	r := <-got
	if r.err != nil || !r.ok || r.w != advanced {
		t.Fatalf("the daemon read %v (set %v, %v); want the check's %v", r.w, r.ok, r.err, advanced)
	}
	// Released: later reads go at once.
	if w, ok, err := daemonLedger.ReadWatermark(ctx, m); err != nil || !ok || w != advanced {
		t.Fatalf("read after the release: %v (set %v, %v); want %v", w, ok, err, advanced)
	}
}
