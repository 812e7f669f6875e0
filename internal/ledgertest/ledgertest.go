// Package ledgertest is the tests' shared ledger fixture: a real
// redis-server started for the test, a ledger over it whose test days (fixed
// dates in the past) keep their keys, and the one settable clock
// (clocktest), standing at the fixture's start. The daemon and reconciler
// tests build on it; what only one package needs stays in its own tests.
package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// Retention is the fixture ledger's key retention: a century, so that a test
// day in the past does not expire at once.
const Retention = 100 * 365 * 24 * time.Hour

// Fixture is a real redis-server, a ledger over it and a manual clock.
type Fixture struct {
	Redis  *redistest.Server
	Ledger *lease.Ledger
	Clock  *clocktest.Manual
	Day    string // the start's date: the day Check checks
}

// New starts a redis-server for t (stopped at its end) and returns the
// fixture, its clock at start.
func New(t testing.TB, start time.Time) *Fixture {
	t.Helper()
	srv := redistest.Start(t)
	ledger := lease.New(srv.Client(), lease.Config{Retention: Retention}, nil)
	return &Fixture{Redis: srv, Ledger: ledger, Clock: clocktest.At(start), Day: start.Format(time.DateOnly)}
}

// Campaign stores an active campaign of daily micros over shards shards, on
// the flat curve in UTC.
func (f *Fixture) Campaign(t testing.TB, id string, daily int64, shards int) {
	t.Helper()
	c := lease.Campaign{ID: id, DailyMicros: daily, TZ: "UTC", Curve: "flat", Shards: shards, State: lease.StateActive}
	if _, err := f.Ledger.PutCampaign(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// Check is CheckDay of the fixture's day.
func (f *Fixture) Check(t testing.TB, id string) lease.Shard {
	t.Helper()
	return f.CheckDay(t, id, f.Day)
}

// CheckDay checks the campaign-day's conservation, each problem a test
// error, and returns its shards' sum.
func (f *Fixture) CheckDay(t testing.TB, id, day string) lease.Shard {
	t.Helper()
	total, problems, err := f.Ledger.CheckDay(context.Background(), id, day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("conservation: %s", p)
	}
	return total
}
