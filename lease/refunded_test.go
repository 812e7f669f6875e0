package lease_test

import (
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A release or renewal that reports refunds writes them in its release
// entry, once (a retry writes nothing again), and moves no money: the
// shard and the day's report end as a twin's without refunds does.
func TestRefundedIsRecordedInTheReleaseEntry(t *testing.T) {
	l, srv := newLedger(t)
	rdb := srv.Client()
	const day = "2026-11-21"
	now := t0.Add(12 * time.Hour)
	run := func(id string, refunded int64) lease.ShardKey {
		t.Helper()
		mustOpen(t, l, campaign(id, 24_000_000, 1), day)
		k := shardKey(id, day, 0)
		for _, lid := range []string{"A", "B"} {
			if _, err := l.Grant(ctx, grantReq(lid, k, 100_000, now, ppb/2)); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 { // the second is a retry: nothing again
			if _, err := l.ReleaseRefunded(ctx, k, "A", 40_000, refunded, now, lease.History{}); err != nil {
				t.Fatal(err)
			}
		}
		r := grantReq("C", k, 100_000, now, ppb/2)
		r.Refunded = 2 * refunded
		if _, err := l.Renew(ctx, "B", 30_000, r); err != nil {
			t.Fatal(err)
		}
		return k
	}
	with, without := run("refunds", 7_000), run("none", 0)

	var got []string
	for _, m := range rdb.XRange(ctx, with.AuditKey(), "-", "+").Val() {
		if m.Values["ev"] == "release" {
			got = append(got, m.Values["lease"].(string)+":"+m.Values["refunded"].(string))
		}
	}
	if len(got) != 2 || got[0] != "A:7000" || got[1] != "B:14000" {
		t.Fatalf("release entries' refunded: %q; want [A:7000 B:14000], each once", got)
	}
	for _, m := range rdb.XRange(ctx, without.AuditKey(), "-", "+").Val() {
		if _, ok := m.Values["refunded"]; ok {
			t.Fatalf("entry %s has a refunded field without refunds: %v", m.ID, m.Values)
		}
	}
	a, b := mustBalance(t, l, "refunds", day), mustBalance(t, l, "none", day)
	if noSeq(a) != noSeq(b) {
		t.Fatalf("refunds moved money: shard %+v, without them %+v", a, b)
	}
	ra, err := l.BuildReport(ctx, "refunds", day)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := l.BuildReport(ctx, "none", day)
	if err != nil {
		t.Fatal(err)
	}
	ra.Campaign, rb.Campaign = "", ""
	if ra != rb {
		t.Fatalf("refunds changed the report: %+v, without them %+v", ra, rb)
	}

	if _, err := l.ReleaseRefunded(ctx, with, "C", 0, -1, now, lease.History{}); err == nil {
		t.Fatal("a negative refunded was accepted")
	}
	r := grantReq("D", with, 100_000, now, ppb/2)
	r.Refunded = lease.MaxBudgetMicros + 1
	if _, err := l.Renew(ctx, "C", 0, r); err == nil {
		t.Fatal("a refunded over MaxBudgetMicros was accepted")
	}
}
