package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A lease the ledger forgot (as if its grant had never landed, its budget
// back in available; the shard's history unchanged, as when a rollback
// escapes the history check) is renewed: the renewal's release half finds
// no such lease. The daemon re-asserts it and releases it, as a release
// that finds it unknown does, so that the part its clients spent stays
// counted: after Close, the ledger counts spent at least what the clients
// were allowed, and the day balances.
func TestRenewalOfAForgottenLeaseReassertsIt(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000_000, 1) // 1,000,000 micros a second
	f.Clock.Set(midnight.Add(12 * time.Hour))
	core, logs := observer.New(zap.ErrorLevel)
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: "h", Clock: f.Clock, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	var allowed int64
	var forgotten lease.LeaseRecord
	for tick := 0; tick < 1200 && (forgotten.ID == "" || tick%100 != 0); tick++ {
		now := f.Clock.Add(100 * time.Millisecond)
		if forgotten.ID == "" && allowed > 0 {
			// A lease whose spendable end comes before the next tick is
			// renewed in this one (refill.go): the ledger forgets it first.
			if lr, ok := endingLease(t, f, k, now.Add(100*time.Millisecond)); ok {
				forget(t, f, k, lr)
				forgotten = lr
			}
		}
		d.Step(ctx)
		n, _ := spendUntilDenied(t, d, "c", 1_000)
		allowed += n
	}
	if forgotten.ID == "" {
		t.Fatal("no lease came to its end: nothing was forgotten")
	}
	renewed := false
	for _, e := range logs.All() {
		if strings.HasPrefix(e.ContextMap()["detail"].(string), "renewal of "+forgotten.ID+":") {
			renewed = true
		}
	}
	if !renewed {
		t.Fatalf("lease %s was not renewed (no lost-writes report from its renewal): the test proves nothing", forgotten.ID)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tot, problems, err := f.Ledger.CheckDay(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if p.Shard != k || !strings.Contains(p.What, "lost acknowledged writes") {
			t.Errorf("conservation: %s", p) // the shard's lost-writes flag is expected
		}
	}
	if allowed > tot.Spent+tot.Leased {
		t.Errorf("clients were allowed %d micros; the ledger counts %d spent + %d leased: %d of the forgotten lease's %d are not counted",
			allowed, tot.Spent, tot.Leased, allowed-tot.Spent-tot.Leased, forgotten.Amount)
	}
	t.Logf("forgot %s (%d micros); clients allowed %d, ledger %d spent + %d leased", forgotten.ID, forgotten.Amount, allowed, tot.Spent, tot.Leased)
}

// endingLease returns the shard's lease whose spendable end (expiry less the
// default skew bound) comes before horizon, if there is one.
func endingLease(t *testing.T, f *fixture, k lease.ShardKey, horizon time.Time) (lease.LeaseRecord, bool) {
	t.Helper()
	held, err := f.Ledger.Leases(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, lr := range held {
		if lr.Expiry.Add(-time.Second).Before(horizon) {
			return lr, true
		}
	}
	return lease.LeaseRecord{}, false
}

// forget removes a lease from the shard as if its grant had never landed:
// its amount back in available, the shard's history (seq, tip) unchanged.
func forget(t *testing.T, f *fixture, k lease.ShardKey, lr lease.LeaseRecord) {
	t.Helper()
	keys := k.RedisKeys() // state, leases, exp, ...
	rdb := f.Redis.Client()
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, keys[1], lr.ID)
		p.ZRem(ctx, keys[2], lr.ID)
		p.HIncrBy(ctx, keys[0], "leased", -lr.Amount)
		p.HIncrBy(ctx, keys[0], "available", lr.Amount)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
