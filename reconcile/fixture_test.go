package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/ledgertest"
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

// fixture is the shared ledger fixture (ledgertest), at midnight of day.
type fixture struct{ *ledgertest.Fixture }

func newFixture(t testing.TB) *fixture { return &fixture{ledgertest.New(t, midnight)} }

// daemon is a daemon spending from the ledger, for the leases a reconciler
// settles and the spend it reports.
func (f *fixture) daemon(t *testing.T, holder string) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: holder, Clock: f.Clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	return d
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
