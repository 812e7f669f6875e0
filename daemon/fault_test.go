package daemon_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/history"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
)

// Redis is SIGKILLed and restarted from its AOF (appendfsync always) again and
// again while two daemons serve SPENDs and REFUNDs from load generators that
// count every answer themselves. The clients' net allowed never exceeds the
// budget, every :1 is charged in the ledger, and the ledger balances.
func TestFaultRedisKilledAndRestartedFromAOF(t *testing.T) {
	f := newFixture(t)
	const budget = 1_500_000
	w := make([]float64, 1440)
	w[0] = 1 // the whole budget released in the day's first minute
	burst, err := bucket.NewCurve("burst", w)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: "UTC", Curve: "burst", Shards: 4, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(2 * time.Minute))
	// The daemons' ledger client is the production one (lease.NewClient).
	rdb, err := lease.NewClient([]string{f.Redis.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	dl := lease.New(rdb, lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	var nodes []*daemon.Daemon
	for i := range 2 {
		d, err := daemon.New(dl, daemon.Config{Holder: "h" + strconv.Itoa(i), Clock: f.Clock,
			Curves: map[string]*bucket.Curve{"burst": burst}, LedgerTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close(ctx)
		nodes = append(nodes, d)
	}
	rc := reconcile.New(f.Ledger, reconcile.Config{Clock: f.Clock})

	var rec history.Recorder
	var denied atomic.Int64
	var ids sync.Mutex
	nextID := 0
	// generate sends a round of SPENDs (half with auction ids) and refunds
	// every tenth auction it was allowed, recording every answer.
	generate := func(i int, d *daemon.Daemon) {
		for k := range 40 {
			amount := int64(1000 * (1 + k%5))
			id := ""
			if k%2 == 0 {
				ids.Lock()
				nextID++
				id = "g" + strconv.Itoa(nextID)
				ids.Unlock()
			}
			now := f.Clock.Now()
			dec, err := d.Spend("c", pacer.Micros(amount), id)
			ok := err == nil && dec == pacer.Allowed
			if err == nil && dec != pacer.Allowed {
				denied.Add(1)
			}
			ans := dec.String()
			if err != nil {
				ans = "error: " + err.Error()
			}
			rec.Record(history.Call{At: now, Client: "h" + strconv.Itoa(i), Campaign: "c", Day: bucket.DayOf(now, time.UTC).Key,
				Auction: id, Amount: amount, OK: ok, Answer: ans})
			if ok && id != "" && k%10 == 0 {
				err := d.Refund("c", pacer.Micros(amount), id)
				rec.Record(history.Call{At: now, Client: "h" + strconv.Itoa(i), Campaign: "c", Day: bucket.DayOf(now, time.UTC).Key,
					Auction: id, Amount: amount, Refund: true, OK: err == nil, Answer: errString(err)})
			}
		}
	}

	kills, down := 0, false
	start := time.Now()
	for round := range 150 {
		f.Clock.Add(time.Second)
		// Steps and load run at once, as in a real daemon; Redis dies or
		// comes back between rounds, with leases and refills in flight.
		var wg sync.WaitGroup
		for i, d := range nodes {
			wg.Go(func() { d.Step(ctx) })
			wg.Go(func() { generate(i, d) })
		}
		if round%5 == 0 && !down {
			wg.Go(func() { rc.Pass(ctx, 1) })
		}
		wg.Wait()
		switch {
		case !down && round%12 == 3:
			f.Redis.Kill()
			down, kills = true, kills+1
			rec.Notef(f.Clock.Now(), "", "redis-server SIGKILLed")
		case down && round%12 == 3+1+round/12%3:
			f.Redis.Restart()
			down = false
			rec.Notef(f.Clock.Now(), "", "redis-server restarted from its AOF")
		}
	}
	if down {
		f.Redis.Restart()
	}
	quiesce(t, f, rc, nodes...)
	rep, tally := checkDayC(t, f, &rec, "redis kill/restart", budget, true)
	sh := f.Check(t, "c")
	t.Logf("%d kills in %v; %d calls, %d denied; clients netted %d of %d (allowed %d, refunded %d); ledger %+v",
		kills, time.Since(start).Round(time.Millisecond), rep.Calls, denied.Load(), tally.Net(), budget, tally.Allowed, tally.Refunded, sh)
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if kills < 8 {
		t.Fatalf("only %d kills", kills)
	}
	// Demand must have outrun the budget under faults, or the test proves
	// nothing.
	if tally.Net() < budget/2 || denied.Load() == 0 {
		t.Fatalf("clients netted %d of %d with %d denials: the load did not press on the budget", tally.Net(), budget, denied.Load())
	}
}

// quiesce ends a fault test's load: the daemons step for a minute and
// close, releasing what they hold, and the reconciler settles the rest once
// their leases are past expiry and grace.
func quiesce(t *testing.T, f *fixture, rc *reconcile.Reconciler, nodes ...*daemon.Daemon) {
	t.Helper()
	for range 3 {
		f.Clock.Add(20 * time.Second)
		for _, d := range nodes {
			d.Step(ctx)
		}
	}
	for _, d := range nodes {
		if err := d.Close(ctx); err != nil {
			t.Logf("close: %v", err)
		}
	}
	f.Clock.Add(45 * time.Second)
	if err := rc.Pass(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

func errString(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "+OK"
}

// checkDayC checks the recorded history of campaign c's day against the
// ledger (internal/history): at most limit netted by the clients and, when
// exact, every :1 charged once. It returns the report and the day's tally.
func checkDayC(t *testing.T, f *fixture, rec *history.Recorder, label string, limit int64, exact bool) (history.Report, history.Tally) {
	t.Helper()
	key := history.DayKey{Campaign: "c", Day: day}
	rep, err := history.Check(ctx, rec, history.Options{
		Label:  label,
		Plans:  map[history.DayKey]history.DayPlan{key: {Limit: limit, Exact: exact}},
		Ledger: f.Ledger,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep, rep.Days[key]
}
