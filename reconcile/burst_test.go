package reconcile_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/redis/go-redis/v9"
)

// 10,000 campaigns created in one burst while a reconciler leads: every
// pass stays bounded in work (each takes at most 10 batches of the change
// stream and 512 campaigns' days, after the due and low indexes), so the
// one right after the burst still settles a dead daemon's lease, and so do
// later ones, while each opens 512 new campaigns' days. Before,
// the leader re-sorted every known id for each new one under its lock and
// then opened every new day in one pass: ~38 s without a command to Redis
// at 9,000 additions. The bound is counted in Redis commands, not time.
func TestReconcilerBurstOfNewCampaigns(t *testing.T) {
	const (
		before = 100
		burst  = 10_000
		// A pass's most: 10 change batches (2 stream reads and 1,000
		// campaign reads each), 512 campaigns' days (a new campaign's
		// open and yesterday's check: 18 commands measured), the indexes
		// and the sweep's slice.
		mostPerPass = 10*1002 + 512*20 + 400
	)
	f, counter, ledger := scaleFixture(t, before)
	f.Clock.Set(midnight.Add(12 * time.Hour))
	rc := reconcile.New(ledger, reconcile.Config{Clock: f.Clock, Grace: 4 * time.Second, SweepPeriod: time.Hour})
	for range 2 { // the term's full pass, then a step
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	dead := func(id string) lease.ShardKey {
		t.Helper()
		now := f.Clock.Now()
		k := lease.ShardKey{Campaign: "c1", Day: day, Shard: 3}
		g, err := f.Ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h", Want: 1_000_000,
			Expiry: now.Add(10 * time.Second), Now: now, Pace: lease.Pace{Now: 500_000_000, Cap: 510_000_000},
			Grace: 4 * time.Second, DayStart: midnight})
		if err != nil || g.Granted == 0 {
			t.Fatalf("grant: %+v, %v", g, err)
		}
		return k
	}
	k := dead("dead-1")
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < burst; i += 16 {
				if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "n" + strconv.Itoa(i), DailyMicros: 86_400_000_000,
					TZ: "UTC", Curve: "flat", Shards: 8, State: lease.StateActive}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	f.Clock.Add(15 * time.Second) // the lease expired, and its grace passed
	opened := 0
	for pass := range 3 {
		if pass == 2 {
			k = dead("dead-2")
			f.Clock.Add(15 * time.Second)
		}
		counter.Reset()
		start := time.Now()
		if err := rc.Step(ctx, 1); err != nil {
			t.Fatal(err)
		}
		n := counter.N()
		t.Logf("pass %d: %d Redis commands, %v", pass, n, time.Since(start).Round(time.Millisecond))
		if n > mostPerPass {
			t.Errorf("pass %d: %d Redis commands, want at most %d", pass, n, mostPerPass)
		}
		if pass != 1 {
			if sh, err := f.Ledger.ReadShard(ctx, k); err != nil || sh.Leased != 0 {
				t.Fatalf("pass %d: the dead daemon's lease is not settled: %+v, %v", pass, sh, err)
			}
		}
		now := openDays(t, f, burst)
		if now-opened < 512 && now < burst {
			t.Errorf("pass %d opened %d new campaigns' days, want 512", pass, now-opened)
		}
		opened = now
	}
	if got := gaugeValue(t, collector(t, rc, "pacer_reconciler_campaigns")); got != before+burst {
		t.Errorf("the reconciler knows %v campaigns, want %d", got, before+burst)
	}
}

// openDays counts the burst's campaigns whose day is open, in one pipeline.
func openDays(t *testing.T, f *fixture, n int) int {
	t.Helper()
	p := f.Redis.Client().Pipeline()
	cmds := make([]*redis.StringCmd, n)
	for i := range n {
		cmds[i] = p.HGet(ctx, "pacer:days:{n"+strconv.Itoa(i)+"}", day)
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	open := 0
	for _, c := range cmds {
		if c.Val() == "8" {
			open++
		}
	}
	return open
}
