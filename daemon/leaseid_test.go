package daemon_test

import (
	"strings"
	"testing"
	"time"
)

// Two daemons with one holder name (duplicate hostnames, or a fleet
// embedded in one process) on one clock (a shared fake clock: they start
// in the same nanosecond) take leases whose ids differ, so the ledger
// grants each its own lease and counts every micro either was allowed.
func TestLeaseIDsAreUniqueForOneHolderOnOneClock(t *testing.T) {
	f := newFixture(t)
	f.Campaign(t, "c", 86_400_000_000, 1) // 1,000,000 micros a second
	f.Clock.Set(midnight.Add(12 * time.Hour))
	a, b := f.daemon(t, "h"), f.daemon(t, "h")
	var allowed int64
	for range 40 {
		f.Clock.Add(time.Second)
		a.Step(ctx)
		b.Step(ctx)
		na, _ := spendUntilDenied(t, a, "c", 10_000)
		nb, _ := spendUntilDenied(t, b, "c", 10_000)
		allowed += na + nb
	}
	held, err := f.Ledger.DayLeases(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, lr := range held {
		if !strings.HasPrefix(lr.ID, "h-") {
			t.Errorf("lease id %q: want holder-bootID-seq", lr.ID)
		}
		ids[lr.ID] = true
	}
	if n := a.Status().LeasesHeld + b.Status().LeasesHeld; len(ids) != n {
		t.Errorf("the daemons hold %d leases, the ledger %d distinct ones (%v): their lease ids collide", n, len(ids), held)
	}
	tot := f.Check(t, "c")
	if allowed > tot.Spent+tot.Leased {
		t.Errorf("clients were allowed %d micros; the ledger accounts for %d spent + %d leased", allowed, tot.Spent, tot.Leased)
	}
	t.Logf("allowed %d; ledger: %d spent + %d leased in %d leases", allowed, tot.Spent, tot.Leased, len(held))
}
