package reconcile_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// collector returns the reconciler's metric named name.
func collector(t *testing.T, rc *reconcile.Reconciler, name string) prometheus.Collector {
	t.Helper()
	for _, c := range rc.Collectors() {
		ch := make(chan *prometheus.Desc, 8)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			if strings.Contains(d.String(), `"`+name+`"`) {
				return c
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func gaugeValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return metricOf(t, c).GetGauge().GetValue()
}

func counterValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return metricOf(t, c).GetCounter().GetValue()
}

// metricOf is the one metric c collects.
func metricOf(t *testing.T, c prometheus.Collector) *dto.Metric {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// Between sweeps a reconciler pass costs Redis commands for the work there
// is, not for the campaigns: an idle pass over 300 campaigns (today and
// yesterday open) costs a handful; a crashed daemon's lease is settled, a
// drained shard refilled and a new day opened and the old one closed,
// each found through the ledger's indexes; a campaign that fails is counted
// and does not stop the others.
func TestReconcilerStepWorksFromIndexes(t *testing.T) {
	const n = 300
	f, counter, ledger := scaleFixture(t, n)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	rc := reconcile.New(ledger, reconcile.Config{Clock: f.Clock, Grace: 4 * time.Second, SweepPeriod: 24 * time.Hour})
	if err := rc.Step(ctx, 1); err != nil { // the term's first pass: a full one
		t.Fatal(err)
	}
	if err := rc.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	step := func(what string, most int64) {
		t.Helper()
		counter.Reset()
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %d commands", what, counter.N())
		// The sweep's slice (one campaign a pass here) is at most 35
		// commands: its survey (27 reads in two round trips) and, the
		// first time this leader looks at a shard, its fence (8 scripts,
		// one pipeline).
		if got := counter.N(); got > most+35 {
			t.Errorf("%s: %d Redis commands over %d campaigns, want at most %d", what, got, n, most+35)
		}
	}
	step("an idle pass", 4)

	// A daemon takes a lease on c123 and dies.
	now := f.Clock.Now()
	k := lease.ShardKey{Campaign: "c123", Day: day, Shard: 3}
	g, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "dead", Holder: "h", Want: 1_000_000,
		Expiry: now.Add(10 * time.Second), Now: now, Pace: lease.Pace{Now: 500_000_000, Cap: 510_000_000},
		Grace: 4 * time.Second, DayStart: midnight})
	if err != nil || g.Granted == 0 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	f.Clock.Add(13 * time.Second) // expired, not yet past the grace
	step("a lease within its grace", 4)
	if sh, _ := f.Ledger.ReadShard(ctx, k); sh.Leased == 0 {
		t.Fatal("settled a lease within its grace")
	}
	f.Clock.Add(2 * time.Second)
	step("a lease to settle", 8)
	if sh, _ := f.Ledger.ReadShard(ctx, k); sh.Leased != 0 || sh.Lost != g.Granted {
		t.Fatalf("the dead daemon's lease is not settled: %+v", sh)
	}
	step("an idle pass after a settle", 4)

	// A late lease drains shard 2 of c7.
	end := midnight.Add(24*time.Hour - time.Minute)
	k = lease.ShardKey{Campaign: "c7", Day: day, Shard: 2}
	g, err = f.Ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "big", Holder: "h", Want: 86_400_000_000,
		Expiry: end.Add(30 * time.Second), Now: end, Pace: lease.Pace{Now: 1_000_000_000, Cap: 1_000_000_000},
		Grace: 5 * time.Second, DayStart: midnight})
	if err != nil || g.Shard.Remaining() != 0 {
		t.Fatalf("drain shard 2: %+v, %v", g, err)
	}
	step("a shard to refill", 20)
	if sh, _ := f.Ledger.ReadShard(ctx, k); sh.Remaining() == 0 {
		t.Fatal("the reconciler left c7's shard 2 empty while the others hold budget")
	}
	step("an idle pass after a move", 4)

	// A campaign whose day marker is broken fails alone.
	if err := f.Redis.Client().HSet(ctx, "pacer:days:{c9}", "2026-11-22", "x").Err(); err != nil {
		t.Fatal(err)
	}
	// Midnight: every campaign's day to open, and the old one to close once
	// its leases are settled.
	f.Clock.Set(midnight.Add(24*time.Hour + time.Second))
	errs := counterValue(t, collector(t, rc, "pacer_reconciler_errors_total"))
	if err := rc.Step(ctx, 1); err == nil {
		t.Fatal("c9's broken day marker went unreported")
	}
	if got := counterValue(t, collector(t, rc, "pacer_reconciler_errors_total")) - errs; got != 1 {
		t.Fatalf("%v failures counted, want 1 (c9)", got)
	}
	for i := range n {
		id := "c" + strconv.Itoa(i)
		if got, err := f.Ledger.DayShards(ctx, id, "2026-11-22"); i != 9 && (err != nil || got != 8) {
			t.Fatalf("%s: the new day has %d shards, %v", id, got, err)
		}
	}
	if err := f.Redis.Client().HDel(ctx, "pacer:days:{c9}", "2026-11-22").Err(); err != nil {
		t.Fatal(err)
	}
	f.Clock.Add(time.Minute) // c7's big lease expires, plus the grace
	for range 3 {
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		id := "c" + strconv.Itoa(i)
		if ok, err := f.Ledger.HasReport(ctx, id, day); err != nil || !ok {
			t.Fatalf("%s: %s not reported after midnight: %v", id, day, err)
		}
	}
	f.CheckDay(t, "c7", day)
	step("an idle pass on the new day", 4)
}

// losingElector wins once, with a term that ends when lose is closed, and
// then never again.
type losingElector struct {
	lose chan struct{}
	won  bool
}

func (e *losingElector) Campaign(ctx context.Context) (reconcile.Leadership, error) {
	if !e.won {
		e.won = true
		return reconcile.Leadership{Fence: 1, Lost: e.lose, Cause: func() error { return errors.New("session expired") }}, nil
	}
	<-ctx.Done()
	return reconcile.Leadership{}, ctx.Err()
}

func (*losingElector) Resign(context.Context) error { return nil }

// A term lost with its election session is counted
// (pacer_reconciler_terms_lost_total), and the reconciler stops leading.
func TestLostTermIsCounted(t *testing.T) {
	f := newFixture(t)
	ended := make(chan struct{})
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock, OnLeadership: func(leading bool) {
		if !leading {
			close(ended)
		}
	}})
	el := &losingElector{lose: make(chan struct{})}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rc.Run(rctx, el) }()
	close(el.lose)
	<-ended
	if got := counterValue(t, collector(t, rc, "pacer_reconciler_terms_lost_total")); got != 1 {
		t.Errorf("terms lost: %v, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
