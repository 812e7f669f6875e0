package lease_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/lease"
)

// A shard behind its plan catches up at up to CatchUp x the curve's pace, not
// pro rata over the rest of the day, and follows the curve again once it is
// back on plan. Flat day, 24,000,000 micros: the plan's pace is 1,000,000 an
// hour; nothing is spent until noon, then every hour a grant takes all it can.
func TestCatchUpRecoversAtKTimesPace(t *testing.T) {
	const day = "2026-11-21"
	hour := func(h int) (time.Time, int64) { return t0.Add(time.Duration(h) * time.Hour), int64(h) * ppb / 24 }
	run := func(t *testing.T, k int64) []int64 {
		l, _ := newLedger(t)
		mustOpen(t, l, campaign("c", 24_000_000, 1), day)
		key := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
		var got []int64
		for h := 12; h < 24; h++ {
			now, c := hour(h)
			r := grantReq(fmt.Sprintf("L%d", h), key, lease.MaxBudgetMicros, now, c)
			r.Pace.CatchUpPermille = k
			g, err := l.Grant(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			// Spend it all at once: the next hour starts with nothing leased.
			if _, err := l.Release(ctx, key, r.LeaseID, 0, now); err != nil {
				t.Fatal(err)
			}
			got = append(got, g.Granted)
		}
		mustBalance(t, l, "c", day)
		return got
	}
	// k = 3. Noon: 12,000,000 are due; the cap window (3 h) allows 3x its plan,
	// 9,000,000. The 3,000,000 still behind come back at 3x the pace (the
	// hour's 1,000,000 and 2,000,000 of the deficit), so the shard is on plan
	// by 14:00 and follows the pace from there.
	want := []int64{9_000_000, 3_000_000, 2_000_000, 1_000_000, 1_000_000, 1_000_000,
		1_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000}
	if got := run(t, 3000); !near(got, want, 5) {
		t.Errorf("k=3: hourly grants %v, want %v (±5 micros of rounding)", got, want)
	}
	// k = 1 is the pro-rata rule: the deficit is spread over the whole
	// afternoon (6,000,000 at noon, then 18,000,000 over 12 hours).
	want1 := []int64{6_000_000, 1_500_000, 1_500_000, 1_500_000, 1_500_000, 1_500_000,
		1_500_000, 1_500_000, 1_500_000, 1_500_000, 1_500_000, 1_500_000}
	if got := run(t, 0); !near(got, want1, 5) {
		t.Errorf("k=1: hourly grants %v, want %v (±5 micros of rounding)", got, want1)
	}
}

// near reports whether got and want have the same length and differ by at
// most tol everywhere (hour boundaries in parts per billion round down).
func near(got, want []int64, tol int64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if d := got[i] - want[i]; d > tol || d < -tol {
			return false
		}
	}
	return true
}

// A budget whose cap window is worth less than one bid still gets its bids:
// with a unit, a shard makes one bid available while what it has spent or
// holds available stays within one unit of its plan, and never more.
func TestUnitAdvanceIsOneBidAheadAtMost(t *testing.T) {
	const day = "2026-11-21"
	const bid = 2_000
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("s", 100*bid, 1), day) // 100 bids a day: one every 14.4 min
	key := lease.ShardKey{Campaign: "s", Day: day, Shard: 0}
	capWindow := int64(ppb * 300 / 86400)
	seq := 0
	grant := func(at time.Duration, unit int64) int64 {
		t.Helper()
		seq++
		now := t0.Add(at)
		c := int64(at/time.Millisecond) * ppb / 86_400_000
		r := grantReq(fmt.Sprintf("g%d", seq), key, bid, now, c)
		r.Pace = lease.Pace{Now: c, Cap: c + capWindow, Unit: unit, CatchUpPermille: 3000}
		g, err := l.Grant(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if g.Granted > 0 {
			if _, err := l.Release(ctx, key, r.LeaseID, 0, now); err != nil { // spent
				t.Fatal(err)
			}
		}
		return g.Granted
	}
	// Without a unit, one minute in: a sliver of a bid.
	if g := grant(time.Minute, 0); g >= bid {
		t.Fatalf("no unit: granted %d, want less than a bid", g)
	}
	// With one: a bid (less the sliver already spent, which counts against
	// the one bid ahead), once; the next has to wait for the curve.
	if g := grant(2*time.Minute, bid); g < bid/2 {
		t.Fatalf("unit at 2 min: granted %d, want most of a bid", g)
	}
	if tot := mustBalance(t, l, "s", day); tot.Spent > 100*bid*2/1440+bid {
		t.Fatalf("at 2 min spent %d: more than one bid over the plan", tot.Spent)
	}
	if g := grant(3*time.Minute, bid); g >= bid/2 {
		t.Fatalf("a second bid at 3 min: granted %d, want only the curve's minute (one bid ahead at most)", g)
	}
	// Every 14.4 minutes the curve is worth another bid.
	for i := 1; i <= 5; i++ {
		at := time.Duration(i)*864*time.Second + 3*time.Minute
		if g := grant(at, bid); g == 0 {
			t.Fatalf("bid %d at %v: nothing granted", i+1, at)
		}
		tot := mustBalance(t, l, "s", day)
		plan := 100 * bid * int64(at) / int64(24*time.Hour)
		if tot.Spent > plan+bid {
			t.Fatalf("at %v spent %d, more than one bid over the plan's %d", at, tot.Spent, plan)
		}
	}
}

// Ahead bounds what a shard lets out beyond its plan's due, leases still
// out included: hosts that hold bids they have not spent yet are as far
// ahead as if they had. A 20-bid day (2,000 micros a bid) on a flat curve,
// Unit 4,000 (the largest SPEND) and Ahead 3,000: three hosts each ask for
// four bids, holding what they get, every ten minutes for two hours; spent
// and leased together stay within Ahead of the plan, and the advance still
// lets Ahead out at the first call.
func TestAheadCountsLeasesOut(t *testing.T) {
	const bid, budget, ahead = 2_000, 20 * 2_000, 3_000
	l, key := openSmallDay(t, budget)
	var first int64
	for at := time.Minute; at <= 2*time.Hour; at += 10 * time.Minute {
		for h := range 3 {
			p := smallDayPace(at, 2*bid, 2*bid, false)
			p.Ahead = ahead
			r := grantReq(fmt.Sprintf("h%d-%v", h, at), key, 4*bid, t0.Add(at), p.Now)
			r.Holder, r.Pace = fmt.Sprintf("h%d", h), p
			g, err := l.Grant(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if at == time.Minute && h == 0 {
				first = g.Granted
			}
			out := g.Shard.Spent + g.Shard.Leased + g.Shard.Available
			if due := int64(budget) * int64(at) / int64(24*time.Hour); out > due+ahead {
				t.Fatalf("at %v host %d: spent, leased and available %d, more than Ahead %d over the plan's %d", at, h, out, ahead, due)
			}
		}
	}
	if first < ahead {
		t.Errorf("the first call got %d: want the advance, at least Ahead", first)
	}
	mustBalance(t, l, "c", rampDay)
}

// The advance's ramp tests: a shard of 24,000,000 micros a day on a flat
// curve (1,000,000 an hour), a unit of half an hour of its plan, catch-up 3x.
const (
	rampDay    = "2026-11-21"
	rampBudget = 24_000_000
	rampUnit   = 500_000
	rampK      = 3000
)

// A shard catching up does not jump a unit ahead of its plan once it is
// back on it: its one-unit advance builds at the catch-up pace, so no call
// releases more than k x the plan's pace over the curve since the last one.
// Before, each shard went from a unit behind to a unit ahead in one call, and
// a campaign's eight shards together ran 25-35 bids ahead within minutes
// (late-peak: hours of 3.1-4.8x its plan against the 3x bound). Flat day,
// 24,000,000 micros (1,000,000 an hour), a unit of half an hour's plan;
// nothing spent until noon, then every five minutes a grant of all it can,
// spent at once. The day has two shards (one bid ahead on each is two
// ahead for the campaign); the test uses the first.
func TestAdvanceAfterCatchUpKeepsTheCatchUpPace(t *testing.T) {
	const step = 5 * time.Minute
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("c", 2*rampBudget, 2), rampDay)
	key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
	stepPlan := int64(rampBudget * step.Seconds() / 86400)
	var spent int64
	ahead := false
	for now := t0.Add(12 * time.Hour); now.Before(t0.Add(22 * time.Hour)); now = now.Add(step) {
		at := now.Sub(t0)
		c := int64(at/time.Millisecond) * ppb / 86_400_000
		r := grantReq("L"+at.String(), key, lease.MaxBudgetMicros, now, c)
		r.Pace = lease.Pace{Now: c, Cap: c + ppb*5/(24*60), Unit: rampUnit, CatchUpPermille: rampK, Shards: 2}
		g := spendAll(t, l, r)
		spent += g
		plan := int64(rampBudget * at.Seconds() / 86400)
		if at > 12*time.Hour && g > stepPlan*rampK/1000+5 {
			t.Fatalf("at %v granted %d: more than %.0fx the five minutes' plan of %d (spent %d, plan %d)",
				at, g, float64(rampK)/1000, stepPlan, spent, plan)
		}
		if spent > plan+rampUnit {
			t.Fatalf("at %v spent %d: more than a unit over the plan's %d", at, spent, plan)
		}
		ahead = ahead || spent > plan+rampUnit/2
	}
	mustBalance(t, l, "c", rampDay)
	if !ahead {
		t.Error("the shard never stood half a unit ahead of its plan: the advance did not run")
	}
}

// A new shard of a day of several ramps up its advance too, at no more than
// twice the plan's pace: eight shards a unit ahead from midnight gave a
// 786-bid campaign with a midnight spike 4.3x its curve's first hour, and
// ramping at the catch-up pace (3x) 2.2-2.7x its night hours. A single shard's day stands a
// unit ahead at once, as the advance is for. Flat day, 24,000,000 micros a
// shard, a unit of half an hour's plan; the first call five minutes in.
func TestNewShardsRampTheirAdvance(t *testing.T) {
	first := func(t *testing.T, shards int) int64 {
		l, _ := newLedger(t)
		mustOpen(t, l, campaign("c", int64(shards)*rampBudget, shards), rampDay)
		key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
		now := t0.Add(5 * time.Minute)
		c := int64(5*60*1000) * ppb / 86_400_000
		r := grantReq("L", key, lease.MaxBudgetMicros, now, c)
		r.Pace = lease.Pace{Now: c, Cap: c + ppb*5/(24*60), Unit: rampUnit, CatchUpPermille: rampK, Shards: int64(shards)}
		g, err := l.Grant(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		mustBalance(t, l, "c", rampDay)
		return g.Granted
	}
	fiveMinutes := int64(rampBudget * 300 / 86400)
	// At most twice the plan's pace, though catch-up may go to rampK (3x).
	if g := first(t, 2); g > fiveMinutes*2+5 {
		t.Errorf("two shards: the first call granted %d, more than twice the five minutes' plan of %d", g, fiveMinutes)
	}
	if g := first(t, 1); g < rampUnit {
		t.Errorf("one shard: the first call granted %d, want the unit of %d at once", g, rampUnit)
	}
}

// A shard far behind at 23:00 does not end its day in a burst when catch-up
// is bounded: over the last hour it releases at most k x the plan's hour
// (1.5x, the daemons' bound for a day's last hour); pro rata (k = 0) it
// releases all it holds.
func TestNoEndOfDayDump(t *testing.T) {
	const day = "2026-11-21"
	lastHour := func(t *testing.T, k int64) int64 {
		l, _ := newLedger(t)
		mustOpen(t, l, campaign("c", 24_000_000, 1), day)
		key := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
		var got int64
		// Nothing spent until 23:00, then a grant every 5 minutes, spent at once.
		for m := 0; m <= 55; m += 5 {
			now := t0.Add(23*time.Hour + time.Duration(m)*time.Minute)
			c := int64(23*60+m) * ppb / (24 * 60)
			r := grantReq(fmt.Sprintf("L%d", m), key, lease.MaxBudgetMicros, now, c)
			r.Pace.Cap = min(ppb, c+ppb*5/(24*60))
			r.Pace.CatchUpPermille = k
			g, err := l.Grant(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Release(ctx, key, r.LeaseID, 0, now); err != nil {
				t.Fatal(err)
			}
			got += g.Granted
		}
		mustBalance(t, l, "c", day)
		return got
	}
	// The plan's last hour is 1,000,000; 23 hours of it (23,000,000) are
	// behind at 23:00.
	if got := lastHour(t, 1500); got > 1_500_000+1_000 {
		t.Errorf("k=1.5: the last hour released %d, more than 1.5x the plan's hour", got)
	}
	if got := lastHour(t, 0); got < 20_000_000 {
		t.Errorf("k=0 (pro rata): the last hour released %d; the rule dumps what is behind", got)
	}
}

// A shard far behind its plan in the day's last hour releases at most the
// catch-up multiple of the plan's pace, whatever its bid: the one-bid advance
// used to refill available at every call while what was spent lay far below
// the plan, so a campaign that traffic had let fall behind ended its day in a
// burst (the family's flash-crowd campaign spent 22.6% of its budget in a
// last hour the curve gives 3.7%; the goal is at most 1.5x). Flat
// day, 447,100 micros, a bid of 4,000: 77% spent by 23:00 (the plan is at
// 95.8%), then a holder asks for far more than the pace every 30 s and
// spends it all.
func TestFarBehindShardEndsItsDayWithoutBurst(t *testing.T) {
	const (
		day       = "2026-11-21"
		budget    = 447_100
		unit      = 4_000
		k         = 1500 // the daemon's bound in a campaign's last hour
		step      = 30 * time.Second
		capWindow = 5 * time.Minute
	)
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("c", budget, 1), day)
	key := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	curve := func(at time.Time) int64 { return min(ppb, int64(at.Sub(t0)/time.Millisecond)*(ppb/1000)/(24*3600)) }
	lastHour := t0.Add(23 * time.Hour)
	var known lease.History
	var spentBefore, spentAtLastHour int64 // what the shard had spent before the call
	n := 0
	for now := t0.Add(10 * time.Minute); now.Before(t0.Add(24*time.Hour - step)); now = now.Add(step) {
		want := int64(120) // traffic-limited: 77% of the budget by 23:00
		if !now.Before(lastHour) {
			want = budget // a flash crowd
		}
		if now.Equal(lastHour) {
			spentAtLastHour = spentBefore
		}
		n++
		r := grantReq(fmt.Sprintf("L%d", n), key, want, now, curve(now))
		r.Pace = lease.Pace{Now: curve(now), Cap: curve(now.Add(capWindow)), Unit: unit, CatchUpPermille: k}
		r.Known = known
		g, err := l.Grant(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		known = g.Shard.History()
		if g.Granted == 0 {
			continue
		}
		sh, err := l.Release(ctx, key, r.LeaseID, 0, now)
		if err != nil {
			t.Fatal(err)
		}
		spentBefore = sh.Spent
	}
	mustBalance(t, l, "c", day)
	end, err := l.ReadShard(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if behind := float64(spentAtLastHour) / budget; behind > 0.80 || behind < 0.70 {
		t.Fatalf("the setup went wrong: %.1f%% spent by 23:00, want ~77%%", 100*behind)
	}
	// The bound: k x the hour's plan, plus what the cap let available hold
	// at 23:00 (at most k x the cap window's plan, or one bid).
	hourPlan := int64(budget / 24)
	bound := hourPlan*k/1000 + max(unit, capWindow.Milliseconds()*budget/(24*3600*1000)*k/1000)
	if spent := end.Spent - spentAtLastHour; spent > bound {
		t.Errorf("last hour spent %d micros (%.2fx the hour's plan of %d); want at most %d (%.1fx the pace, and the cap)",
			spent, float64(spent)/float64(hourPlan), hourPlan, bound, float64(k)/1000)
	}
}

// A grant with Min gives at least Min micros or nothing, and a renewal with
// Min still releases its ending lease when it grants nothing: a sparse
// host's standing bid is whole or not held, so a campaign's last bids are
// not held as parts on several hosts where no SPEND of a bid fits.
func TestMinGrantsAllOrNothing(t *testing.T) {
	const day = "2026-11-21"
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	key := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	now, c := t0.Add(3*time.Hour), int64(ppb/8) // 3,000,000 released, the cap 3,000,000 more
	r := grantReq("a", key, 2_000_000, now, c)
	g, err := l.Grant(ctx, r)
	if err != nil || g.Granted != 2_000_000 {
		t.Fatalf("first grant: %d, %v; want 2,000,000", g.Granted, err)
	}
	// 1,000,000 left: asking for 2,000,000 at least gets nothing.
	r = grantReq("b", key, 2_000_000, now, c)
	r.Min = 2_000_000
	if g, err = l.Grant(ctx, r); err != nil || g.Granted != 0 || g.Shard.Available != 1_000_000 {
		t.Fatalf("all or nothing: granted %d, available %d, %v; want 0 and 1,000,000 left", g.Granted, g.Shard.Available, err)
	}
	// Renewing "a" (1,500,000 of it unused) with the same floor: the release
	// half happens, so 2,500,000 are there and the new lease gets 2,000,000.
	r = grantReq("a2", key, 2_000_000, now, c)
	r.Min = 2_000_000
	if g, err = l.Renew(ctx, "a", 1_500_000, r); err != nil || g.Granted != 2_000_000 {
		t.Fatalf("renewal: granted %d, %v; want 2,000,000", g.Granted, err)
	}
	// Renewing "a2" wholly unused with a floor above what is there: nothing is
	// granted, and a2's 2,000,000 are back.
	r = grantReq("a3", key, 2_600_000, now, c)
	r.Min = 2_600_000
	if g, err = l.Renew(ctx, "a2", 2_000_000, r); err != nil || g.Granted != 0 || g.Shard.Leased != 0 || g.Shard.Available != 2_500_000 {
		t.Fatalf("renewal without enough: granted %d, leased %d, available %d, %v; want 0, 0, 2,500,000", g.Granted, g.Shard.Leased, g.Shard.Available, err)
	}
	r = grantReq("x", key, 1_000, now, c)
	r.Min = 1_001
	if _, err := l.Grant(ctx, r); err == nil {
		t.Fatal("a Min above Want was accepted")
	}
	mustBalance(t, l, "c", day)
}

// What a renewal's ending lease gives back is not counted against the cap on
// available: it was released before, so keeping it adds nothing to the
// fleet's pace, while capping it re-locked what the shard had gathered for
// other holders (a host renewing an unspent standing bid every few minutes
// wiped out what the others were waiting for). Flat day, 24,000,000 micros.
func TestRenewalReturnIsNotRelocked(t *testing.T) {
	const day = "2026-11-21"
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	key := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	// 03:00: 3,000,000 released; "a" takes 1,000,000 and leaves 2,000,000.
	if g, err := l.Grant(ctx, grantReq("a", key, 1_000_000, t0.Add(3*time.Hour), ppb/8)); err != nil || g.Granted != 1_000_000 {
		t.Fatalf("grant: %d, %v", g.Granted, err)
	}
	// 04:00: the curve releases 1,000,000 more (3,000,000 available, under
	// the cap of 3,600,000: a cap window of 3 h of what is left, pro rata),
	// and "a" is renewed wholly unused for as much again. Its 1,000,000 come
	// back and go out again: 3,000,000 stay available. Capping the returned
	// micros with the rest left 2,600,000.
	g, err := l.Renew(ctx, "a", 1_000_000, grantReq("a2", key, 1_000_000, t0.Add(4*time.Hour), ppb/6))
	if err != nil || g.Granted != 1_000_000 {
		t.Fatalf("renew: %d, %v", g.Granted, err)
	}
	if d := g.Shard.Available - 3_000_000; d < -5 || d > 5 {
		t.Errorf("available after the renewal: %d; want 3,000,000 ±5 micros of rounding (what the curve released, untouched by the lease's return)", g.Shard.Available)
	}
	mustBalance(t, l, "c", day)
}

// hourRun drives one shard of a flat day of rampBudget micros (1,000,000 an
// hour) with catch-up 3x and the given unit and hour bound: at each minute
// for which active says so, a grant of all it can, spent at once. It
// returns what was spent in each hour of the day.
func hourRun(t *testing.T, unit, hourPermille int64, active func(at time.Duration) bool) (hours [24]int64) {
	t.Helper()
	return hourRunSkewed(t, unit, hourPermille, active, 0)
}

// hourRunSkewed is hourRun with a second host whose clock is skew behind:
// after each call, it calls too, in the hour its clock says.
func hourRunSkewed(t *testing.T, unit, hourPermille int64, active func(at time.Duration) bool, skew time.Duration) (hours [24]int64) {
	t.Helper()
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("c", rampBudget, 1), rampDay)
	key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
	for at := time.Minute; at < 24*time.Hour; at += time.Minute {
		if !active(at) {
			continue
		}
		for i, clock := range []time.Duration{at, at - skew} {
			if i > 0 && skew == 0 {
				break
			}
			now := t0.Add(clock)
			c := int64(clock/time.Millisecond) * ppb / 86_400_000
			r := grantReq(fmt.Sprintf("L%v-%d", at, i), key, lease.MaxBudgetMicros, now, c)
			r.Pace = lease.Pace{Now: c, Cap: min(ppb, c+ppb*5/(24*60)), Unit: unit, CatchUpPermille: rampK, Shards: 1,
				Hour: int64(clock / time.Hour), HourPPB: ppb / 24, HourPermille: hourPermille}
			hours[at/time.Hour] += spendAll(t, l, r) // in the hour it really is
		}
	}
	mustBalance(t, l, "c", rampDay)
	return hours
}

// A shard's hour bound: in an hour of its local day, a shard releases at
// most the bound's multiple of the plan's share of the hour, plus a unit,
// less what it held at its first call in the hour, so no hour spends more than that,
// whether the shard catches up (at 3x without the bound) or stands its
// unit ahead (a jump of what it was behind plus a unit, at every call,
// without it). The 20-bid budgets of the simulator's tiny scenario, a bid
// of which is three hours of their plan, spent up to six bids in an hour
// that way (30 seeds: 281 of 360 days within twice the curve's hour, less
// a bid; 304 with the bound). Each case runs without the bound too, to show
// it exceeds there.
func TestHourBoundsWhatAShardReleases(t *testing.T) {
	const hourPlan = rampBudget / 24
	cases := []struct {
		name   string
		unit   int64
		active func(at time.Duration) bool
	}{
		// Nothing asked until noon, then every minute: far behind, the
		// catch-up rule alone releases.
		{"catching up", 500_000, func(at time.Duration) bool { return at >= 12*time.Hour }},
		// A unit of two hours' plan; every minute but 09:06-13:00: at
		// 13:00 the shard, which stood a unit ahead, is 1.9 hours' plan
		// behind, less than a unit, and each call refilled its unit at
		// once.
		{"a unit ahead", 2_000_000, func(at time.Duration) bool { return at < 9*time.Hour+6*time.Minute || at >= 13*time.Hour }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			most := 2*hourPlan + tc.unit
			worst := func(hours [24]int64) (int64, int) {
				var w int64
				var at int
				for h, v := range hours {
					if v > w {
						w, at = v, h
					}
				}
				return w, at
			}
			if w, h := worst(hourRun(t, tc.unit, 0, tc.active)); w <= most {
				t.Fatalf("without the bound, the worst hour (%02d:00) spent %d, within 2x the plan's %d and a unit: the case does not exercise the bound", h, w, hourPlan)
			} else {
				t.Logf("without the bound, hour %02d:00 spent %d", h, w)
			}
			hours := hourRun(t, tc.unit, 2000, tc.active)
			if w, h := worst(hours); w > most {
				t.Errorf("hour %02d:00 spent %d: more than twice the plan's %d and a unit (%d)", h, w, hourPlan, most)
			}
			var total int64
			for _, v := range hours {
				total += v
			}
			// Bounded, the shard still catches up by midnight (at twice the
			// plan's pace, less what is held at each hour's start): what is
			// left is under two hours of the plan.
			if total < rampBudget-2*hourPlan {
				t.Errorf("spent %d of %d: the bound stranded more than two hours of the plan (%v)", total, rampBudget, hours)
			}
		})
	}
}

// An hour bound out of range is refused with an error that names it, and
// changes nothing.
func TestHourBoundOutOfRangeIsRefused(t *testing.T) {
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("c", rampBudget, 1), rampDay)
	key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
	now := t0.Add(time.Hour)
	c := int64(ppb / 24)
	for _, tc := range []struct {
		hour, ppb, permille int64
		want                string
	}{
		{1, ppb / 24, 999, "hour bound 999 per mille"},
		{1, ppb / 24, 8001, "hour bound 8001 per mille"},
		{-1, ppb / 24, 2000, "pace hour -1"},
		{25, ppb / 24, 2000, "pace hour 25"},
		{1, -1, 2000, "pace hour share -1 ppb"},
		{1, ppb + 1, 2000, "pace hour share 1000000001 ppb"},
	} {
		r := grantReq("bad", key, 1_000, now, c)
		r.Pace.CatchUpPermille, r.Pace.Hour, r.Pace.HourPPB, r.Pace.HourPermille = rampK, tc.hour, tc.ppb, tc.permille
		if _, err := l.Grant(ctx, r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("hour %d, %d ppb, %d permille: error %v, want one saying %q", tc.hour, tc.ppb, tc.permille, err, tc.want)
		}
	}
	for _, hu := range []int64{-1, lease.MaxBudgetMicros + 1} {
		r := grantReq("bad", key, 1_000, now, c)
		r.Pace.CatchUpPermille, r.Pace.Hour, r.Pace.HourPPB, r.Pace.HourPermille, r.Pace.HourUnit = rampK, 1, ppb/24, 2000, hu
		if _, err := l.Grant(ctx, r); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pace hour unit %d micros out of range", hu)) {
			t.Errorf("hour unit %d: error %v, want one naming it", hu, err)
		}
	}
	r := grantReq("good", key, 1_000, now, c)
	r.Pace.CatchUpPermille, r.Pace.Hour, r.Pace.HourPPB, r.Pace.HourPermille, r.Pace.HourUnit = rampK, 1, ppb/24, 2000, rampUnit
	if _, err := l.Grant(ctx, r); err != nil {
		t.Fatalf("a bound in range: %v", err)
	}
	mustBalance(t, l, "c", rampDay)
}

// A host whose clock is behind, calling in the hour before while another
// has moved on, counts in the later hour: it does not start the earlier
// hour again, nor does the next call start the later one again (each start
// forgot what the hour had released). Caught up from noon, every minute,
// by a host on time and one 90 s behind.
func TestHourBoundHoldsAcrossSkewedClocks(t *testing.T) {
	const hourPlan, unit = rampBudget / 24, 500_000
	hours := hourRunSkewed(t, unit, 2000, func(at time.Duration) bool { return at >= 12*time.Hour }, 90*time.Second)
	for h, v := range hours {
		if v > 2*hourPlan+unit {
			t.Errorf("hour %02d:00 spent %d: more than twice the plan's %d and a unit", h, v, hourPlan)
		}
	}
}

// spendAll grants r and spends all of it at once (its lease released with
// nothing unused), returning what was granted.
func spendAll(t *testing.T, l *lease.Ledger, r lease.GrantRequest) int64 {
	t.Helper()
	g, err := l.Grant(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if g.Granted > 0 {
		if _, err := l.Release(ctx, r.Shard, r.LeaseID, 0, r.Now); err != nil {
			t.Fatal(err)
		}
	}
	return g.Granted
}

// A grant refused for want of micros (its Min above what the shard could
// release) does not use up its hour: what the call released for it and the
// cap took back unleased is the hour's to release again. Before, one SPEND
// too large for the hour's room closed the hour to every other SPEND (the
// simulator's 20-bid budgets: one SPEND of three bids, asked with itself as
// the Unit and refused at 15:09, paced every SPEND of that hour and the next
// while 5,000 micros behind their curve). On its plan a unit ahead (a call a
// minute, each granted all it can and spent), with at 12:30 one call asking
// for three hours of the plan, its Unit four hours.
func TestHourBoundRefusedGrantLeavesTheHourOpen(t *testing.T) {
	const hourPlan, unit = rampBudget / 24, rampUnit
	run := func(refuse bool) (hour12 int64) {
		l, _ := newLedger(t)
		mustOpen(t, l, campaign("c", rampBudget, 1), rampDay)
		key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
		for at := time.Minute; at < 13*time.Hour; at += time.Minute {
			now := t0.Add(at)
			c := int64(at/time.Millisecond) * ppb / 86_400_000
			pace := lease.Pace{Now: c, Cap: min(ppb, c+ppb*5/(24*60)), Unit: unit, CatchUpPermille: rampK, Shards: 1,
				Hour: int64(at / time.Hour), HourPPB: ppb / 24, HourPermille: 2000, HourUnit: unit}
			if refuse && at == 12*time.Hour+30*time.Minute {
				r := grantReq("outlier", key, 3*hourPlan, now, c)
				r.Pace, r.Min = pace, 3*hourPlan
				r.Pace.Unit = 4 * hourPlan
				if got := spendAll(t, l, r); got != 0 {
					t.Fatalf("a grant for more than the hour's room got %d", got)
				}
			}
			r := grantReq(fmt.Sprintf("L%v", at), key, lease.MaxBudgetMicros, now, c)
			r.Pace = pace
			if got := spendAll(t, l, r); at >= 12*time.Hour {
				hour12 += got
			}
		}
		mustBalance(t, l, "c", rampDay)
		return hour12
	}
	open, refused := run(false), run(true)
	if open < hourPlan-hourPlan/10 || open > 2*hourPlan+unit {
		t.Fatalf("without the refusal the hour spent %d: want about the plan's %d", open, hourPlan)
	}
	if refused > 2*hourPlan+unit {
		t.Errorf("after a refused grant the hour spent %d: more than twice the plan's %d and a unit", refused, hourPlan)
	}
	if refused < open-hourPlan/10 {
		t.Errorf("after a refused grant at 12:30 the hour spent %d, against %d without it: the refusal used up the hour's room", refused, open)
	}
	t.Logf("hour 12:00 spent %d, %d with the refused grant", open, refused)
}

// HourUnit, when set, is the bid the hour's bound allows over its share in
// place of Unit: a daemon passes its largest recent SPEND as Unit (which may
// be one outlying SPEND, asked now) and the campaign's usual bid as
// HourUnit, and no hour then spends more than the bound's share and that
// bid. Caught up from noon with a Unit of two hours' plan and an HourUnit of
// half an hour's; without HourUnit the same run exceeds that.
func TestHourBoundTakesItsBidFromHourUnit(t *testing.T) {
	const hourPlan, unit, hourUnit = rampBudget / 24, 2_000_000, rampUnit
	run := func(hu int64) (worst int64) {
		l, _ := newLedger(t)
		mustOpen(t, l, campaign("c", rampBudget, 1), rampDay)
		key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
		var hours [24]int64
		for at := 12 * time.Hour; at < 24*time.Hour; at += time.Minute {
			now := t0.Add(at)
			c := int64(at/time.Millisecond) * ppb / 86_400_000
			r := grantReq(fmt.Sprintf("L%v", at), key, lease.MaxBudgetMicros, now, c)
			r.Pace = lease.Pace{Now: c, Cap: min(ppb, c+ppb*5/(24*60)), Unit: unit, CatchUpPermille: rampK, Shards: 1,
				Hour: int64(at / time.Hour), HourPPB: ppb / 24, HourPermille: 2000, HourUnit: hu}
			hours[at/time.Hour] += spendAll(t, l, r)
		}
		mustBalance(t, l, "c", rampDay)
		return slices.Max(hours[:])
	}
	if w := run(0); w <= 2*hourPlan+hourUnit {
		t.Fatalf("without HourUnit the worst hour spent %d, within twice the plan's %d and the HourUnit: the case does not exercise it", w, hourPlan)
	}
	if w := run(hourUnit); w > 2*hourPlan+hourUnit {
		t.Errorf("the worst hour spent %d: more than twice the plan's %d and the HourUnit (%d)", w, hourPlan, hourUnit)
	}
}

// A shard's last two bids are released once they are all it has left: a
// SPEND that fits them is granted, ahead of the curve, rather than waiting
// for the curve to come within a bid of it and then, as the day's last
// SPENDs are few, for one small enough to fit what was left. Before, the
// family's small campaigns ended their days with part of a bid unspent that
// a SPEND had asked for hours before midnight (family seed 7: a 72-bid
// budget refused a 1,253-micros SPEND at 22:12 with 3,299 left, and ended
// with 777). A 20-bid day (2,000 micros a bid) on a flat curve, spent a bid
// ahead of it by a call every ten minutes; at 20:00 (4,945 left) a SPEND of
// 1.5 bids waits for the curve; after two SPENDs of a quarter bid, at 20:41
// (3,945 left), it is granted.
//
// With Ahead (here a bid) they wait for the curve's last Ahead, though:
// released earlier, the day would stand more than Ahead in front of its
// curve.
func TestLastBidsWaitForNoCurve(t *testing.T) {
	const bid, budget = 2_000, 20 * 2_000
	hourPlan := int64(budget / 24)
	l, key := openSmallDay(t, budget)
	pace := func(at time.Duration) lease.Pace {
		p := smallDayPace(at, bid, bid, false)
		p.Ahead = bid
		return p
	}
	var hours [24]int64
	spend := func(id string, at time.Duration, want, least int64) int64 {
		t.Helper()
		r := grantReq(id, key, want, t0.Add(at), pace(at).Now)
		r.Pace, r.Min = pace(at), least
		g := spendAll(t, l, r)
		hours[at/time.Hour] += g
		return g
	}
	for at := 10 * time.Minute; at < 20*time.Hour; at += 10 * time.Minute {
		spend(fmt.Sprintf("L%v", at), at, lease.MaxBudgetMicros, 0)
	}
	left := func() int64 { return budget - mustBalance(t, l, "c", rampDay).Spent }
	if n := left(); n <= 2*bid || n > 3*bid {
		t.Fatalf("at 20:00 %d left: the case wants between two and three bids", n)
	}
	if g := spend("early", 20*time.Hour, 3*bid/2, 3*bid/2); g != 0 {
		t.Fatalf("at 20:00 with %d left (more than two bids) a SPEND of 1.5 bids was granted %d: it should wait for the curve", left(), g)
	}
	for _, at := range []time.Duration{20*time.Hour + 20*time.Minute, 20*time.Hour + 40*time.Minute} {
		if g := spend(fmt.Sprintf("L%v", at), at, bid/4, bid/4); g != bid/4 { // a quarter bid each, within the curve's
			t.Fatalf("at %v a SPEND of a quarter bid was granted %d", at, g)
		}
	}
	n := left()
	if n > 2*bid || n < 3*bid/2 {
		t.Fatalf("at 20:41 %d left: the case wants between 1.5 and two bids", n)
	}
	// The last two bids, but the curve has more than a bid (Ahead: the
	// unit) still to release: granted, the day would stand 2.4 bids ahead
	// of its curve.
	if g := spend("early-tail", 20*time.Hour+41*time.Minute, 3*bid/2, 3*bid/2); g != 0 {
		t.Fatalf("at 20:41 with %d left a SPEND of 1.5 bids was granted %d: want it to wait until the curve has at most a bid left", n, g)
	}
	// From 22:48 the curve has at most a bid left: the last two bids wait
	// for it no more.
	if g := spend("tail", 22*time.Hour+50*time.Minute, 3*bid/2, 3*bid/2); g != 3*bid/2 {
		t.Fatalf("at 22:50 with %d left (the last two bids, the curve's last bid) a SPEND of 1.5 bids was granted %d: want all of it", left(), g)
	}
	if hours[20] > 2*hourPlan+bid || hours[22] > 2*hourPlan+bid {
		t.Errorf("hours 20 and 22 spent %d and %d: more than twice their plan's %d and a bid", hours[20], hours[22], hourPlan)
	}
	t.Logf("left at 20:41: %d; hour 20 spent %d, hour 22 %d (plan %d)", n, hours[20], hours[22], hourPlan)
}

// HourNoBid: the hour spends at most HourPermille/1000 times its share, no
// bid over it. A small campaign's last hour is bounded so at 1.5x, the
// issue's bound, exact: with a bid over the bound, a 30-bid budget (whose
// last hour is worth 1.25 bids) less than a bid behind at 23:00 spent what
// it was behind and the hour in it. A 30-bid day on a flat curve, spent a
// bid ahead of it by a call a minute until 21:26 (more than its last two
// bids left), idle until 23:00 (1,917 micros behind), then a call a minute.
func TestLastHourWithoutBid(t *testing.T) {
	const bid, budget = 2_000, 30 * 2_000
	hourPlan := int64(budget / 24)
	run := func(noBid bool) (hour23 int64) {
		l, _ := newLedger(t)
		mustOpen(t, l, campaign("c", budget, 1), rampDay)
		key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
		for at := time.Minute; at < 24*time.Hour; at += time.Minute {
			if at >= 21*time.Hour+26*time.Minute && at < 23*time.Hour {
				continue
			}
			r := grantReq(fmt.Sprintf("L%v", at), key, lease.MaxBudgetMicros, t0.Add(at), 0)
			r.Pace = smallDayPace(at, bid, bid, noBid)
			if g := spendAll(t, l, r); at >= 23*time.Hour {
				hour23 += g
			}
		}
		mustBalance(t, l, "c", rampDay)
		return hour23
	}
	most := 3 * hourPlan / 2
	if h := run(false); h <= most {
		t.Fatalf("with a bid over the bound the last hour spent %d, within 1.5x its plan's %d: the case does not exercise it", h, hourPlan)
	} else {
		t.Logf("with a bid over the bound the last hour spent %d", h)
	}
	h := run(true)
	if h > most {
		t.Errorf("the last hour spent %d: more than 1.5x its plan's %d", h, hourPlan)
	}
	if h < most-bid/10 {
		t.Errorf("the last hour spent %d, behind its curve: want its bound, 1.5x the plan's %d", h, hourPlan)
	}
	t.Logf("no bid over the bound: the last hour spent %d (plan %d)", h, hourPlan)
}

// With no bid over an hour's bound, what the shard held available at the
// hour's first call beyond it goes back to locked: released the hour
// before, it would be spent in this one. A 20-bid day on a flat curve,
// nothing asked until 22:58, when a call far behind its curve fills
// available to its Unit of two bids; at 23:00:10 a grant asks for all of
// it: 1.5x the last hour's share at most.
func TestLastHourReLocksWhatItHeld(t *testing.T) {
	const bid, budget = 2_000, 20 * 2_000
	hourPlan := int64(budget / 24)
	run := func(noBid bool) int64 {
		l, _ := newLedger(t)
		mustOpen(t, l, campaign("c", budget, 1), rampDay)
		key := lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
		pace := func(at time.Duration) lease.Pace { return smallDayPace(at, 2*bid, bid, noBid) }
		at := 22*time.Hour + 58*time.Minute
		r := grantReq("fill", key, 1, t0.Add(at), pace(at).Now)
		r.Pace = pace(at)
		if g := spendAll(t, l, r); g != 1 {
			t.Fatalf("at 22:58 a grant of one micro got %d", g)
		}
		if avail := mustBalance(t, l, "c", rampDay).Available; avail <= 3*hourPlan/2 {
			t.Fatalf("at 22:58 the shard holds %d available, within 1.5x the last hour's %d: the case does not exercise it", avail, hourPlan)
		}
		at = 23*time.Hour + 10*time.Second
		r = grantReq("all", key, 2*bid, t0.Add(at), pace(at).Now)
		r.Pace = pace(at)
		g := spendAll(t, l, r)
		mustBalance(t, l, "c", rampDay)
		return g
	}
	if g := run(false); g <= 3*hourPlan/2 {
		t.Fatalf("with a bid over the bound the last hour's first grant got %d, within 1.5x its share %d: the case does not exercise it", g, hourPlan)
	}
	if g := run(true); g > 3*hourPlan/2 {
		t.Errorf("the last hour's first grant got %d: more than 1.5x its share %d", g, hourPlan)
	}
}

// The end-of-day rules under retried calls (a daemon that lost a reply
// sends the same call again): a granted lease is returned by its id, not
// released again, and a refused one, which recorded nothing, runs again
// under the same bounds. A 20-bid day on a flat curve, spent a bid ahead of
// it by a call every ten minutes until 22:50 (its last two bids released
// once the curve has a bid left: the tail); and a second day, nothing spent until 23:00, a call a minute
// with no bid over the hour's 1.5x; every call is sent twice, and one that
// asks for more than the hour's room, refused, twice too. The last hour
// spends at most 1.5x its share, and every shard balances.
func TestEndOfDayRulesUnderRetries(t *testing.T) {
	const bid, budget = 2_000, 20 * 2_000
	hourPlan := int64(budget / 24)
	l, key := openSmallDay(t, budget)
	twice := func(id string, at time.Duration, want, least int64) int64 {
		t.Helper()
		r := grantReq(id, key, want, t0.Add(at), 0)
		r.Pace, r.Min = smallDayPace(at, bid, bid, true), least
		r.Pace.Ahead = bid
		first, err := l.Grant(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := l.Grant(ctx, r) // the reply was lost: the same call again
		if err != nil {
			t.Fatal(err)
		}
		if again.Granted != first.Granted {
			t.Fatalf("%s at %v: granted %d, its retry %d", id, at, first.Granted, again.Granted)
		}
		if first.Granted > 0 {
			if _, err := l.Release(ctx, key, id, 0, t0.Add(at)); err != nil {
				t.Fatal(err)
			}
		}
		return first.Granted
	}
	for at := 10 * time.Minute; at <= 22*time.Hour+50*time.Minute; at += 10 * time.Minute {
		twice(fmt.Sprintf("L%v", at), at, lease.MaxBudgetMicros, 0)
	}
	// The tail released the last two bids at once once the curve had a bid
	// left to release (22:48), each granted once.
	if left := budget - mustBalance(t, l, "c", rampDay).Spent; left != 0 {
		t.Errorf("at 22:50, its last two bids released, %d left unspent", left)
	}
	// A fresh day's shard for the last hour: the first day is spent out.
	mustOpen(t, l, campaign("d", budget, 1), rampDay)
	key = lease.ShardKey{Campaign: "d", Day: rampDay, Shard: 0}
	var hour23 int64
	for at := 23 * time.Hour; at < 24*time.Hour; at += time.Minute {
		if at == 23*time.Hour+30*time.Minute {
			if g := twice("outlier", at, 2*hourPlan, 2*hourPlan); g != 0 {
				t.Fatalf("a grant of more than the last hour's room got %d", g)
			}
		}
		hour23 += twice(fmt.Sprintf("M%v", at), at, lease.MaxBudgetMicros, 0)
	}
	if hour23 > 3*hourPlan/2 {
		t.Errorf("the last hour spent %d under retries: more than 1.5x its share %d", hour23, hourPlan)
	}
	if hour23 < hourPlan {
		t.Errorf("the last hour spent %d, far behind its curve: want at least its share %d", hour23, hourPlan)
	}
	mustBalance(t, l, "c", rampDay)
	mustBalance(t, l, "d", rampDay)
	t.Logf("last hour spent %d (share %d) with every call sent twice", hour23, hourPlan)
}

// smallDayPace is a small campaign's pace at at into a flat day, as pacerd
// asks it: a call's cap window of five minutes, catch-up at rampK, the
// hour's bound at 2x with hourUnit over it; from 23:00 the last hour's
// catch-up (1.25x) and its bound of 1.5x, with no bid over it if noBid.
func smallDayPace(at time.Duration, unit, hourUnit int64, noBid bool) lease.Pace {
	c := int64(at/time.Millisecond) * ppb / 86_400_000
	p := lease.Pace{Now: c, Cap: min(ppb, c+ppb*5/(24*60)), Unit: unit, CatchUpPermille: rampK, Shards: 1,
		Hour: int64(at / time.Hour), HourPPB: ppb / 24, HourPermille: 2000, HourUnit: hourUnit}
	if at >= 23*time.Hour {
		p.CatchUpPermille, p.HourPermille, p.HourNoBid = 1250, 1500, noBid
	}
	return p
}

// openSmallDay opens campaign "c", one shard of budget on rampDay, on a
// fresh ledger.
func openSmallDay(t *testing.T, budget int64) (*lease.Ledger, lease.ShardKey) {
	t.Helper()
	l, _ := newLedger(t)
	mustOpen(t, l, campaign("c", budget, 1), rampDay)
	return l, lease.ShardKey{Campaign: "c", Day: rampDay, Shard: 0}
}
