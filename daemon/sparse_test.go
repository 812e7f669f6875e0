package daemon_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/lease"
)

// Issue 10: a campaign of about 100 bids a day, its 150 SPENDs spread at
// random over three hosts, spends nearly all of its budget, never more, and
// never gets -1 while budget is left. Before standing leases, the one-bid
// advance and the bid-sized shard count it spent nothing: every sparse SPEND
// met an empty bucket, and no shard ever held a whole bid until midnight.
func TestSparseCampaignSpendsItsBudget(t *testing.T) {
	const bid = 2_000
	const budget = 100 * bid
	f := newFixture(t)
	f.campaignWithBid(t, "sparse", budget, 8, bid) // as pacerctl campaign set --bid does
	hosts := []string{"a", "b", "c"}
	daemons := make([]*daemon.Daemon, len(hosts))
	for i, h := range hosts {
		// A SPEND's fetch gets a second of wall time, not the default 5 ms,
		// which a loaded machine's fsync can miss (87% spent at load ~15).
		daemons[i] = f.sparseDaemon(t, h, time.Second)
	}
	rng := rand.New(rand.NewPCG(10, 10))
	// 150 SPENDs of one bid at random instants of the day (1.5x the budget).
	var at []time.Duration
	for range 150 {
		at = append(at, time.Duration(rng.Int64N(int64(24*time.Hour-time.Minute))))
	}
	const step = 10 * time.Second
	var allowed int64
	var exhaustedWithBudgetLeft int
	for now := time.Duration(0); now < 24*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		for _, d := range daemons {
			d.Step(ctx)
		}
		for _, a := range at {
			if a < now || a >= now+step {
				continue
			}
			d := daemons[rng.IntN(len(daemons))]
			dec, err := d.Spend("sparse", bid, "")
			if err != nil {
				t.Fatal(err)
			}
			switch dec {
			case pacer.Allowed:
				allowed += bid
			case pacer.Exhausted:
				if allowed < budget {
					exhaustedWithBudgetLeft++
				}
			}
		}
	}
	t.Logf("allowed %d of %d micros (%.1f%%); -1 with budget left: %d", allowed, budget, 100*float64(allowed)/budget, exhaustedWithBudgetLeft)
	if allowed > budget {
		t.Fatalf("allowed %d micros, over the budget of %d", allowed, budget)
	}
	if allowed < budget*90/100 {
		t.Fatalf("allowed %d micros, under 90%% of the budget of %d", allowed, budget)
	}
	if exhaustedWithBudgetLeft > 0 {
		t.Fatalf("%d SPENDs were told the day is over while budget was left", exhaustedWithBudgetLeft)
	}
	f.Check(t, "sparse")
}

// Issue 10's smoothness on a tiny budget: a campaign of 20 bids a day on a
// flat curve, over-demanded (about 10x, a SPEND every 2 minutes somewhere in
// the fleet of three hosts), stays within a bid per host (their standing
// bids) and the ledger's one-bid advance of its curve in every hour. A sparse
// host's top-ups used to open a new lease per SPEND, up to six, each spent
// whole but reported to the ledger only when it ended, so the ledger saw
// nothing spent and kept advancing a bid at each top-up: the fleet ran up to
// six bids per host ahead, spent its day by early afternoon and held the
// rest idle at midnight.
func TestTinyBudgetStaysNearItsCurve(t *testing.T) {
	const bid = 2_000
	const bids = 20
	const budget = bids * bid
	f := newFixture(t)
	f.campaignWithBid(t, "tiny", budget, 8, bid)
	hosts := []string{"a", "b", "c"}
	daemons := make([]*daemon.Daemon, len(hosts))
	for i, h := range hosts {
		daemons[i] = f.daemon(t, h)
	}
	rng := rand.New(rand.NewPCG(11, 11))
	const step = 10 * time.Second
	var byHour [24]int64 // micros allowed
	for now := time.Duration(0); now < 24*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		for _, d := range daemons {
			d.Step(ctx)
		}
		if rng.IntN(12) != 0 { // a SPEND every 2 minutes on average
			continue
		}
		dec, err := daemons[rng.IntN(len(daemons))].Spend("tiny", bid, "")
		if err != nil {
			t.Fatal(err)
		}
		if dec == pacer.Allowed {
			byHour[now/time.Hour] += bid
		}
	}
	var allowed, worst int64
	worstHour := 0
	for h, v := range byHour {
		allowed += v
		if v > worst {
			worst, worstHour = v, h
		}
	}
	var bidsByHour [24]int64
	for h, v := range byHour {
		bidsByHour[h] = v / bid
	}
	t.Logf("allowed %d of %d micros; bids by hour: %v", allowed, budget, bidsByHour)
	if allowed > budget {
		t.Fatalf("allowed %d micros, over the budget of %d", allowed, budget)
	}
	// Issue 10: at least 97% of a budget of 20 or more bids under 1.5x its
	// demand or more; here that is every bid. Three hosts each holding part
	// of a bid at midnight left 10% unspent.
	if allowed < budget*97/100 {
		t.Errorf("allowed %d micros, under 97%% of the budget of %d", allowed, budget)
	}
	// An hour's plan is 20/24 of a bid; the fleet may hold a standing bid per
	// host and the ledger advance one more: 4 bids and the plan, rounded up.
	if limit := int64(len(hosts)+2) * bid; worst > limit {
		t.Errorf("hour %d allowed %d bids; want at most %d (the hour's plan, a standing bid per host and the one-bid advance)",
			worstHour, worst/bid, limit/bid)
	}
	f.Check(t, "tiny")
}

// With standing bids (lease.sparse_wait off): a sparse campaign on its
// curve, whose hosts each hold a standing bid, stays within its ledger
// advance (lease.Pace.Ahead) of its curve all day, leases held included,
// and still spends its day: its last bids wait for the curve's last Ahead,
// then for no curve. Here: 144 bids, flat curve, a SPEND every ~6.7 minutes
// somewhere on three hosts (1.5x the budget, about one every 20 minutes per
// host): 1.5 bids ahead at most, 142 bids allowed by midnight (two held
// unspent). Led up to half an hour ahead of its curve, as sparse hosts
// were, it ran 3.9 bids ahead (143 allowed).
func TestSparseStandingCampaignStaysNearItsCurve(t *testing.T) {
	const bid = 2_000
	const budget = 144 * bid
	f := newFixture(t)
	f.campaignWithBid(t, "s", budget, 8, bid)
	daemons := make([]*daemon.Daemon, 3)
	for i := range daemons {
		daemons[i] = f.standingDaemon(t, string(rune('a'+i)))
	}
	rng := rand.New(rand.NewPCG(21, 21))
	const step = 10 * time.Second
	var allowed, worst int64
	for now := time.Duration(0); now < 24*time.Hour-step; now += step {
		f.Clock.Set(midnight.Add(now))
		for _, d := range daemons {
			d.Step(ctx)
		}
		due := int64(float64(budget) * now.Hours() / 24)
		worst = max(worst, allowed-due)
		if rng.IntN(40) != 0 {
			continue
		}
		dec, err := daemons[rng.IntN(len(daemons))].Spend("s", bid, "")
		if err != nil {
			t.Fatal(err)
		}
		if dec == pacer.Allowed {
			allowed += bid
		}
		worst = max(worst, allowed-due)
	}
	tot, err := f.Ledger.DayTotals(ctx, "s", day)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("at 23:59:50: %d bids allowed, %.2f bids still locked, %.2f available, %.2f leased; at most %.2f bids ahead of the curve",
		allowed/bid, float64(tot.Locked)/bid, float64(tot.Available)/bid, float64(tot.Leased)/bid, float64(worst)/bid)
	if limit := 2 * bid; worst > int64(limit) {
		t.Errorf("the fleet ran %.2f bids ahead of its curve; want at most two (mean) bids", float64(worst)/bid)
	}
	if allowed < budget-2*bid {
		t.Errorf("%d of %d bids allowed by midnight; want all but two at most", allowed/bid, budget/bid)
	}
}

// Issue 10, with standing bids (lease.sparse_wait off): a host that sees a
// campaign every few hours keeps its standing bid across a gap longer than standing_idle (6 h) when its recent SPENDs
// came that far apart: three of its mean intervals, at most a day. Before,
// the bid lapsed 6 h after the host's last SPEND (the 20-bid campaigns of
// the simulator lost a SPEND on each such host), and the next SPEND there
// met an empty bucket. A host whose SPENDs came minutes apart still lets
// its bid go after standing_idle.
func TestSlowHostKeepsItsStandingBidAcrossLongGaps(t *testing.T) {
	const bid = 2_000
	f := newFixture(t)
	f.Campaign(t, "slow", 40*bid, 1)
	f.Campaign(t, "quick", 40*bid, 1)
	for _, id := range []string{"slow", "quick"} {
		if err := f.Ledger.SetBid(ctx, id, bid); err != nil {
			t.Fatal(err)
		}
	}
	d := f.standingDaemon(t, "a")
	// slow: SPENDs at 00:30, 04:30, 08:30, then none until 16:00 (7.5 h).
	// quick: SPENDs at 00:30, 00:35, 00:40, then none until 07:00.
	spends := map[time.Duration][]pacer.CampaignID{
		30 * time.Minute: {"slow", "quick"}, 35 * time.Minute: {"quick"}, 40 * time.Minute: {"quick"},
		4*time.Hour + 30*time.Minute: {"slow"}, 8*time.Hour + 30*time.Minute: {"slow"},
	}
	const step = 10 * time.Second
	for now := time.Duration(0); now <= 16*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		d.Step(ctx)
		for _, id := range spends[now] {
			if _, err := d.Spend(id, bid/2, ""); err != nil {
				t.Fatal(err)
			}
		}
		if now == 7*time.Hour {
			if b, _ := d.Balance("quick"); b.Tokens+b.Reserve >= bid/2 {
				t.Errorf("quick: at 07:00, 6h20m after its last SPEND 5 minutes apart, the host still holds %d micros; want its standing bid given back", b.Tokens+b.Reserve)
			}
		}
	}
	b, err := d.Balance("slow")
	if err != nil {
		t.Fatal(err)
	}
	if b.Tokens < bid/2 {
		t.Fatalf("slow: at 16:00, 7.5 h after its last SPEND (they came 4 h apart), the host holds %d micros; want its standing bid (>= %d)", b.Tokens, bid/2)
	}
	if dec, err := d.Spend("slow", bid/2, ""); err != nil || dec != pacer.Allowed {
		t.Fatalf("slow: SPEND at 16:00 = %v, %v; want allowed from the standing bid", dec, err)
	}
	f.Check(t, "slow")
	f.Check(t, "quick")
}

// Issue 10: a host that has seen a campaign's SPENDs in fewer than four
// windows does not report its bid: the operator's (or the fleet's) stays.
// A sparse host's one SPEND, reported, became the fleet's bid, and every
// host then held standing bids the next, slightly larger SPEND did not fit.
func TestFewSpendsDoNotOverwriteTheFleetsBid(t *testing.T) {
	const bid = 4_000
	f := newFixture(t)
	f.campaignWithBid(t, "few", 40*bid, 1, bid)
	d := f.daemon(t, "a")
	const step = 10 * time.Second
	for now := time.Duration(0); now <= 2*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		d.Step(ctx)
		if now == 10*time.Minute || now == 70*time.Minute {
			if _, err := d.Spend("few", 1_000, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := f.Ledger.Bid(ctx, "few")
	if err != nil {
		t.Fatal(err)
	}
	if got != bid {
		t.Fatalf("after two SPENDs of 1000 on one host, the ledger's bid is %d; want the operator's %d", got, bid)
	}
	f.Check(t, "few")
}

// A host's bid moves the fleet's (the operator's here) only as the largest
// of at least 19 SPENDs (pace.ReportsBid, condition 20): the largest of
// fewer is most often below the campaign's usual largest, or one outlier.
// The fleet's bid sizes the ledger's one-bid advance, what a shard far
// behind its plan holds available, and every host's prior for the mean
// SPEND (tiny seed 7: one host's four SPENDs, the largest 1,822, replaced a
// bid of 4,019, and another host's fetch of 3,182 was refused an advance of
// 1,847; seed 13: one host's eight, the largest 2,182, and a shard far
// behind held 2,182 where a SPEND of 2,742 came; seed 16, with bids lowered
// only from 19 SPENDs: one SPEND of 8,892 raised it for the day, and a host
// that opened the campaign later ran 4,808 micros ahead of its curve). A
// host with a SPEND a window never moves it; one with three a window
// lowers it once it has eight windows, and one with five a window raises
// it after four. Before, eight windows of one SPEND of 1,800 lowered the
// ledger's bid to 1,800, and one SPEND of 9,000 in four windows raised it.
func TestFewWindowsDoNotLowerTheFleetsBid(t *testing.T) {
	const bid = 4_000
	f := newFixture(t)
	for _, id := range []string{"sparse", "outlier", "busy", "raise"} {
		f.campaignWithBid(t, id, 40*bid, 1, bid)
	}
	d := f.daemon(t, "a")
	const step = 10 * time.Second
	ledgerBid := func(id string) int64 {
		t.Helper()
		got, err := f.Ledger.Bid(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	spend := func(id pacer.CampaignID, amount int64) {
		t.Helper()
		if _, err := d.Spend(id, pacer.Micros(amount), ""); err != nil {
			t.Fatal(err)
		}
	}
	// SPENDs every 10 minutes, each time in a window of its own.
	for now := time.Duration(0); now <= 3*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		d.Step(ctx)
		if now > 0 && now%(10*time.Minute) == 0 {
			spend("sparse", 1_800)
			if now == 10*time.Minute {
				spend("outlier", 9_000)
			} else {
				spend("outlier", 1_800)
			}
			for range 3 {
				spend("busy", 1_800)
			}
			if now <= 40*time.Minute {
				for range 5 {
					spend("raise", 5_000)
				}
			}
		}
		if now == 75*time.Minute { // SPENDs in seven windows, 21 of them on "busy"
			if got := ledgerBid("busy"); got != bid {
				t.Fatalf("after 21 SPENDs of 1,800 in seven windows, the ledger's bid is %d; want the operator's %d", got, bid)
			}
		}
	}
	if got := ledgerBid("sparse"); got != bid {
		t.Errorf("after a SPEND of 1,800 in each of 18 windows, the ledger's bid is %d; want the operator's %d: the largest of eight SPENDs is no usual largest", got, bid)
	}
	if got := ledgerBid("outlier"); got != bid {
		t.Errorf("after SPENDs of 1,800 in 18 windows and one of 9,000, the ledger's bid is %d; want the operator's %d: one SPEND is no usual largest", got, bid)
	}
	if got := ledgerBid("busy"); got != 1_800 {
		t.Errorf("after three SPENDs of 1,800 in each of 18 windows, the ledger's bid is %d; want 1,800: a campaign whose bids fell", got)
	}
	if got := ledgerBid("raise"); got != 5_000 {
		t.Errorf("after five SPENDs of 5,000 in each of four windows, the ledger's bid is %d; want 5,000", got)
	}
	for _, id := range []string{"sparse", "outlier", "busy", "raise"} {
		f.Check(t, id)
	}
}

// A 20-bid campaign's SPEND of eight bids is refused by the hour's bound,
// and the hour stays open to its ordinary bids. Before, the daemon's bid for
// the bound was its largest recent SPEND, this one included, so the SPEND
// was its own allowance (a 6.6x hour in the simulator's tiny scenario; here
// hour 10 allowed eight bids). That a grant refused after the ledger released
// the hour's room for it does not use the hour up is the ledger's
// TestHourBoundRefusedGrantLeavesTheHourOpen. Flat curve, a bid of 2,000
// (the fleet's), a SPEND of one bid every 72 minutes (the curve's pace) on
// three hosts in turn; at 10:05 one of 16,000, at 10:06 one bid again.
func TestTinyBudgetRefusesAnOutlierAndKeepsItsHour(t *testing.T) {
	const bid = 2_000
	const budget = 20 * bid
	f := newFixture(t)
	f.campaignWithBid(t, "tiny", budget, 1, bid)
	// A SPEND of this sparse campaign waits for its fetch (lease.sparse_wait)
	// at most a second of wall time, not the default 5 ms, which a fetch
	// under -race at a load of 20 outlasts (the SPEND at 10:06 was paced).
	daemons := []*daemon.Daemon{f.sparseDaemon(t, "a", time.Second), f.sparseDaemon(t, "b", time.Second), f.sparseDaemon(t, "c", time.Second)}
	var allowed, hour10 int64
	spend := func(at time.Duration, host int, amount int64) pacer.Decision {
		t.Helper()
		dec, err := daemons[host].Spend("tiny", pacer.Micros(amount), "")
		if err != nil {
			t.Fatal(err)
		}
		if dec == pacer.Allowed {
			allowed += amount
			if at/time.Hour == 10 {
				hour10 += amount
			}
		}
		return dec
	}
	const step = 10 * time.Second
	n := 0
	for now := time.Duration(0); now < 11*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		for _, d := range daemons {
			d.Step(ctx)
		}
		switch {
		case now%(72*time.Minute) == 36*time.Minute:
			spend(now, n%len(daemons), bid)
			n++
		case now == 10*time.Hour+5*time.Minute:
			if dec := spend(now, 0, 8*bid); dec != pacer.Paced {
				t.Errorf("a SPEND of eight bids at 10:05: %v, want paced (an hour of a 20-bid budget holds twice its plan and a bid)", dec)
			}
		case now == 10*time.Hour+6*time.Minute:
			if dec := spend(now, 1, bid); dec != pacer.Allowed {
				t.Errorf("a SPEND of one bid at 10:06, after the refused one: %v, want allowed (the campaign is on its curve)", dec)
			}
		}
	}
	if plan := int64(budget / 24); hour10 > 2*plan+bid {
		t.Errorf("hour 10 allowed %d micros: more than twice its plan (%d) and a bid", hour10, plan)
	}
	t.Logf("allowed %d micros by 11:00 (the curve's %d), %d in hour 10", allowed, budget*11/24, hour10)
	f.Check(t, "tiny")
}

// A host whose SPENDs of a sparse campaign stop keeps no standing bid for
// the hours after them: it stands only while its last SPEND is at most
// three of their intervals (and a standing window) ago. Judged by its last
// SPENDs' interval alone, a burst of them then none kept it standing, renewing an unspent bid every few minutes
// until midnight while other hosts' SPENDs were refused for want of it (the
// family's f00, 28 bids, seed 27: two bids held so from 22:04, 83.71% spent
// where the curve oracle spent 99.05%). A SPEND a minute for ten minutes,
// then none for half an hour, on a 2,000-bid budget from the start of its
// day (a SPEND a minute is under its pace).
func TestStandingBidEndsWhenItsSpendsStop(t *testing.T) {
	f := newFixture(t)
	const bid = 1_000
	f.campaignWithBid(t, "s", 2_000*bid, 1, bid)
	f.Clock.Set(midnight.Add(time.Minute))
	d := f.daemon(t, "h")
	var allowed int64
	for i := range 10 * 60 {
		if i%60 == 0 {
			allowed += spendAttempts(t, d, "s", bid, 1)
		}
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	if leased := f.Check(t, "s").Leased; leased == 0 || allowed == 0 {
		t.Fatalf("a SPEND a minute: %d allowed, %d leased: the case wants a host standing a bid", allowed, leased)
	}
	for range 30 * 60 {
		f.Clock.Add(time.Second)
		d.Step(ctx)
	}
	if leased := f.Check(t, "s").Leased; leased != 0 {
		t.Errorf("half an hour after its last SPEND the host still holds %d micros of the campaign", leased)
	}
}

// A host whose SPENDs fetch their leases meters its spend by its share of
// the fleet's rate as of now, not as of its last standing bid: the share
// meters took the fleet's rate from want, which a fetching host never
// reaches, so one that began its day at a night curve's pace kept it all
// day (family seed 8's f46, 171 bids on a daytime curve: its 20% host was
// credited 480 micros an hour from 07:49 and paced for hours after each
// SPEND; the campaign spent 92.08% where the curve oracle spent 99.68%).
// Two hosts, a SPEND of a bid every six minutes each (fetching, not
// standing), from 04:00 on a curve of a bid an hour until 06:00 and ten an
// hour after, twice that demanded: from 07:00 to 10:00 the fleet spends
// about its curve.
func TestFetchingHostsMeterByTheCurvesPaceNow(t *testing.T) {
	f := newFixture(t)
	const bid = 1_000
	weights := make([]float64, 24)
	for i := range weights {
		weights[i] = 10
		if i < 6 {
			weights[i] = 1
		}
	}
	curve, err := bucket.NewCurve("dawn", weights)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Ledger.PutCampaign(ctx, lease.Campaign{ID: "d", DailyMicros: 186 * bid, TZ: "UTC", Curve: "dawn", Shards: 1, State: lease.StateActive}); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(4 * time.Hour))
	var hosts []*daemon.Daemon
	for _, h := range []string{"a", "b"} {
		d, err := daemon.New(f.Ledger, daemon.Config{Holder: h, Clock: f.Clock, Curves: map[string]*bucket.Curve{"dawn": curve}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(ctx) })
		hosts = append(hosts, d)
	}
	var day int64
	for at := 4 * time.Hour; at < 10*time.Hour; at += time.Second {
		for i, d := range hosts {
			d.Step(ctx)
			if at%(6*time.Minute) == time.Duration(i)*3*time.Minute {
				if a := spendAttempts(t, d, "d", bid, 1); at >= 7*time.Hour {
					day += a
				}
			}
		}
		f.Clock.Add(time.Second)
	}
	want := int64(30 * bid) // the curve's ten bids an hour, 07:00-10:00
	if day < want*8/10 {
		t.Errorf("the fleet spent %d from 07:00 to 10:00, the curve %d: its hosts were metered by the night's pace", day, want)
	}
	t.Logf("07:00-10:00: spent %d, the curve %d", day, want)
	f.Check(t, "d")
}

// Issue 35 (the tiny scenario, seed 4): a host meets a 20-bid campaign by a
// SPEND (its first there, or its first since the campaign was dropped for
// being idle), late in the day, the campaign behind its curve. Loading the
// campaign primes a lease of the floor, four such SPENDs, which the shard
// grants (all it has left); the host is starting its supply, and its
// target, a small budget's pace, credits at once a burst window of micros.
// The lease must serve the SPEND that woke it (the start credit is at
// least the host's largest SPEND): before, it was paced, and the host held
// the campaign's remainder dripping for a lease window while the campaign
// fell a tenth of its budget behind the curve.
func TestHostMeetingASmallCampaignServesTheSpendThatWokeIt(t *testing.T) {
	const bid = 2_000
	f := newFixture(t)
	f.campaignWithBid(t, "small", 20*bid, 1, bid)
	// Another host spends a bid every 80 minutes until 20:30, then meets
	// no more: the day is 16 bids spent, 3 behind its curve at 22:45.
	h1 := f.sparseDaemon(t, "h1", time.Second)
	for i := range 16 {
		f.Clock.Set(midnight.Add(30*time.Minute + time.Duration(i)*80*time.Minute))
		h1.Step(ctx)
		if _, err := h1.Spend("small", bid, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Its SPENDs come back at 22:30 asking more than the shard has.
	f.Clock.Set(midnight.Add(22*time.Hour + 30*time.Minute))
	h1.Step(ctx)
	if _, err := h1.Spend("small", 4*bid, ""); err != nil {
		t.Fatal(err)
	}
	// The fleet's recorded bid is its hosts' largest recent SPEND: 4,000.
	// With the day's last 8,000 micros at most two such bids, the shard
	// releases them all (the last bids wait for no curve).
	if err := f.Ledger.SetBid(ctx, "small", 2*bid); err != nil {
		t.Fatal(err)
	}
	f.Clock.Set(midnight.Add(22*time.Hour + 45*time.Minute))
	d := f.sparseDaemon(t, "h2", time.Second)
	dec, err := d.Spend("small", 1_977, "")
	if err != nil {
		t.Fatal(err)
	}
	if dec != pacer.Allowed {
		bal, _ := d.Balance("small")
		t.Fatalf("the SPEND that loaded the campaign: %v (balance %+v); want allowed", dec, bal)
	}
	if bal, _ := d.Balance("small"); bal.Reserve == 0 {
		t.Fatalf("balance %+v: the premise is a primed lease larger than the SPEND, still dripping", bal)
	}
	f.Check(t, "small")
}

// Issue 35 (the tiny scenario, seed 9): a 20-bid campaign behind its curve
// at 23:00 is asked, in its last hour, for a SPEND of 1.7 bids, twice the
// hour's share. The hour's bound must admit it: a small campaign's last
// hour releases its catch-up multiple (1.25x) of its share and its usual
// bid (pace condition 8), as the curve oracle and the simulator's
// last-hour invariant (1.5x and a bid) allow. Before, that hour was bounded
// at 1.5x its share with no bid (2,500 micros here), so no SPEND over it
// could be served in it at all, and the campaign ended the day 14% of its
// budget behind. Flat curve, a bid of 2,000 (the fleet's), one host
// spending a bid every 80 minutes until 20:30 (16 bids, 3.4 behind at
// 23:20).
func TestSmallCampaignsLastHourServesABid(t *testing.T) {
	const bid = 2_000
	const budget = 20 * bid
	f := newFixture(t)
	f.campaignWithBid(t, "small", budget, 1, bid)
	d := f.sparseDaemon(t, "h", time.Second)
	for i := range 16 {
		f.Clock.Set(midnight.Add(30*time.Minute + time.Duration(i)*80*time.Minute))
		d.Step(ctx)
		if dec, err := d.Spend("small", bid, ""); err != nil || dec != pacer.Allowed {
			t.Fatalf("SPEND %d at %v: %v, %v; want allowed (the premise: its bids served until then)", i, f.Clock.Now().Format("15:04"), dec, err)
		}
	}
	f.Clock.Set(midnight.Add(23*time.Hour + 20*time.Minute))
	d.Step(ctx)
	const amount = 3_400
	share := budget / 24
	dec, err := d.Spend("small", amount, "")
	if err != nil {
		t.Fatal(err)
	}
	if dec != pacer.Allowed {
		t.Errorf("a SPEND of %d in the last hour (its share %d), the campaign %d behind its curve: %v; want allowed",
			amount, share, budget*(23*60+20)/(24*60)-16*bid, dec)
	}
	for f.Clock.Now().Before(midnight.Add(24*time.Hour - time.Second)) {
		f.Clock.Add(time.Minute)
		d.Step(ctx)
	}
	if spent := f.Check(t, "small").Spent; spent > 16*bid+int64(share)*3/2+bid {
		t.Errorf("the day spent %d: its last hour more than 1.5x its share %d and a bid", spent, share)
	}
}
