package daemon

import (
	"testing"
	"time"

	pacing "github.com/pacer/pacer/pace"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// sparseInterval is the mean gap between the last sparseSpends ticks that saw
// a SPEND, across the ring's wrap, and 0 before two of them.
func TestSparseIntervalOverLastSpends(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	c := &campaign{}
	record := func(at time.Duration) {
		c.demandTicks[c.demandTickN%sparseSpends] = t0.Add(at)
		c.demandTickN++
	}
	if got := c.sparseInterval(); got != 0 {
		t.Fatalf("no SPEND: interval %v, want 0", got)
	}
	record(0)
	if got := c.sparseInterval(); got != 0 {
		t.Fatalf("one SPEND: interval %v, want 0", got)
	}
	record(2 * time.Hour)
	if got := c.sparseInterval(); got != 2*time.Hour {
		t.Fatalf("two SPENDs 2h apart: interval %v, want 2h", got)
	}
	for _, at := range []time.Duration{3, 4, 10, 11, 12} { // hours; the ring keeps 10, 11, 12 and 4
		record(at * time.Hour)
	}
	if got, want := c.sparseInterval(), (12*time.Hour-4*time.Hour)/3; got != want {
		t.Fatalf("after the ring wrapped: interval %v, want %v (the last %d SPENDs)", got, want, sparseSpends)
	}
}

// unitWindowsSeen counts the windows the bid is taken over: this one if it
// had a SPEND, and those of the history that had one.
func TestUnitWindowsSeen(t *testing.T) {
	c := &campaign{}
	if n := c.unitWindowsSeen(); n != 0 {
		t.Fatalf("no SPEND: %d windows, want 0", n)
	}
	c.unitHistory[0], c.unitHistory[3] = 2_000, 1_500
	c.maxAmount.Store(3_000)
	if n := c.unitWindowsSeen(); n != 3 {
		t.Fatalf("%d windows, want 3 (two in the history, this one)", n)
	}
	if u := c.seenUnit(); u != 3_000 {
		t.Fatalf("unit %d, want the largest, 3000", u)
	}
}

// unitSpendsSeen counts the SPENDs the bid is the largest of: a window
// closed with a SPEND keeps its count beside its largest, one without keeps
// none, and the window in progress counts what it has so far.
func TestUnitSpendsSeen(t *testing.T) {
	c := &campaign{}
	t0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	c.rotateLargestSpend(t0)
	c.maxAmount.Store(2_000)
	c.windowSpends = 5
	c.rotateLargestSpend(t0.Add(largestSpendWindow))
	c.rotateLargestSpend(t0.Add(2 * largestSpendWindow)) // a window without SPENDs
	c.maxAmount.Store(1_000)
	c.windowSpends = 2
	if n, w := c.unitSpendsSeen(), c.unitWindowsSeen(); n != 7 || w != 2 {
		t.Fatalf("%d SPENDs over %d windows; want 7 over 2 (five in a closed window, two in this one)", n, w)
	}
	c.rotateLargestSpend(t0.Add(3 * largestSpendWindow))
	if c.unitHistory[1] != 1_000 || c.unitSpends[1] != 2 || c.windowSpends != 0 {
		t.Fatalf("closed window: largest %d of %d SPENDs, %d carried on; want 1000 of 2, none", c.unitHistory[1], c.unitSpends[1], c.windowSpends)
	}
}

// The ledger's advance (lease.Pace.Ahead) for a budget of 20 bids is two
// of the campaign's mean SPENDs less a margin for the mean's error, at
// least one and a half (pace.Advance, condition 21), however large its
// largest SPEND: the fleet then runs at most two mean bids ahead of its
// curve. A budget of more than a hundred bids may run 1.5% of it ahead.
// Before a host has seen many SPENDs its mean is drawn towards half the
// usual bid, so that two large first SPENDs do not set it; and never above
// the bid itself.
func TestAdvanceIsInMeanBids(t *testing.T) {
	c := &campaign{cfg: &Config{LeaseTiming: LeaseTiming{LeaseWindow: 30 * time.Second}}}
	c.fleetUnit = 4_000 // the typical largest bid: the mean is about half
	var t0 time.Time
	if got, want := c.aheadMicros(t0, nil, 20*4_000), int64(3_000); got != want {
		t.Errorf("no SPEND seen: advance %d, want 1.5 x half the bid, %d", got, want)
	}
	c.foldMeanSpend(2*9_000, 2) // two large SPENDs: drawn towards the prior
	if got := c.aheadMicros(t0, nil, 20*4_000); got <= 3_000 || got > 4_000 {
		t.Errorf("two SPENDs of 9,000: advance %d, want above 3,000 and at most the bid, 4,000", got)
	}
	c = &campaign{cfg: c.cfg, fleetUnit: 4_000}
	for range 100 {
		c.foldMeanSpend(1_000, 1)
	}
	if got, want := c.meanBid(), (64*1_000.0+8*2_000)/72; got < want-1 || got > want+1 {
		t.Errorf("mean bid %.0f after 100 SPENDs of 1,000, want %.0f (the last 64, drawn towards 2,000 as 8 would)", got, want)
	}
	// 64 SPENDs: two means less 1.5/8 of them, 1.625 of the mean bid.
	if got := c.aheadMicros(t0, nil, 20*4_000); got < 1_800 || got > 1_810 {
		t.Errorf("advance %d after 100 SPENDs of 1,000; want 1.625 x the mean bid, about 1,806", got)
	}
	c.maxAmount.Store(20_000) // one huge SPEND: the unit grows, the advance does not
	if c.unit() != 20_000 || c.aheadMicros(t0, nil, 20*4_000) > 1_810 {
		t.Errorf("one SPEND of 20,000: unit %d, advance %d; want 20,000 and at most 1,810", c.unit(), c.aheadMicros(t0, nil, 20*4_000))
	}
	if got, want := c.aheadMicros(t0, nil, 1_000*4_000), int64(60_000); got != want {
		t.Errorf("a budget of 1,000 bids: advance %d, want 1.5%% of it, %d", got, want)
	}
}

// Once a demand flush has counted the fleet's SPENDs of the day, the
// advance is taken from the fleet's mean SPEND over them and this host's
// own since its flush (advanceMean), not from this host's few: a host that
// saw four SPENDs of 1,000 of a campaign whose fleet asked 400 of 2,000
// asks for nearly two of the fleet's mean bids. A flush of another day
// counts for nothing.
func TestAdvanceTakesTheFleetsMean(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	ds := &dayState{day: bucket.Day{Key: "2026-11-21", Start: t0.Add(-12 * time.Hour), End: t0.Add(12 * time.Hour)}, b: bucket.New(1_000_000)}
	c := &campaign{cfg: &Config{LeaseTiming: LeaseTiming{LeaseWindow: 30 * time.Second}}, fleetUnit: 4_000}
	for range 4 {
		c.foldMeanSpend(1_000, 1)
	}
	own := c.aheadMicros(t0, ds, 20*4_000)
	c.fleetDay, c.fleetSpends, c.fleetMicros = "2026-11-20", 400, 400*2_000
	if got := c.aheadMicros(t0, ds, 20*4_000); got != own {
		t.Errorf("a flush of the day before: advance %d, want this host's own, %d", got, own)
	}
	c.fleetDay = ds.day.Key
	mean, n := c.advanceMean(t0, ds)
	if n != 400 || mean < 1_999 || mean > 2_001 {
		t.Errorf("fleet's mean %.0f over %d SPENDs, want 2,000 over 400", mean, n)
	}
	// Two means less 1.5/20 of them: 1.85 x 2,000.
	if got := c.aheadMicros(t0, ds, 20*4_000); got < 3_690 || got > 3_710 || got <= own {
		t.Errorf("advance %d from the fleet's 400 SPENDs of 2,000 (this host's own: %d), want about 3,700", got, own)
	}
	// This host's SPENDs since its flush count too (a denied one asked as
	// much): 400 of 2,000 and 100 of 7,000, a mean of 3,000.
	for range 100 {
		ds.b.Spend(t0, 7_000)
	}
	if mean, n := c.advanceMean(t0, ds); n != 500 || mean < 2_980 || mean > 3_000 {
		t.Errorf("with 100 SPENDs of 7,000 since the flush: mean %.0f over %d, want about 3,000 over 500", mean, n)
	}
}

// A sparse campaign's lease that goes back to the ledger unspent, with
// enough for one of its SPENDs, ends what this host took for the day's
// exhaustion: it was the day's last budget, held here and too small for the
// SPEND that found the shards empty, and it now waits in the ledger for the
// next one (tiny scenario, seed 14: that SPEND, an hour later, was told the
// day was over, 5.6% of its budget left unspent). Less than any SPEND, a
// lease of another day, or a busy campaign's crumbs change nothing.
func TestLeaseGivenBackEndsExhaustion(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	c := &campaign{cfg: &Config{LeaseTiming: LeaseTiming{LeaseWindow: 30 * time.Second}}, log: zap.NewNop()}
	c.minAmount.Store(900)
	c.demandTickN = sparseSpends // enough SPENDs seen for the smallest to count
	ds := &dayState{day: day, shards: 2, shardEmpty: []bool{true, true}}
	ds.exhausted.Store(true)
	c.day.Store(ds)
	back := func(dayKey string, shard int, unused int64) release {
		return release{key: lease.ShardKey{Campaign: "c", Day: dayKey, Shard: shard}, id: "l", amount: 2_245, unused: unused}
	}

	for _, r := range []release{back(day.Key, 1, 899), back("2026-11-20", 1, 2_245)} {
		c.gaveBack(r)
		if !ds.exhausted.Load() || !ds.shardEmpty[1] {
			t.Fatalf("gave back %d micros of day %s: exhausted %v, shard 1 empty %v; want both unchanged", r.unused, r.key.Day, ds.exhausted.Load(), ds.shardEmpty[1])
		}
	}
	c.gaveBack(back(day.Key, 1, 2_245))
	if ds.exhausted.Load() || ds.shardEmpty[1] || !ds.shardEmpty[0] {
		t.Fatalf("gave back 2,245 micros of today's shard 1: exhausted %v, shards empty %v; want not exhausted, shard 1 not empty", ds.exhausted.Load(), ds.shardEmpty)
	}

	// Having seen one SPEND, of 3,699, the host cannot tell that 2,245 are
	// less than its next: the lease ends exhaustion too. But not crumbs
	// under half that SPEND.
	ds.exhausted.Store(true)
	c.demandTickN = 1
	c.minAmount.Store(3_699)
	c.rate, c.callRate, c.rateWeight = 3_699, 1, 1e6 // one SPEND of 3,699 a million seconds ago: sparse
	c.gaveBack(back(day.Key, 0, 1_800))
	if !ds.exhausted.Load() || !ds.shardEmpty[0] {
		t.Fatalf("one SPEND of 3,699 seen, a lease gave back 1,800: exhausted %v, shard 0 empty %v; want both unchanged", ds.exhausted.Load(), ds.shardEmpty[0])
	}
	c.gaveBack(back(day.Key, 0, 2_245))
	if ds.exhausted.Load() || ds.shardEmpty[0] {
		t.Fatalf("one SPEND of 3,699 seen, a lease gave back 2,245: exhausted %v, shard 0 empty %v; want neither", ds.exhausted.Load(), ds.shardEmpty[0])
	}

	// A busy campaign (SPENDs every few seconds here) keeps its verdict.
	ds.exhausted.Store(true)
	ds.shardEmpty[1] = true
	c.rate, c.callRate, c.rateWeight = 1_000, 1, 1
	c.gaveBack(back(day.Key, 1, 2_245))
	if !ds.exhausted.Load() {
		t.Fatal("a busy campaign's lease gave back 2,245 micros: exhaustion ended; want it kept")
	}
}

// Catch-up runs at the campaign's multiple until a cap window before the
// day's last hour, then at pacing.LastHourCatchUpPermille: what the last hour
// finds available and leased out at its start was released at that pace
// too, so the hour stays within 1.5x its plan.
func TestLastHourCatchUpStartsACapWindowEarly(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	c := &campaign{cfg: &Config{LeaseTiming: LeaseTiming{CapWindow: 5 * time.Minute, CatchUp: 3}}}
	ds := &dayState{day: day}
	for _, tc := range []struct {
		before time.Duration // day.End less
		want   int64
	}{
		{12 * time.Hour, 3000},
		{65*time.Minute + time.Second, 3000},
		{65 * time.Minute, pacing.LastHourCatchUpPermille},
		{time.Hour, pacing.LastHourCatchUpPermille},
		{time.Minute, pacing.LastHourCatchUpPermille},
	} {
		if got := c.catchUpPermille(day.End.Add(-tc.before), ds); got != tc.want {
			t.Errorf("%v before the day's end: catch-up %d permille, want %d", tc.before, got, tc.want)
		}
	}
	// A campaign configured below the last hour's multiple keeps its own.
	c.cfg.CatchUp = 1
	if got := c.catchUpPermille(day.End.Add(-time.Minute), ds); got != 1000 {
		t.Errorf("catch-up 1x in the last hour: %d permille, want 1000", got)
	}
}

// The hour bound's bid (lease.Pace.HourUnit) is the campaign's usual
// largest bid, not one SPEND asked now: the fleet's bid when known, else the
// largest SPEND of this host's earlier windows, else the unit. With the
// SPEND being asked as its own allowance, a 20-bid campaign's SPEND of
// three bids went through in an hour that already held two (tiny scenario,
// 30 seeds: 304 of 360 days within twice the curve's hour, less a bid; with
// the usual bid and a refused grant no longer closing its hour, 358).
func TestHourUnitIsTheUsualBid(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	ds := &dayState{day: day, curve: bucket.Flat(24)}
	small := &settings{Campaign: lease.Campaign{DailyMicros: 80_000}}
	noon := day.Start.Add(12 * time.Hour)
	hourUnit := func(c *campaign) int64 {
		p := lease.Pace{Unit: c.unit(), CatchUpPermille: 3000}
		c.hourPace(&p, noon, small, ds)
		if p.HourPermille == 0 {
			t.Fatal("a 20-bid budget: no hour bound")
		}
		return p.HourUnit
	}
	c := &campaign{}
	c.maxAmount.Store(12_000) // this window: one SPEND of three bids
	if got := hourUnit(c); got != 12_000 {
		t.Errorf("nothing known but this window: hour unit %d, want the unit, 12000", got)
	}
	c.unitHistory[0], c.unitHistory[1] = 3_000, 4_000
	if got := hourUnit(c); got != 4_000 {
		t.Errorf("earlier windows' largest 4000: hour unit %d, want 4000, not this window's 12000", got)
	}
	c.fleetUnit = 3_500
	if got := hourUnit(c); got != 3_500 {
		t.Errorf("the fleet's bid 3500: hour unit %d, want 3500", got)
	}
	if c.unit() != 12_000 {
		t.Errorf("unit %d: the advance and standing bids still take the largest SPEND, 12000", c.unit())
	}
}

// The ledger's hour bound is asked for a campaign whose average hour is at
// most pacing.HourBoundBids of its bids, in the hour of its local day the call
// falls in, at twice the curve's share of it (the catch-up multiple if
// less), and in the day's last hour at the catch-up multiple in force (1.25x)
// and a bid over it; for a larger campaign only in the day's last hour, at
// pacing.LastHourPermille and a bid, or pacing.LastHourExactPermille and none where the
// bid is more than a fifth of the hour; never outside the day. A day that gains an hour at a
// DST change has an hour 24.
func TestHourPaceBoundsSmallBudgetsAndLastHours(t *testing.T) {
	day := bucket.DayOf(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), time.UTC)
	c := &campaign{}
	ds := &dayState{day: day, curve: bucket.Flat(24)}
	const bid = 4_000
	pace := func(daily int64, at time.Time, catchUp int64) lease.Pace {
		p := lease.Pace{Unit: bid, CatchUpPermille: catchUp}
		c.hourPace(&p, at, &settings{Campaign: lease.Campaign{DailyMicros: daily}}, ds)
		return p
	}
	small := int64(20 * bid)
	p := pace(small, day.Start.Add(13*time.Hour+30*time.Minute), 3000)
	if p.Hour != 13 || p.HourPermille != 2000 || p.HourPPB < bucket.PPB/24-1 || p.HourPPB > bucket.PPB/24+1 {
		t.Errorf("a 20-bid campaign at 13:30: hour %d, %d ppb, %d permille; want hour 13, %d ppb, 2000 permille",
			p.Hour, p.HourPPB, p.HourPermille, int64(bucket.PPB/24))
	}
	if p.HourNoBid {
		t.Errorf("a 20-bid campaign at 13:30: no bid over the hour's bound; want a bid")
	}
	if p := pace(small, day.End.Add(-time.Minute), pacing.LastHourCatchUpPermille); p.Hour != 23 || p.HourPermille != pacing.LastHourCatchUpPermille || p.HourNoBid {
		t.Errorf("its last hour: hour %d, %d permille, no bid %v; want 23, %d permille and a bid over it",
			p.Hour, p.HourPermille, p.HourNoBid, int64(pacing.LastHourCatchUpPermille))
	}
	if p := pace(pacing.HourBoundBids*24*bid, day.Start.Add(time.Hour), 3000); p.HourPermille != 2000 {
		t.Errorf("a campaign of %d bids an hour: %d permille, want the bound", pacing.HourBoundBids, p.HourPermille)
	}
	large := int64(pacing.HourBoundBids*24*bid + 1)
	if p := pace(large, day.End.Add(-time.Hour), pacing.LastHourCatchUpPermille); p.Hour != 23 || p.HourPermille != pacing.LastHourExactPermille ||
		!p.HourNoBid || p.HourPPB < bucket.PPB/24-1 || p.HourPPB > bucket.PPB/24+1 {
		t.Errorf("a campaign of more bids an hour, whose bid is more than a fifth of its last hour, at 23:00: hour %d, %d ppb, %d permille, no bid %v; want 23, %d ppb, %d permille, no bid",
			p.Hour, p.HourPPB, p.HourPermille, p.HourNoBid, int64(bucket.PPB/24), int64(pacing.LastHourExactPermille))
	}
	// 1.3x and a bid is less than 1.5x once the bid is under a fifth of the hour.
	larger := int64(6 * 24 * bid)
	if p := pace(larger, day.End.Add(-time.Hour), pacing.LastHourCatchUpPermille); p.Hour != 23 || p.HourPermille != pacing.LastHourPermille || p.HourNoBid {
		t.Errorf("a campaign whose bid is a sixth of its last hour, at 23:00: hour %d, %d permille, no bid %v; want 23, %d permille and a bid",
			p.Hour, p.HourPermille, p.HourNoBid, int64(pacing.LastHourPermille))
	}
	for _, tc := range []struct {
		name  string
		daily int64
		at    time.Time
	}{
		{"a campaign of more bids an hour", large, day.Start.Add(time.Hour)},
		{"the same, at 22:59:59", large, day.End.Add(-time.Hour - time.Second)},
		{"before the day", small, day.Start.Add(-time.Second)},
		{"at its end", small, day.End},
	} {
		if p := pace(tc.daily, tc.at, 3000); p.HourPermille != 0 || p.Hour != 0 || p.HourPPB != 0 {
			t.Errorf("%s: hour %d, %d ppb, %d permille; want no bound", tc.name, p.Hour, p.HourPPB, p.HourPermille)
		}
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	long := bucket.DayOf(time.Date(2026, 10, 25, 12, 0, 0, 0, berlin), berlin) // 25 hours
	ds = &dayState{day: long, curve: bucket.Flat(24)}
	if p := pace(small, long.End.Add(-time.Minute), 1250); p.Hour != 24 || p.HourPermille != 1250 || p.HourNoBid {
		t.Errorf("the last hour of a 25-hour day: hour %d, %d permille, no bid %v; want 24, the catch-up's 1250, a bid",
			p.Hour, p.HourPermille, p.HourNoBid)
	}
	if p := pace(small, long.End.Add(-time.Hour-time.Minute), 1250); p.Hour != 23 || p.HourPermille != 1250 || p.HourNoBid {
		t.Errorf("the hour before it: hour %d, %d permille, no bid %v; want 23, the catch-up's 1250, a bid", p.Hour, p.HourPermille, p.HourNoBid)
	}
	if p := pace(larger, long.End.Add(-time.Minute), 1250); p.Hour != 24 || p.HourPermille != pacing.LastHourPermille {
		t.Errorf("the last hour of a 25-hour day, a larger campaign: hour %d, %d permille; want 24, %d", p.Hour, p.HourPermille, int64(pacing.LastHourPermille))
	}
}

// The controller's standing-bid rules count the SPENDs the host keeps for
// its interval: the daemon's ring of them must be as long.
func TestSparseSpendsAreTheControllers(t *testing.T) {
	if sparseSpends != pacing.StandingSpends {
		t.Errorf("the daemon keeps its last %d SPENDs; pace.StandsHere counts %d", sparseSpends, pacing.StandingSpends)
	}
}
