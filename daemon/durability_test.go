package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// exportedGauge returns the value of an unlabelled gauge the daemon exports, and
// whether it is exported.
func exportedGauge(t *testing.T, d *daemon.Daemon, name string) (float64, bool) {
	t.Helper()
	for _, mf := range gather(t, d) {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// shiftedClock is the wall clock moved by a fixed offset: a host whose
// clock is wrong, without touching the system clock.
type shiftedClock time.Duration

func (s shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(s)) }

func TestClockAheadRefusesLeases(t *testing.T) {
	srv := redistest.Start(t)
	ledger := lease.New(srv.Client(), lease.Config{}, nil)
	for _, tc := range []struct {
		shift   time.Duration
		refused bool
	}{
		{shift: 60 * time.Second, refused: true},
		{shift: -60 * time.Second, refused: true},
		{shift: 300 * time.Millisecond},
		{shift: 0},
	} {
		gate := daemon.NewLedgerGate(daemon.GateConfig{})
		d, err := daemon.New(ledger, daemon.Config{Holder: "h", Clock: shiftedClock(tc.shift), LeaseTiming: daemon.LeaseTiming{SkewBound: time.Second}, LedgerGate: gate.Err})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := exportedGauge(t, d, "pacer_ledger_clock_offset_seconds"); ok {
			t.Fatal("offset exported before any measurement")
		}
		if v, _ := exportedGauge(t, d, "pacer_ledger_refusing_leases"); v != 1 {
			t.Fatalf("a gate not yet checked must refuse leases; gauge = %v", v)
		}
		gate.Add("clock", d.CheckClock)
		err = gate.Check(ctx)
		if tc.refused {
			// The offset measured is the shift give or take the round
			// trip to Redis (1m0.001s or 59.999s under load), in
			// milliseconds: the message says it within 50 ms.
			var se *lease.ClockSkewError
			dir := "ahead of"
			if tc.shift < 0 {
				dir = "behind"
			}
			said := regexp.MustCompile(`no new leases: clock: this host's clock is (\S+) ` + dir + ` redis at `).FindStringSubmatch(fmt.Sprint(err))
			var told time.Duration
			if said != nil {
				told, _ = time.ParseDuration(said[1])
			}
			if !errors.As(err, &se) || (se.Offset-tc.shift).Abs() > 50*time.Millisecond || said == nil || (told-tc.shift.Abs()).Abs() > 50*time.Millisecond ||
				!strings.Contains(err.Error(), "beyond lease.skew_bound 1s") {
				t.Errorf("shift %v: gate says %v", tc.shift, err)
			}
			if !errors.Is(gate.Err(ctx), lease.ErrClockSkew) {
				t.Errorf("shift %v: Err = %v", tc.shift, gate.Err(ctx))
			}
		} else if err != nil || gate.Err(ctx) != nil {
			t.Errorf("shift %v: %v", tc.shift, err)
		}
		off, ok := exportedGauge(t, d, "pacer_ledger_clock_offset_seconds")
		if !ok || math.Abs(off-tc.shift.Seconds()) > 0.05 {
			t.Errorf("shift %v: pacer_ledger_clock_offset_seconds = %v (exported %v)", tc.shift, off, ok)
		}
		want := 0.0
		if tc.refused {
			want = 1
		}
		if v, _ := exportedGauge(t, d, "pacer_ledger_refusing_leases"); v != want {
			t.Errorf("shift %v: pacer_ledger_refusing_leases = %v, want %v", tc.shift, v, want)
		}
	}
}

func TestGateFollowsDurability(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, AppendFsync: "everysec"})
	rdb := srv.Client()
	gate := daemon.NewLedgerGate(daemon.GateConfig{Interval: time.Hour, ClosedInterval: 5 * time.Millisecond})
	gate.Add("durability", func(ctx context.Context) error {
		_, err := lease.CheckDurability(ctx, rdb, lease.Durability{}, nil)
		return err
	})
	if err := gate.Check(ctx); !errors.Is(err, lease.ErrNotDurable) || !strings.Contains(err.Error(), "durability: redis at") ||
		!strings.Contains(err.Error(), "appendfsync everysec") {
		t.Fatalf("gate with everysec: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gate.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	// Fixed by the operator: the closed gate re-checks and opens by itself.
	if err := rdb.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gate to open after CONFIG SET", func() bool { return gate.Err(ctx) == nil })

	// Redis goes away: the open gate closes at its next check, and stays
	// closed until a check passes again.
	srv.Kill()
	if err := gate.Check(ctx); err == nil || gate.Err(ctx) == nil {
		t.Fatal("gate open with Redis down")
	}
	// It comes back with its command line's appendfsync everysec (CONFIG SET
	// was not written to a config file): still closed, for that reason.
	if err := srv.Server.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gate to see everysec again", func() bool {
		err := gate.Err(ctx)
		return err != nil && strings.Contains(err.Error(), "appendfsync everysec")
	})
	if err := rdb.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gate to open after the restart", func() bool { return gate.Err(ctx) == nil })
}

// A Redis that restarts between two checks, with a configuration that no
// longer meets the policy, closes the gate as soon as a new connection
// reaches it, not at the next periodic check.
func TestGateRechecksOnNewConnection(t *testing.T) {
	srv := redistest.StartWith(t, redisproc.Options{Persistent: true, AppendFsync: "everysec"})
	rdb := srv.Client()
	if err := rdb.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	gate := daemon.NewLedgerGate(daemon.GateConfig{Interval: time.Hour, ClosedInterval: time.Hour})
	gate.Add("durability", func(ctx context.Context) error {
		_, err := lease.CheckDurability(ctx, rdb, lease.Durability{}, nil)
		return err
	})
	lease.OnDial(rdb, gate.Recheck)
	if err := gate.Check(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gate.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	// Restarted from its command line: appendfsync everysec again. No check
	// is due for an hour; the next call dials anew, and that rechecks.
	srv.Restart()
	_ = rdb.Ping(ctx).Err() // the pooled connection is dead; go-redis redials
	waitFor(t, "the gate to close after the restart", func() bool {
		err := gate.Err(ctx)
		return err != nil && strings.Contains(err.Error(), "appendfsync everysec")
	})
}

// gather returns the metrics d exports, through a registry of the test's own.
func gather(t *testing.T, d *daemon.Daemon) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
