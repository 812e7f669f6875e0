package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// A day's report comes from counters on its shards, exact however far the
// audit streams were trimmed: with streams capped at a few entries, 300
// leases granted, released or settled report the same as the ledger's
// balances say, and while the streams are whole the counters equal the
// streams' replay.
func TestReportExactPastTheStreamCap(t *testing.T) {
	srv := redistest.Start(t)
	whole := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	capped := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour, AuditMaxLen: 10}, nil)
	const day = "2026-11-21"
	for _, tc := range []struct {
		id string
		l  *lease.Ledger
	}{{"whole", whole}, {"capped", capped}} {
		l := tc.l
		mustOpen(t, l, campaign(tc.id, 24_000_000, 2), day)
		now := t0.Add(12 * time.Hour)
		for i := range 300 {
			k := shardKey(tc.id, day, i%2)
			id := "L" + strconv.Itoa(i)
			g, err := l.Grant(ctx, grantReq(id, k, 10_000, now, ppb/2))
			if err != nil {
				t.Fatal(err)
			}
			switch i % 3 {
			case 0:
				_, err = l.Release(ctx, k, id, g.Granted/4, now)
			case 1:
				_, err = l.Release(ctx, k, id, 0, now)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		later := now.Add(time.Minute)
		for i := range 2 {
			if _, err := l.Settle(ctx, shardKey(tc.id, day, i), later, 5*time.Second, 0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.AdjustDay(ctx, tc.id, day, 20_000_000, later); err != nil {
			t.Fatal(err)
		}
		r, err := l.BuildReport(ctx, tc.id, day)
		if err != nil {
			t.Fatal(err)
		}
		tot := mustBalance(t, l, tc.id, day)
		if r.Budget != 20_000_000 || r.Spent != tot.Spent || r.Lost != tot.Lost || r.Lost != 100*10_000 ||
			r.Leases != 300 || r.Settled != 100 || r.Outstanding != tot.Leased || r.Returned != 100*2_500 {
			t.Fatalf("%s: report %+v, ledger %+v", tc.id, r, tot)
		}
		replay, err := l.ReplayReport(ctx, tc.id, day)
		if err != nil {
			t.Fatal(err)
		}
		if tc.l == whole && replay != r {
			t.Fatalf("counters %+v, the whole stream replays to %+v", r, replay)
		}
		if tc.l == capped && replay == r {
			t.Fatalf("the capped stream replays to the exact report %+v: the cap did not bite, the test proves nothing", r)
		}
	}
}
