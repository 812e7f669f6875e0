package daemon

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/internal/faultproxy"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

// A release whose every answer is lost until past its settlement (pacerd
// logs it) carries the bidders' refunds it took: they are recorded once in
// the shard's audit stream whatever became of it. Applied on its first try
// (the answer dropped, then Redis cut off), they are in its release entry and
// no later release reports them again; never applied (cut off before it) and
// settled by the reconciler, they go to the day's next release. Real
// redis-server behind a fault proxy; the clock is moved.
func TestUnansweredReleaseRecordsItsRefundsOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		applied bool
	}{{"applied, every answer lost", true}, {"never applied, then settled", false}} {
		t.Run(tc.name, func(t *testing.T) { unansweredRelease(t, tc.applied) })
	}
}

func unansweredRelease(t *testing.T, applied bool) {
	ctx := context.Background()
	srv, proxy, ledger, direct := proxiedLedger(t)
	const day = "2026-11-21"
	d, clock := spendingDaemon(t, ledger, LeaseTiming{SparseWait: time.Second})
	// The refunds the release takes: three SPENDs of 1,000 refunded.
	var refunded int64
	for range 3 {
		if err := d.Refund("c", 1000, ""); err != nil {
			t.Fatal(err)
		}
		refunded += 1000
	}
	c := campaignC(t, d)
	r := releaseOneLease(t, c, clock.Now())
	if r.refunded != refunded {
		t.Fatalf("the release carries %d micros of refunds, want %d", r.refunded, refunded)
	}
	c.loopMu.Lock()
	if applied {
		// It runs; its answer is lost, and so are the ledger's own retries'.
		for range 50 {
			proxy.ResetAfter(faultproxy.Scripts)
		}
	} else {
		proxy.Partition()
	}
	c.pending = append(c.pending, r)
	c.retryReleases(ctx, clock.Now())
	c.loopMu.Unlock()
	if applied {
		proxy.Partition()
		if left := proxy.Disarm(); proxy.Fired() == 0 || len(c.pending) != 1 {
			t.Fatalf("%d resets fired (%d left), %d releases pending: want the release tried and unanswered", proxy.Fired(), left, len(c.pending))
		}
	}
	// Past its settlement, still cut off: the daemon's retries fail.
	clock.Set(r.until.Add(time.Second))
	c.loopMu.Lock()
	c.retryReleases(ctx, clock.Now())
	c.loopMu.Unlock()
	proxy.Heal()
	if !applied {
		if _, err := direct.Settle(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: 0}, clock.Now(), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ledger.Ping(ctx) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ledger's client does not reach Redis after the cut healed")
		}
	}
	// The day goes on: more leases, renewals and releases, then shutdown.
	for range 40 {
		clock.Add(time.Second)
		d.Step(ctx)
		spendAll(t, d, 10)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := refundedInStream(t, srv.Client(), lease.ShardKey{Campaign: "c", Day: day, Shard: 0}); got != refunded {
		t.Fatalf("the audit stream's release entries record %d micros of refunds; the bidder refunded %d", got, refunded)
	}
}

// proxiedLedger starts a redis-server holding campaign c (one shard, flat,
// 8,640,000,000 micros a day) and returns it, a fault proxy in front of
// it, the daemon's ledger through the proxy (as pacerd's client: no
// go-redis retries, lease.Dial) and a ledger straight to the server.
func proxiedLedger(t *testing.T) (*redistest.Server, *faultproxy.Proxy, *lease.Ledger, *lease.Ledger) {
	t.Helper()
	srv := redistest.Start(t)
	proxy, err := faultproxy.Start(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: proxy.Socket, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	cfg := lease.Config{Retention: 100 * 365 * 24 * time.Hour}
	direct := lease.New(srv.Client(), cfg, nil)
	if _, err := direct.PutCampaign(context.Background(), lease.Campaign{ID: "c", DailyMicros: 8_640_000_000, TZ: "UTC", Curve: "flat", Shards: 1, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	return srv, proxy, lease.New(rdb, cfg, nil), direct
}

// spendingDaemon is a daemon "h" on ledger (closed at cleanup), its clock
// at 12:00 on 2026-11-21, after five seconds' steps each followed by ten
// SPENDs of 1,000 micros on campaign c.
func spendingDaemon(t *testing.T, ledger *lease.Ledger, timing LeaseTiming) (*Daemon, *clocktest.Manual) {
	t.Helper()
	clock := clocktest.At(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	d, err := New(ledger, Config{Holder: "h", Clock: clock, LedgerTimeout: 5 * time.Second, LeaseTiming: timing})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	for range 5 {
		clock.Add(time.Second)
		d.Step(context.Background())
		spendAll(t, d, 10)
	}
	return d, clock
}

// campaignC is d's campaign c, which spendingDaemon loaded.
func campaignC(t *testing.T, d *Daemon) *campaign {
	t.Helper()
	c, ok := d.campaigns.get("c")
	if !ok {
		t.Fatal("campaign c not loaded")
	}
	return c
}

// spendAll makes n SPENDs of 1,000 micros and fails unless one was allowed.
func spendAll(t *testing.T, d *Daemon, n int) {
	t.Helper()
	var ok bool
	for range n {
		dec, err := d.Spend("c", 1000, "")
		if err != nil {
			t.Fatal(err)
		}
		ok = ok || dec == 1
	}
	if !ok {
		t.Fatal("no SPEND allowed")
	}
}

// releaseOneLease closes one of c's leases as the refill loop does when a
// lease ends, and returns its release, with the refunds it carries.
func releaseOneLease(t *testing.T, c *campaign, now time.Time) release {
	t.Helper()
	c.loopMu.Lock()
	defer c.loopMu.Unlock()
	ds := c.day.Load()
	if ds == nil {
		t.Fatal("no day held")
	}
	for id, h := range ds.leases {
		cl, ok := ds.b.CloseFeed(now, id)
		if !ok {
			continue
		}
		delete(ds.leases, id)
		key := lease.ShardKey{Campaign: c.id, Day: ds.day.Key, Shard: h.shard}
		r := release{key: key, id: cl.ID, amount: cl.Amount, unused: cl.Unused, expiry: h.expiry, until: h.expiry.Add(c.cfg.Grace + time.Minute)}
		r.refunded = c.takeRefunds(now, key.Day)
		return r
	}
	t.Fatal("no lease to release")
	return release{}
}

// refundedInStream sums the refunded fields of a shard's audit entries.
func refundedInStream(t *testing.T, rdb *redis.Client, k lease.ShardKey) int64 {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), k.AuditKey(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, m := range msgs {
		if s, ok := m.Values["refunded"].(string); ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("entry %s: refunded %q", m.ID, s)
			}
			sum += n
		}
	}
	return sum
}
