package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/redis/go-redis/v9"
)

const ppb = 1_000_000_000

var (
	t0  = time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	ctx = context.Background()
)

func newLedger(t *testing.T) (*lease.Ledger, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	// Test days are fixed dates in the past: keep their keys from expiring at once.
	return lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil), srv
}

func mustOpen(t *testing.T, l *lease.Ledger, c lease.Campaign, day string) {
	t.Helper()
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, day, t0, t0); err != nil {
		t.Fatal(err)
	}
}

func campaign(id string, budget int64, shards int) lease.Campaign {
	return lease.Campaign{ID: id, DailyMicros: budget, TZ: "UTC", Curve: "flat", Shards: shards, State: lease.StateActive}
}

func mustBalance(t *testing.T, l *lease.Ledger, id, day string) lease.Shard {
	t.Helper()
	total, problems, err := l.CheckDay(ctx, id, day)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("conservation: %s", p)
	}
	return total
}

// The Lua muldiv must be exact where a double product would not be.
func TestLuaMulDivExact(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := redis.NewScript(lease.LuaPreludeForTest + `
return str(muldiv(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])))`)
	rng := rand.New(rand.NewPCG(1, 2))
	cases := [][3]int64{
		{lease.MaxBudgetMicros, ppb - 1, ppb},
		{lease.MaxBudgetMicros - 1, 999_999_937, 999_999_999},
		{1<<53 - 1, 1<<30 - 1, 1 << 30},
		{123_456_789_012_345, 1, 3},
		{0, 5, 7},
		{7, 0, 7},
		{999_999_999_999_999, 333_333_333, 1_000_000_000},
	}
	for range 300 {
		c := rng.Int64N(ppb) + 1
		cases = append(cases, [3]int64{rng.Int64N(lease.MaxBudgetMicros + 1), rng.Int64N(c + 1), c})
	}
	for _, tc := range cases {
		got, err := s.Run(ctx, rdb, []string{"k"}, tc[0], tc[1], tc[2]).Text()
		if err != nil {
			t.Fatal(err)
		}
		want := new(big.Int).Mul(big.NewInt(tc[0]), big.NewInt(tc[1]))
		want.Quo(want, big.NewInt(tc[2]))
		if got != want.String() {
			t.Fatalf("muldiv(%d, %d, %d) = %s, want %s", tc[0], tc[1], tc[2], got, want)
		}
	}
}

// The Lua str writes every number as %.0f did: integers below 2^53 by
// their cheaper %d path, anything else by %.0f.
func TestLuaStrMatchesPercentF(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	s := redis.NewScript(lease.LuaPreludeForTest + `
local x = tonumber(ARGV[1])
return {str(x), string.format('%.0f', x)}`)
	for _, x := range []string{"0", "7", "-7", "1000000000000000", "-1000000000000000", "9007199254740991",
		"-9007199254740991", "9007199254740992", "1e20", "-1e20", "1.5", "2.5", "-0.4", "123456789012345.6"} {
		got, err := s.Run(ctx, rdb, []string{"k"}, x).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != got[1] || strings.ContainsAny(got[0], "e.") {
			t.Errorf("str(%s) = %q, %%.0f gives %q", x, got[0], got[1])
		}
	}
}

func TestCampaignStore(t *testing.T) {
	l, _ := newLedger(t)
	bad := []lease.Campaign{
		{ID: "a{b}", DailyMicros: 1, TZ: "UTC", Curve: "flat", Shards: 1, State: "active"},
		{ID: "neg", DailyMicros: -1, TZ: "UTC", Curve: "flat", Shards: 1, State: "active"},
		{ID: "huge", DailyMicros: lease.MaxBudgetMicros + 1, TZ: "UTC", Curve: "flat", Shards: 1, State: "active"},
		{ID: "tz", DailyMicros: 1, TZ: "Mars/Olympus", Curve: "flat", Shards: 1, State: "active"},
		{ID: "shards", DailyMicros: 1, TZ: "UTC", Curve: "flat", Shards: 0, State: "active"},
		{ID: "state", DailyMicros: 1, TZ: "UTC", Curve: "flat", Shards: 1, State: "gone"},
		{ID: "curve", DailyMicros: 1, TZ: "UTC", Curve: "Bad Name", Shards: 1, State: "active"},
	}
	for _, c := range bad {
		if _, err := l.PutCampaign(ctx, c); err == nil {
			t.Errorf("PutCampaign(%+v) accepted", c)
		}
	}
	c, err := l.PutCampaign(ctx, lease.Campaign{ID: "c1", DailyMicros: 5_000_000, TZ: "Asia/Kolkata", Curve: "flat", Shards: 4, State: "active"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 1 {
		t.Errorf("version = %d, want 1", c.Version)
	}
	got, err := l.GetCampaign(ctx, "c1")
	if err != nil || got != c {
		t.Fatalf("GetCampaign = %+v, %v; want %+v", got, err, c)
	}
	p, err := l.SetState(ctx, "c1", lease.StatePaused)
	if err != nil || p.State != lease.StatePaused || p.Version != 2 {
		t.Fatalf("SetState = %+v, %v", p, err)
	}
	var unknown *lease.UnknownCampaignError
	if _, err := l.GetCampaign(ctx, "nope"); !errors.As(err, &unknown) {
		t.Fatalf("GetCampaign(nope) err = %v, want UnknownCampaignError", err)
	}
	list, err := l.ListCampaigns(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "c1" {
		t.Fatalf("ListCampaigns = %+v, %v", list, err)
	}
}

func grantReq(id string, k lease.ShardKey, want int64, now time.Time, c int64) lease.GrantRequest {
	return lease.GrantRequest{Shard: k, LeaseID: id, Holder: "h1", Want: want,
		Expiry: now.Add(30 * time.Second), Now: now, Pace: lease.Pace{Now: c, Cap: min(ppb, c+ppb/8)},
		Grace: 5 * time.Second, DayStart: t0}
}

// A step table on one shard: the curve releases budget, grants take from
// available, releases credit unused micros back, retries change nothing.
func TestGrantReleaseSteps(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }

	// 3h into a flat day: 1/8 released = 3,000,000; the cap (the next 3h of the
	// rest of the day: 24,000,000 x (1/8) / (7/8) = 3,428,571) does not bite.
	g, err := l.Grant(ctx, grantReq("L1", k, 400_000, h(3), ppb/8))
	if err != nil || g.Granted != 400_000 {
		t.Fatalf("grant L1 = %+v, %v", g, err)
	}
	if want := (lease.Shard{Budget: 24_000_000, Locked: 21_000_000, Available: 2_600_000, Leased: 400_000}); noSeq(g.Shard) != want {
		t.Fatalf("after L1: %+v, want %+v", g.Shard, want)
	}
	// Retry of the same grant: same lease, nothing moves.
	g2, err := l.Grant(ctx, grantReq("L1", k, 400_000, h(3), ppb/8))
	if err != nil || g2.Granted != 400_000 || g2.Shard != g.Shard {
		t.Fatalf("retry L1 = %+v, %v", g2, err)
	}
	// Want more than available: get what there is.
	g, err = l.Grant(ctx, grantReq("L2", k, 5_000_000, h(3), ppb/8))
	if err != nil || g.Granted != 2_600_000 || g.Shard.Available != 0 {
		t.Fatalf("grant L2 = %+v, %v", g, err)
	}
	// Release L1 with 100,000 unused; a retry credits nothing more.
	for range 2 {
		sh, err := l.Release(ctx, k, "L1", 100_000, h(3))
		if err != nil || sh.Available != 100_000 || sh.Spent != 300_000 || sh.Leased != 2_600_000 {
			t.Fatalf("release L1 = %+v, %v", sh, err)
		}
	}
	if _, err := l.Release(ctx, k, "L9", 0, h(3)); !errors.Is(err, lease.ErrUnknownLease) {
		t.Fatalf("release unknown: %v", err)
	}
	if _, err := l.Release(ctx, k, "L2", 2_600_001, h(3)); err == nil {
		t.Fatal("release with unused > amount accepted")
	}
	// A grant of a closed lease id is refused.
	if _, err := l.Grant(ctx, grantReq("L1", k, 1, h(3), ppb/8)); err == nil {
		t.Fatal("re-grant of released lease id accepted")
	}
	// Renew L2 (all spent) into L3 at 6h: the curve releases 21,000,000 x
	// (1/8) / (7/8) = 3,000,000 more.
	g, err = l.Renew(ctx, "L2", 0, grantReq("L3", k, 700_000, h(6), ppb/4))
	if err != nil || g.Granted != 700_000 {
		t.Fatalf("renew L2->L3 = %+v, %v", g, err)
	}
	if want := (lease.Shard{Budget: 24_000_000, Locked: 18_000_000, Available: 2_400_000, Leased: 700_000, Spent: 2_900_000}); noSeq(g.Shard) != want {
		t.Fatalf("after renew: %+v, want %+v", g.Shard, want)
	}
	tot := mustBalance(t, l, "c", day)
	if tot.Spent != 2_900_000 || tot.Leased != 700_000 {
		t.Fatalf("totals %+v", tot)
	}
	// End of day: everything is released; L3 expired long ago and is settled.
	g, err = l.Grant(ctx, grantReq("L4", k, lease.MaxBudgetMicros, h(24), ppb))
	if err != nil {
		t.Fatal(err)
	}
	want := lease.Shard{Budget: 24_000_000, Leased: 24_000_000 - 2_900_000 - 700_000, Spent: 3_600_000, Lost: 700_000}
	if noSeq(g.Shard) != want {
		t.Fatalf("day end: %+v, want %+v", g.Shard, want)
	}
	if _, err := l.Release(ctx, k, "L3", 0, h(24)); !errors.Is(err, lease.ErrLeaseSettled) {
		t.Fatalf("late release of settled lease: %v", err)
	}
	mustBalance(t, l, "c", day)
}

// Release along the curve is exact: at any sequence of instants, released =
// budget x C(t) up to the cap, and at the day's end everything is released.
func TestCurveReleaseExact(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	const budget = 999_999_999_999_989 // not divisible by anything convenient
	mustOpen(t, l, campaign("x", budget, 3), day)
	rng := rand.New(rand.NewPCG(7, 7))
	c := int64(0)
	var granted int64
	for i := 0; c < ppb; i++ {
		c = min(ppb, c+rng.Int64N(ppb/50))
		k := lease.ShardKey{Campaign: "x", Day: day, Shard: i % 3}
		now := t0.Add(time.Duration(c) * 24 * time.Hour / ppb)
		r := grantReq("g"+strconv.Itoa(i), k, lease.MaxBudgetMicros, now, c)
		r.Pace.Cap = c // no cap window: release strictly by the curve
		if c == ppb {
			r.Pace.Cap = ppb
		}
		g, err := l.Grant(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		granted += g.Granted
		// Released so far on this shard never exceeds its share of budget x C.
		share := lease.Split(budget, 3)[k.Shard]
		limit := new(big.Int).Mul(big.NewInt(share), big.NewInt(c))
		limit.Quo(limit, big.NewInt(ppb))
		if rel := g.Shard.Budget - g.Shard.Locked; rel > limit.Int64()+1 {
			t.Fatalf("shard %d released %d at C=%d, more than budget x C = %d", k.Shard, rel, c, limit)
		}
	}
	// One last grant per shard at C=1 collects the rest.
	for s := range 3 {
		g, err := l.Grant(ctx, grantReq(fmt.Sprintf("end%d", s), lease.ShardKey{Campaign: "x", Day: day, Shard: s}, lease.MaxBudgetMicros, t0.Add(24*time.Hour), ppb))
		if err != nil {
			t.Fatal(err)
		}
		granted += g.Granted
	}
	tot := mustBalance(t, l, "x", day)
	// Leases expire (30 s) and later grants settle them, so granted budget ends
	// up leased or spent: all of it, and not one micro more.
	if granted != budget || tot.Leased+tot.Spent != budget || tot.Locked != 0 || tot.Available != 0 {
		t.Fatalf("granted %d of %d; totals %+v", granted, budget, tot)
	}
}

// The cap keeps unspent budget from bursting: a late first grant gets only the
// cap window's worth, and the rest is spread over what is left of the day.
func TestCatchUpIsCapped(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	// At noon nothing was spent: half the day's budget is due, but the cap allows
	// only what the rest of the day releases over the cap window (1/8 of the
	// day, 3h): 24,000,000 / 12h x 3h = 6,000,000. The other 6,000,000 go back to
	// locked and are spread over the afternoon.
	g, err := l.Grant(ctx, grantReq("L", k, 24_000_000, t0.Add(12*time.Hour), ppb/2))
	if err != nil {
		t.Fatal(err)
	}
	if g.Granted != 6_000_000 || g.Shard.Locked != 18_000_000 {
		t.Fatalf("late grant = %+v, want 6,000,000 granted and 18,000,000 locked", g)
	}
	mustBalance(t, l, "c", day)
}

func TestSettleFencing(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	if _, err := l.Grant(ctx, grantReq("L", k, 500_000, t0.Add(3*time.Hour), ppb/8)); err != nil {
		t.Fatal(err)
	}
	// Before expiry+grace: nothing settles.
	s, err := l.Settle(ctx, k, t0.Add(3*time.Hour+34*time.Second), 5*time.Second, 10)
	if err != nil || s.Count != 0 {
		t.Fatalf("early settle = %+v, %v", s, err)
	}
	// An older fence is refused.
	if _, err := l.Settle(ctx, k, t0.Add(4*time.Hour), 5*time.Second, 9); !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("old fence: %v", err)
	}
	s, err = l.Settle(ctx, k, t0.Add(4*time.Hour), 5*time.Second, 11)
	if err != nil || s.Count != 1 || s.Amount != 500_000 || s.Shard.Lost != 500_000 || s.Shard.Spent != 500_000 {
		t.Fatalf("settle = %+v, %v", s, err)
	}
	// Settling again changes nothing.
	s, err = l.Settle(ctx, k, t0.Add(5*time.Hour), 5*time.Second, 11)
	if err != nil || s.Count != 0 || s.Shard.Lost != 500_000 {
		t.Fatalf("re-settle = %+v, %v", s, err)
	}
	mustBalance(t, l, "c", day)
}

// noSeq drops a shard's history, to compare balances only.
func noSeq(s lease.Shard) lease.Shard { s.Seq, s.Tip, s.Diverged = 0, 0, false; return s }

func TestAdjustDay(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 10_000_000, 4), day)
	got, err := l.AdjustDay(ctx, "c", day, 30_000_003, t0)
	if err != nil || got != 30_000_003 {
		t.Fatalf("raise = %d, %v", got, err)
	}
	// Lease most of shard 0 at the day's end, then cut to zero: the cut is
	// applied in full; what is leased is owed, and taken from the lease's
	// unused micros when it comes back, never granted again.
	k0 := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	g, err := l.Grant(ctx, grantReq("L", k0, 5_000_000, t0.Add(24*time.Hour-time.Minute), ppb))
	if err != nil || g.Granted != 5_000_000 {
		t.Fatalf("grant = %+v, %v", g, err)
	}
	got, err = l.AdjustDay(ctx, "c", day, 0, t0)
	if err != nil || got != 0 {
		t.Fatalf("cut = %d, %v; want 0", got, err)
	}
	tot := mustBalance(t, l, "c", day)
	if tot.Owed != g.Granted || tot.Target() != 0 {
		t.Fatalf("after the cut: %+v, want %d owed and a target of 0", tot, g.Granted)
	}
	sh, err := l.Release(ctx, k0, "L", 3_000_000, t0.Add(24*time.Hour-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if want := (lease.Shard{Budget: 2_000_000, Spent: 2_000_000, Owed: 2_000_000}); noSeq(sh) != want {
		t.Fatalf("after the release: %+v, want %+v (the unused micros paid the debt)", sh, want)
	}
	// Nothing is left to grant, on any shard.
	for i := range 4 {
		g, err := l.Grant(ctx, grantReq("M"+strconv.Itoa(i), lease.ShardKey{Campaign: "c", Day: day, Shard: i}, 1_000_000, t0.Add(24*time.Hour-time.Minute), ppb))
		if err != nil || g.Granted != 0 {
			t.Fatalf("grant after the cut on shard %d = %+v, %v", i, g, err)
		}
	}
	// A raise first cancels the debt: 2,500,000 more is 500,000 to grant.
	if got, err = l.AdjustDay(ctx, "c", day, 2_500_000, t0); err != nil || got != 2_500_000 {
		t.Fatalf("raise = %d, %v", got, err)
	}
	tot = mustBalance(t, l, "c", day)
	if tot.Owed != 0 || tot.Remaining() != 500_000 || tot.Target() != 2_500_000 {
		t.Fatalf("after the raise: %+v", tot)
	}
}

// leasedCarryDay opens a carrying-over campaign "c" of 10,000,000 a day on
// two shards, today and tomorrow, and leases 3,000,000 of each of today's
// shards a minute before midnight (late).
func leasedCarryDay(t *testing.T) (l *lease.Ledger, day, next string, late time.Time) {
	t.Helper()
	l, _ = newLedger(t)
	day, next = "2026-11-21", "2026-11-22"
	c := campaign("c", 10_000_000, 2)
	c.CarryOver = true
	mustOpen(t, l, c, day)
	if _, err := l.OpenDay(ctx, c, next, t0.Add(24*time.Hour), t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	late = t0.Add(24*time.Hour - time.Minute)
	for i := range 2 {
		k := lease.ShardKey{Campaign: "c", Day: day, Shard: i}
		if g, err := l.Grant(ctx, grantReq("L", k, 3_000_000, late, ppb)); err != nil || g.Granted != 3_000_000 {
			t.Fatalf("grant on %s = %+v, %v", k, g, err)
		}
	}
	return l, day, next, late
}

// A cut below what is leased is owed by the shards holding the leases, in
// proportion to them. When one lease comes back unused and the other is
// spent, the first shard keeps more than its share and the second can never
// pay: PayDebts pays that debt from the sibling, so the day grants, and
// carries over, nothing above the cut (model seed 848).
func TestPayDebtsAfterACutBelowLeased(t *testing.T) {
	l, day, next, late := leasedCarryDay(t)
	k0 := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	k1 := lease.ShardKey{Campaign: "c", Day: day, Shard: 1}
	// 4,000,000 is left to grant; the cut to 2,000,000 takes it and owes
	// 4,000,000 more, 2,000,000 on each shard.
	if got, err := l.AdjustDay(ctx, "c", day, 2_000_000, late); err != nil || got != 2_000_000 {
		t.Fatalf("cut = %d, %v", got, err)
	}
	if _, err := l.Release(ctx, k0, "L", 3_000_000, late); err != nil { // nothing spent
		t.Fatal(err)
	}
	if _, err := l.Release(ctx, k1, "L", 0, late); err != nil { // all of it spent
		t.Fatal(err)
	}
	shards, err := l.ReadShards(ctx, "c", day, 2)
	if err != nil {
		t.Fatal(err)
	}
	if shards[0].Remaining() != 1_000_000 || shards[1].Owed != 2_000_000 || shards[1].Leased != 0 {
		t.Fatalf("before: %+v; want 1,000,000 grantable on shard 0 and shard 1's 2,000,000 owed", shards)
	}
	paid, err := l.PayDebts(ctx, "c", day, shards, 0, late)
	if err != nil || paid != 1_000_000 {
		t.Fatalf("PayDebts = %d, %v; want 1,000,000", paid, err)
	}
	if shards, err = l.ReadShards(ctx, "c", day, 2); err != nil {
		t.Fatal(err)
	}
	tot := mustBalance(t, l, "c", day)
	if shards[0].Remaining()+shards[1].Remaining() != 0 || tot.Spent != 3_000_000 || tot.Target() != 2_000_000 || tot.Budget != tot.Spent {
		t.Fatalf("after: %+v; want nothing to grant, the budget at what was spent, the target the cut's", tot)
	}
	if g, err := l.Grant(ctx, grantReq("M", k0, 500_000, late, ppb)); err != nil || g.Granted != 0 {
		t.Fatalf("grant after = %+v, %v; want nothing", g, err)
	}
	// Paid again, nothing moves; and the carry moves nothing to the next day.
	if shards, err = l.ReadShards(ctx, "c", day, 2); err != nil {
		t.Fatal(err)
	}
	if paid, err := l.PayDebts(ctx, "c", day, shards, 0, late.Add(time.Second)); err != nil || paid != 0 {
		t.Fatalf("PayDebts again = %d, %v; want 0", paid, err)
	}
	if n, err := l.CarryOver(ctx, "c", day, next, late); err != nil || n != 0 {
		t.Fatalf("carry = %d, %v; want 0", n, err)
	}
	if nd := mustBalance(t, l, "c", next); nd.Budget != 10_000_000 {
		t.Fatalf("next day's budget %d; want 10,000,000", nd.Budget)
	}
}

// The carry pays such a debt itself, before taking what is left.
func TestCarryOverNetsACutsUnpaidDebt(t *testing.T) {
	l, day, next, late := leasedCarryDay(t)
	if _, err := l.AdjustDay(ctx, "c", day, 5_000_000, late); err != nil {
		t.Fatal(err)
	}
	// Owed: 1,000,000 (500,000 a shard). Shard 0's lease comes back with
	// 2,000,000 unused, shard 1's spent: 1,500,000 is left, of which 500,000
	// pays shard 1's debt; 1,000,000 carries over (5,000,000 - 4,000,000 spent).
	if _, err := l.Release(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: 0}, "L", 2_000_000, late); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(ctx, lease.ShardKey{Campaign: "c", Day: day, Shard: 1}, "L", 0, late); err != nil {
		t.Fatal(err)
	}
	if n, err := l.CarryOver(ctx, "c", day, next, late); err != nil || n != 1_000_000 {
		t.Fatalf("carry = %d, %v; want 1,000,000 (the cut's budget less what was spent)", n, err)
	}
	if d, nd := mustBalance(t, l, "c", day), mustBalance(t, l, "c", next); d.Budget != d.Spent || nd.Budget != 11_000_000 {
		t.Fatalf("closed day %+v, next day %+v", d, nd)
	}
}

// A budget change retried with its op id (a lost reply, a crash half-way)
// is applied once.
func TestAdjustDayOpIsExactlyOnce(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 1_000_000, 3), day)
	for range 3 {
		got, err := l.AdjustDayOp(ctx, "c", day, "op-1", 2_000_000, t0)
		if err != nil || got != 2_000_000 {
			t.Fatalf("raise = %d, %v", got, err)
		}
	}
	if tot := mustBalance(t, l, "c", day); tot.Budget != 2_000_000 {
		t.Fatalf("after a repeated raise: %+v", tot)
	}
	// One shard's adjustment lands, then the caller dies: the day does not
	// balance until the op is finished, and finishing it applies the rest once.
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	if err := l.BeginDayOpForTest(ctx, "c", day, "op-2", 900_000); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Adjust(ctx, k, "op-2", 300_000, lease.AdjustOwe, t0); err != nil {
		t.Fatal(err)
	}
	if _, problems, err := l.CheckDay(ctx, "c", day); err != nil || len(problems) != 1 || !strings.Contains(problems[0].What, "op-2") {
		t.Fatalf("check with a half-done op = %v, %v; want the op reported", problems, err)
	}
	for range 2 {
		if n, err := l.FinishDayOps(ctx, "c", t0); err != nil || n > 1 {
			t.Fatalf("finish = %d, %v", n, err)
		}
	}
	if tot := mustBalance(t, l, "c", day); tot.Budget != 2_900_000 {
		t.Fatalf("after finishing: %+v", tot)
	}
	if b, err := l.DayBudget(ctx, "c", day); err != nil || b != 2_900_000 {
		t.Fatalf("day budget = %d, %v", b, err)
	}
}

// A ledger that lost a day's shard (Redis restarted without its data) must not
// re-open the day from scratch: that would grant its budget twice.
func TestLedgerLostIsRefused(t *testing.T) {
	l, srv := newLedger(t)
	const day = "2026-11-21"
	c := campaign("c", 10_000_000, 2)
	mustOpen(t, l, c, day)
	if err := srv.Client().Del(ctx, "pacer:{c/2026-11-21/1}:state").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, day, t0, t0); !errors.Is(err, lease.ErrLedgerLost) {
		t.Fatalf("OpenDay after loss: %v, want ErrLedgerLost", err)
	}
	_, problems, err := l.CheckDay(ctx, "c", day)
	if err != nil || len(problems) == 0 {
		t.Fatalf("CheckDay after loss: %v, %v; want a problem", problems, err)
	}
}

// With persistence on, a Redis restart keeps every lease: releases after it
// credit exactly, and the ledger balances.
func TestRedisRestartKeepsLedger(t *testing.T) {
	l, srv := newLedger(t)
	const day = "2026-11-21"
	mustOpen(t, l, campaign("c", 24_000_000, 1), day)
	k := lease.ShardKey{Campaign: "c", Day: day, Shard: 0}
	if _, err := l.Grant(ctx, grantReq("L", k, 500_000, t0.Add(3*time.Hour), ppb/8)); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	sh, err := l.Release(ctx, k, "L", 200_000, t0.Add(3*time.Hour))
	if err != nil || sh.Spent != 300_000 {
		t.Fatalf("release after restart = %+v, %v", sh, err)
	}
	mustBalance(t, l, "c", day)
}

// Random operations from several holders, with the clock jumping back and
// forth: the ledger balances after every call and never grants beyond budget.
func TestRandomOpsConserve(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	const budget = 7_777_777_777
	mustOpen(t, l, campaign("r", budget, 3), day)
	rng := rand.New(rand.NewPCG(3, 4))
	type held struct {
		k      lease.ShardKey
		amount int64
	}
	open := map[string]held{}
	var next int
	now := t0
	for step := range 400 {
		now = now.Add(time.Duration(rng.Int64N(int64(10*time.Minute))) - time.Minute)
		if now.Before(t0) {
			now = t0
		}
		c := min(ppb, int64(now.Sub(t0))*ppb/int64(24*time.Hour))
		k := lease.ShardKey{Campaign: "r", Day: day, Shard: rng.IntN(3)}
		switch op := rng.IntN(5); {
		case op <= 1:
			next++
			id := "g" + strconv.Itoa(next)
			g, err := l.Grant(ctx, grantReq(id, k, rng.Int64N(budget/10)+1, now, c))
			if err != nil {
				t.Fatal(err)
			}
			if g.Granted > 0 {
				open[id] = held{k, g.Granted}
			}
		case op == 2 || op == 3:
			for id, h := range open {
				unused := rng.Int64N(h.amount + 1)
				_, err := l.Release(ctx, h.k, id, unused, now)
				if err != nil && !errors.Is(err, lease.ErrLeaseSettled) {
					t.Fatal(err)
				}
				delete(open, id)
				break
			}
		default:
			if _, err := l.Settle(ctx, k, now, 5*time.Second, 0); err != nil {
				t.Fatal(err)
			}
		}
		tot := mustBalance(t, l, "r", day)
		if tot.Budget != budget {
			t.Fatalf("step %d: budget %d changed", step, tot.Budget)
		}
		if t.Failed() {
			t.Fatalf("step %d: ledger out of balance", step)
		}
	}
}

func shardKey(c, day string, s int) lease.ShardKey {
	return lease.ShardKey{Campaign: c, Day: day, Shard: s}
}

// A budget change reaches a day whose plan was decided but whose shards
// were not made (its opener died, or lost a reply, between the two): the
// day is opened from its plan, then changed. Before, the change skipped the
// day as not open, and the day opened later on the budget from before the
// change: a cut from 10,000,000 to 2,000,000 left the day to spend 10,000,000
// (the model checker's seed 813 found it as a raise that never landed).
func TestAdjustDayReachesAPlannedDay(t *testing.T) {
	l, _ := newLedger(t)
	const day = "2026-11-21"
	c := campaign("c", 10_000_000, 4)
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := l.DayPlan(ctx, "c", day); err != nil { // the opener decides the plan, then dies
		t.Fatal(err)
	}
	c.DailyMicros = 2_000_000 // the operator's cut, stored
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n, err := l.DayShards(ctx, "c", day); err != nil || n != 0 {
		t.Fatalf("day shards before the change = %d, %v; want 0 (planned, not opened)", n, err)
	}
	got, err := l.AdjustDay(ctx, "c", day, 2_000_000, t0)
	if err != nil || got != 2_000_000 {
		t.Fatalf("cut = %d, %v; want 2000000 (the planned day opened, then cut)", got, err)
	}
	if n, err := l.PlannedDayShards(ctx, "c", day, t0); err != nil || n != 4 {
		t.Fatalf("PlannedDayShards = %d, %v; want the plan's 4 shards", n, err)
	}
	if _, err := l.OpenDay(ctx, c, day, t0, t0); err != nil { // the next opener
		t.Fatal(err)
	}
	if tot := mustBalance(t, l, "c", day); tot.Target() != 2_000_000 {
		t.Fatalf("the day's target after the cut = %d; want 2000000", tot.Target())
	}
	// A day with no plan yet is left alone: it opens from the stored campaign.
	if n, err := l.PlannedDayShards(ctx, "c", "2026-11-22", t0); err != nil || n != 0 {
		t.Fatalf("PlannedDayShards of an unplanned day = %d, %v; want 0", n, err)
	}
}

// A day's shard count comes from its budget in bids once the ledger knows
// the bid: one shard per lease.BidsPerShard bids, at least one, at most the
// campaign's. Each shard may stand a bid ahead of the curve, so a small
// campaign split eight ways ran its evening hours at twice its curve's share.
func TestSmallBudgetGetsFewerShards(t *testing.T) {
	l, _ := newLedger(t)
	const bid = 5_000
	for _, tc := range []struct {
		bids   int64
		shards int
	}{
		{bids: 20, shards: 1},
		{bids: lease.BidsPerShard - 1, shards: 1},
		{bids: 3*lease.BidsPerShard + lease.BidsPerShard/2, shards: 3},
		{bids: 100 * lease.BidsPerShard, shards: 8}, // the campaign's own count
	} {
		id := "c" + strconv.FormatInt(tc.bids, 10)
		if _, err := l.PutCampaign(ctx, campaign(id, tc.bids*bid, 8)); err != nil {
			t.Fatal(err)
		}
		if err := l.SetBid(ctx, id, bid); err != nil {
			t.Fatal(err)
		}
		n, err := l.OpenDay(ctx, campaign(id, tc.bids*bid, 8), "2026-11-21", t0, t0)
		if err != nil || n != tc.shards {
			t.Errorf("%d bids: OpenDay = %d shards, %v; want %d", tc.bids, n, err, tc.shards)
		}
	}
	// Before any bid is known, the campaign's count.
	if _, err := l.PutCampaign(ctx, campaign("nobid", 20*bid, 8)); err != nil {
		t.Fatal(err)
	}
	if n, err := l.OpenDay(ctx, campaign("nobid", 20*bid, 8), "2026-11-21", t0, t0); err != nil || n != 8 {
		t.Errorf("no bid yet: OpenDay = %d shards, %v; want the campaign's 8", n, err)
	}
}
