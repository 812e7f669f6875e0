package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis re-dials a refused pool in the background, sleeping a second
	// between tries: a test that restarts Redis can end inside that sleep.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

var (
	ctx      = context.Background()
	midnight = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
)

const day = "2026-11-21"

// fixture is a real redis-server, a ledger over it and a test clock.
type fixture struct {
	redis  *redistest.Server
	ledger *lease.Ledger
	clock  *clocktest.Manual
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	srv := redistest.Start(t)
	// Test days are fixed dates in the past: keep their keys from expiring at once.
	ledger := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	return &fixture{redis: srv, ledger: ledger, clock: clocktest.At(midnight)}
}

func (f *fixture) campaign(t testing.TB, id string, daily int64, shards int) {
	t.Helper()
	_, err := f.ledger.PutCampaign(ctx, lease.Campaign{ID: id, DailyMicros: daily, TZ: "UTC", Curve: "flat", Shards: shards, State: lease.StateActive})
	if err != nil {
		t.Fatal(err)
	}
}

// daemon is a daemon spending from the ledger, for the leases a reconciler
// settles and the spend it reports.
func (f *fixture) daemon(t *testing.T, holder string) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(f.ledger, daemon.Config{Holder: holder, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	return d
}

func (f *fixture) check(t *testing.T, id string) lease.Shard {
	t.Helper()
	return f.checkDay(t, id, day)
}

func (f *fixture) checkDay(t *testing.T, id, day string) lease.Shard {
	t.Helper()
	total, problems, err := f.ledger.CheckDay(ctx, id, day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("conservation: %s", p)
	}
	return total
}

// spendAttempts asks n times to spend amount and returns what was allowed.
func spendAttempts(t *testing.T, d *daemon.Daemon, id string, amount int64, n int) int64 {
	t.Helper()
	var allowed int64
	for range n {
		dec, err := d.Spend(pacer.CampaignID(id), pacer.Micros(amount), "")
		if err != nil {
			t.Fatal(err)
		}
		if dec == pacer.Allowed {
			allowed += amount
		}
	}
	return allowed
}
