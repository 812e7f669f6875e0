package daemon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// gate holds the first command sent after it is armed until it is opened or
// the command's context ends, and says when a command is held.
type gate struct {
	once sync.Once
	held chan struct{} // closed when a command is held
	open chan struct{} // closed to let it through
}

func newGate() *gate { return &gate{held: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) wait(ctx context.Context) error {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return nil
	}
	close(g.held)
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// gatedDaemon returns a fixture with campaign "c" and a daemon "h1" whose
// ledger commands pass through the returned gate.
func gatedDaemon(t *testing.T) (*fixture, *daemon.Daemon, *gate) {
	t.Helper()
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000_000, 2)
	g := newGate()
	c := f.Redis.Client()
	c.AddHook(g)
	ledger := lease.New(c, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	d, err := daemon.New(ledger, daemon.Config{Holder: "h1", Clock: f.Clock})
	if err != nil {
		t.Fatal(err)
	}
	return f, d, g
}

// A campaign's first-use load still reading the ledger when Close is called
// must not finish afterwards and take a lease nobody releases: Close cancels
// it and waits for it, and leaves no daemon goroutine running.
func TestCloseWaitsForLoadInFlight(t *testing.T) {
	f, d, g := gatedDaemon(t)
	before := goleak.IgnoreCurrent()

	spent := make(chan error, 1)
	go func() {
		_, err := d.Spend("c", 1_000, "")
		spent <- err
	}()
	<-g.held // the load is reading the campaign's settings
	if err := d.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(g.open) // a load Close did not stop goes on to take a lease
	if err := <-spent; err == nil {
		t.Error("a SPEND whose load Close cancelled was answered without error")
	}
	goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	noLeasesOf(t, f, "c", "h1")
}

// Warm still loading when Close is called has returned by the time Close
// does (pacerd runs it on a goroutine and may be stopped before it ends).
func TestCloseWaitsForWarm(t *testing.T) {
	f, d, g := gatedDaemon(t)
	warmed := make(chan struct{})
	go func() {
		d.Warm([]string{"c"})
		close(warmed)
	}()
	<-g.held
	if err := d.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-warmed:
	default:
		t.Error("Close returned while Warm was still loading")
	}
	close(g.open)
	<-warmed
	if ids := d.Campaigns(); len(ids) != 0 {
		t.Errorf("campaigns loaded after Close: %v", ids)
	}
	noLeasesOf(t, f, "c", "h1")
}

// noLeasesOf fails the test if holder holds a lease on campaign id today.
func noLeasesOf(t *testing.T, f *fixture, id, holder string) {
	t.Helper()
	held, err := f.Ledger.DayLeases(ctx, id, day)
	if err != nil {
		t.Fatal(err)
	}
	for _, lr := range held {
		if lr.Holder == holder {
			t.Errorf("lease %s of %d micros held by the closed daemon %s", lr.ID, lr.Amount, holder)
		}
	}
	f.Check(t, id)
}
