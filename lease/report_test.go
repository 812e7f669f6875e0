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
// streams' replay. With the lease calls' counters packed
// (Config.PackedCounters) as without.
func TestReportExactPastTheStreamCap(t *testing.T) {
	for _, packed := range []bool{false, true} {
		t.Run("packed="+strconv.FormatBool(packed), func(t *testing.T) { reportExactPastTheStreamCap(t, packed) })
	}
}

func reportExactPastTheStreamCap(t *testing.T, packed bool) {
	srv := redistest.Start(t)
	whole := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour, PackedCounters: packed}, nil)
	capped := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour, AuditMaxLen: 10, PackedCounters: packed}, nil)
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

// The report counters a grant, renewal and release keep on the shard's state
// are exact int64 sums past 2^53, where a double loses odd micros: 11
// grants of 10^15 - 1 released unused add up to an odd 10,999,999,999,999,989.
// Packed (Config.PackedCounters), a count rp would hold at 2^53 or more is
// raised in its r_* field instead, and the report sums both.
func TestReportCountersExactPast2To53(t *testing.T) {
	t.Run("packed=false", func(t *testing.T) { reportCountersExactPast2To53(t, false) })
	t.Run("packed=true", func(t *testing.T) { reportCountersExactPast2To53(t, true) })
}

func reportCountersExactPast2To53(t *testing.T, packed bool) {
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour, PackedCounters: packed}, nil)
	const day, want = "2026-11-21", lease.MaxBudgetMicros - 1
	mustOpen(t, l, campaign("big", lease.MaxBudgetMicros, 1), day)
	k := lease.ShardKey{Campaign: "big", Day: day, Shard: 0}
	now := t0.Add(23 * time.Hour)
	for i := range 11 {
		id := "h1-" + strconv.Itoa(i)
		g, err := l.Grant(ctx, grantReq(id, k, want, now, ppb))
		if err != nil || g.Granted != want {
			t.Fatalf("grant %d: %+v, %v", i, g, err)
		}
		if _, err := l.Release(ctx, k, id, want, now); err != nil {
			t.Fatal(err)
		}
	}
	r, err := l.BuildReport(ctx, "big", day)
	if err != nil || r.Returned != 10_999_999_999_999_989 || r.Leases != 11 || r.Outstanding != 0 || r.Spent != 0 || r.Events != 23 {
		t.Errorf("report %+v (%v): want 10999999999999989 returned of 11 leases, none outstanding", r, err)
	}
	mustBalance(t, l, "big", day)
	st := k.RedisKeys()[0]
	if packed { // the 10th and 11th grants' amounts would take rp's granted past 2^53
		if v, _ := srv.Client().HGet(ctx, st, "r_granted").Result(); v != "1999999999999998" {
			t.Errorf("packed: r_granted = %s, want the last two grants' 1999999999999998", v)
		}
		return
	}
	for _, f := range []string{"r_granted", "r_returned", "r_closed"} {
		if v, _ := srv.Client().HGet(ctx, st, f).Result(); v != "10999999999999989" {
			t.Errorf("%s = %s, want 10999999999999989", f, v)
		}
	}
	if v, _ := srv.Client().HGet(ctx, st, "r_leases").Result(); v != "11" {
		t.Errorf("r_leases = %s, want 11", v)
	}
}

// A grant or renewal that settles its shard's expired leases raises the
// settlement's report counters, which its call reads only then (a lease
// call reads with the money just the counters its usual path raises): the
// counters equal the stream's replay and count each settlement once. With
// the lease calls' counters packed (Config.PackedCounters) as without.
func TestReportCountsSettlementsInLeaseCalls(t *testing.T) {
	t.Run("packed=false", func(t *testing.T) { reportCountsSettlementsInLeaseCalls(t, false) })
	t.Run("packed=true", func(t *testing.T) { reportCountsSettlementsInLeaseCalls(t, true) })
}

func reportCountsSettlementsInLeaseCalls(t *testing.T, packed bool) {
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour, PackedCounters: packed}, nil)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := shardKey("c", day, 0)
	now := t0.Add(12 * time.Hour)
	for _, id := range []string{"dead-1", "dead-2"} {
		if g, err := l.Grant(ctx, grantReq(id, k, 10_000, now, ppb/2)); err != nil || g.Granted != 10_000 {
			t.Fatalf("grant %s: %+v %v", id, g, err)
		}
	}
	now = now.Add(time.Minute) // past both expiries and the grace
	if g, err := l.Grant(ctx, grantReq("live-1", k, 10_000, now, ppb/2+ppb/1000)); err != nil || g.Granted != 10_000 || g.Shard.Lost != 20_000 {
		t.Fatalf("the grant settling two: %+v %v", g, err)
	}
	if g, err := l.Grant(ctx, grantReq("dead-3", k, 10_000, now, ppb/2+ppb/1000)); err != nil || g.Granted != 10_000 {
		t.Fatalf("grant dead-3: %+v %v", g, err)
	}
	now = now.Add(20 * time.Second) // live-1 renewed in time; dead-3 not yet expired
	if g, err := l.Renew(ctx, "live-1", 1_000, grantReq("live-2", k, 10_000, now, ppb/2+ppb/900)); err != nil || g.Granted != 10_000 {
		t.Fatalf("renew: %+v %v", g, err)
	}
	now = now.Add(time.Minute) // dead-3 and live-2 past expiry and grace
	if g, err := l.Grant(ctx, grantReq("live-3", k, 10_000, now, ppb/2+ppb/800)); err != nil || g.Granted != 10_000 || g.Shard.Lost != 40_000 {
		t.Fatalf("the grant settling two more: %+v %v", g, err)
	}
	if _, err := l.Release(ctx, k, "live-3", 2_500, now); err != nil {
		t.Fatal(err)
	}
	r, err := l.BuildReport(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	replay, err := l.ReplayReport(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	tot := mustBalance(t, l, "c", day)
	if r != replay || r.Settled != 4 || r.Lost != 40_000 || r.Leases != 6 || r.Returned != 3_500 ||
		r.Spent != tot.Spent || r.Spent != 40_000+9_000+7_500 || r.Outstanding != 0 {
		t.Fatalf("report %+v, the stream replays to %+v, ledger %+v", r, replay, tot)
	}
}
