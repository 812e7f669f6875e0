package sim

import (
	"bytes"
	"context"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

// One end-to-end run of the smoke scenario on a real redis-server. Its
// reconciler advances each master's watermark at every step, as
// production's does at every pass, not only at its own steps (a minute
// apart here): the daemons' idle checks, and a restore's detection, follow
// the watermark's moves.
func TestSmokeScenario(t *testing.T) {
	if _, err := redisproc.Binary(""); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	res := runScenario(t, "../configs/scenarios/smoke.yaml", Options{RedisAddr: srv.Socket})
	l := lease.New(srv.Client(), lease.Config{}, nil)
	masters, err := l.Masters(context.Background())
	if err != nil || len(masters) != 1 {
		t.Fatalf("masters %v, %v; want the one redis-server", masters, err)
	}
	steps := int64(res.SimulatedHours * float64(time.Hour) / float64(10*time.Second)) // smoke's step
	if w, ok, err := l.ReadWatermark(context.Background(), masters[0]); err != nil || !ok || w.Counter < steps {
		t.Errorf("watermark %v (set %v, err %v) after %d steps; want it advanced at every step", w, ok, err, steps)
	}
	for _, c := range res.Campaigns {
		q := c.Results[StrategyPacer]
		t.Logf("%s: pacer utilisation %.4f overspend %d tracking max %.4f cmds/1000 %.2f; lua %.4f batch %.4f",
			c.ID, q.Utilisation, q.OverspendMicros, q.TrackingMax, q.CmdsPer1000,
			c.Results[StrategyLua].Utilisation, c.Results[StrategyBatch].Utilisation)
		if q.OverspendMicros > 0 {
			t.Errorf("%s: pacer overspent %d micros", c.ID, q.OverspendMicros)
		}
		if q.Utilisation < 0.98 || q.Utilisation > 1 {
			t.Errorf("%s: pacer utilisation %.4f, want 0.98..1", c.ID, q.Utilisation)
		}
		if q.TrackingMax > 0.03 {
			t.Errorf("%s: pacer tracking error %.4f > 3%%", c.ID, q.TrackingMax)
		}
		if c.LuaKeyMatches != nil && !*c.LuaKeyMatches { // nil: a call failed (a lost reply on a loaded machine), not judged
			t.Errorf("%s: the Lua baseline's counted spend does not match its Redis key", c.ID)
		}
		if c.BatchKeysMatch != nil && !*c.BatchKeysMatch { // nil: a flush failed (a lost reply on a loaded machine), not judged
			t.Errorf("%s: the batching baseline's counted spend does not match its Redis keys", c.ID)
		}
		if l := c.Results[StrategyLua]; l.OverspendMicros > 0 || l.CmdsPer1000 < 1000 {
			t.Errorf("%s: Lua baseline overspend %d, cmds/1000 %.1f", c.ID, l.OverspendMicros, l.CmdsPer1000)
		}
		if c.Ledger.Spent < q.SpentMicros {
			t.Errorf("%s: ledger spent %d < generator's %d", c.ID, c.Ledger.Spent, q.SpentMicros)
		}
		// The fairness figures: shares of the spend and of the SPENDs asked,
		// one per host, each summing to 1; the gap between them and the
		// sampling error in points.
		var spend, asked float64
		for i := range q.HostShares {
			spend += q.HostShares[i]
			asked += q.HostRequestShares[i]
		}
		if len(q.HostShares) != len(res.Hosts) || len(q.HostRequestShares) != len(res.Hosts) || math.Abs(spend-1) > 1e-9 || math.Abs(asked-1) > 1e-9 {
			t.Errorf("%s: host shares %v of the spend and %v of the SPENDs; want one per host (%d), each summing to 1", c.ID, q.HostShares, q.HostRequestShares, len(res.Hosts))
		}
		if c.OracleUtilisation < 0.98 || c.OracleUtilisation > 1 {
			t.Errorf("%s: the curve oracle spent %.4f of the budget; want 0.98..1 (the smoke campaigns' traffic reaches their curves)", c.ID, c.OracleUtilisation)
		}
		// The day's demand as asked: what its SPENDs asked for, over the
		// budget; at least what was spent, and for these campaigns (hundreds
		// of SPENDs a second) their configured demand to a few percent.
		if q.DemandAsked < q.Utilisation || math.Abs(q.DemandAsked-c.Demand) > 0.05*c.Demand {
			t.Errorf("%s: demand asked %.3fx; want at least the %.3f spent and within 5%% of the configured %.2fx", c.ID, q.DemandAsked, q.Utilisation, c.Demand)
		}
		if q.HostShareNoise <= 0 || q.HostShareNoise > 50 || q.HostShareAskedDev < 0 || q.HostShareAskedDev > 100 {
			t.Errorf("%s: host share sampling error %.2f points, gap to the SPENDs asked %.2f points", c.ID, q.HostShareNoise, q.HostShareAskedDev)
		}
	}
	var md bytes.Buffer
	if err := res.WriteMarkdown(&md, ""); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md.Bytes(), []byte("| goal | over | campaigns | meeting it | worst | campaign |")) {
		t.Error("results.md has no worst-case table with the count meeting each goal")
	}
	if err := res.WriteFiles(t.TempDir(), "."); err != nil {
		t.Fatal(err)
	}
}

// A warm-up runs the fleet the day before, uncounted: the measured day's
// SPENDs are one day's arrivals, and the money figures hold as without one.
func TestWarmupIsNotCounted(t *testing.T) {
	warm := 6 * time.Hour
	res := runScenario(t, "../configs/scenarios/smoke.yaml", Options{Warmup: &warm})
	if res.WarmupHours != 6 || !res.Start.Equal(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)) || res.SimulatedHours != 24 {
		t.Fatalf("warm-up %vh, start %v, %vh simulated; want 6h before 2026-11-21 and its 24h", res.WarmupHours, res.Start, res.SimulatedHours)
	}
	// 40 + 20 SPENDs a second for a day; a counted warm-up would add a quarter.
	const day = 60 * 86400
	if n := res.Summary[StrategyPacer].Spends; n < day*95/100 || n > day*105/100 {
		t.Errorf("%d pacer SPENDs counted; want one day's, about %d", n, day)
	}
	for _, c := range res.Campaigns {
		q := c.Results[StrategyPacer]
		if q.OverspendMicros > 0 || q.Utilisation < 0.98 {
			t.Errorf("%s: pacer overspend %d, utilisation %.4f", c.ID, q.OverspendMicros, q.Utilisation)
		}
	}
}

// The simulator runs pacerd's own reconciler, which rebalances shards: the
// late-peak campaign's shards drift apart while it is behind its curve all
// afternoon, and those that catch up first run dry while the laggards may
// release what they hold only at the catch-up pace. Settling alone (the
// simulator's reconciler until 2026-11-26) ended its day with up to 3.1% of
// its budget locked (seeds 1-6, 96.89-99.41% spent); with the moves,
// 99.95-99.99%.
func TestLatePeakIsRebalanced(t *testing.T) {
	res, c := spendsItsDay(t, "../configs/scenarios/late-peak.yaml", Options{})
	t.Logf("rebalanced %d micros, reconciler commands %d", c.Ledger.Rebalanced, res.Redis.Reconciler)
	if c.Ledger.Rebalanced <= 0 {
		t.Error("no budget moved between the shards: the reconciler did not rebalance")
	}
}

// A busy campaign behind its curve catches up on all its shards together:
// the reconciler refills a shard left below three quarters of its
// siblings' mean remaining budget, so none is back on its plan (releasing at
// 1x) while others still hold what is due. With the old threshold (a
// quarter), 98.3% spent (98.9-99.5% on seeds 1-3); with three quarters,
// 99.98-99.99%.
//
// Its fleet catches up at its multiple (3x) between its three hosts, each
// targeting its share of the fleet's window, with no headroom on top
// (package pace, condition 2): its worst 5-minute window spends at most
// catchUpMargin of the "catch-up" invariant's bound (1.1 x 3 x the plan
// and four bids a host). With each host's headroom over the catch-up, the
// hosts' spend credits ran the windows after the flash crowd at 10:00 and
// the curve's step down at 22:00 up to 0.97-1.00 of it (seeds 1-5 and 7);
// with it over the pace only, 0.85-0.90.
func TestUnevenShardsCatchUpTogether(t *testing.T) {
	_, c := spendsItsDay(t, "../configs/scenarios/uneven-catch-up.yaml", Options{})
	t.Logf("rebalanced %d micros, left locked or available at the end %d; worst catch-up window %.3f of its bound",
		c.Ledger.Rebalanced, c.Ledger.Unreleased, c.CatchUpMaxRatio)
	if c.CatchUpMaxRatio > catchUpMargin {
		t.Errorf("a 5-minute window spent %.3f of the catch-up bound; want at most %.2f: the fleet catches up at its multiple, not a credit above it",
			c.CatchUpMaxRatio, catchUpMargin)
	}
}

// catchUpMargin is the most of the catch-up invariant's bound a fleet
// catching up at its multiple spends in a 5-minute window: the bound's
// slack (1.1) is for what the hosts hold at the window's start, not for a
// rate above the multiple.
const catchUpMargin = 0.93

// A campaign whose smallest host is sparse at the end of the day, while the
// others are not, spends its budget: no shard's release point is pinned
// near the curve's end, where it released nothing to the other hosts until
// midnight.
func TestEndOfDayLeadDoesNotStrandBudget(t *testing.T) {
	_, c := spendsItsDay(t, "../configs/scenarios/end-of-day-lead.yaml", Options{})
	t.Logf("left locked or available at the end %d micros, last hour %.2fx the plan's", c.Ledger.Unreleased, c.Results[StrategyPacer].LastHourRatio)
}

// A campaign whose traffic is unlike its configured curve (family seed 7's
// f01: a night peak 10x its trough), paced by curve: auto after a warm-up
// day: the fleet fits the day's curve to the demand it recorded the day
// before and spends its budget (99.99%; paced flat, 69%).
func TestAutoCurveFollowsTheTraffic(t *testing.T) {
	var trace bytes.Buffer
	_, c := spendsItsDay(t, "../configs/scenarios/auto-curve.yaml", Options{Trace: &trace})
	q := c.Results[StrategyPacer]
	// The traffic puts 72% of its SPENDs before 08:00; a flat curve, 33%.
	var night float64
	for _, s := range q.PlanHourShares[:8] {
		night += s
	}
	if night < 0.6 {
		t.Errorf("the day's curve gives 00:00-08:00 %.0f%% of the budget; the traffic, 72%%: not fitted to it", 100*night)
	}
	t.Logf("the day's curve: %.0f%% before 08:00; tracking error max %.2f%%", 100*night, 100*q.TrackingMax)

	// The trace: a line per SPEND of the measured day, and each minute a
	// line per shard.
	var spends, shards int
	for line := range strings.Lines(trace.String()) {
		switch {
		case strings.Contains(line, " answer="):
			spends++
		case strings.Contains(line, " shard=") && strings.Contains(line, " ahead="):
			shards++
		}
	}
	if want := int(c.Allowed + c.Paced + c.Exhausted + c.Errors); spends != want {
		t.Errorf("trace: %d SPEND lines, want %d", spends, want)
	}
	if want := 24 * 60 * 8; shards < want {
		t.Errorf("trace: %d shard lines, want a line per shard (8) a minute, %d", shards, want)
	}
}

// A campaign sparse all day and busy in its last hour, which its fitted
// curve gives a fifth of the day, spends its budget: its sparse hosts' lead
// no longer moves a shard's release point half an hour into that hour,
// where its busy hosts' calls released nothing (97.2-97.6% spent on seed 4
// before 2026-11-26, 99.85-99.90% after).
func TestSteepLastHourIsSpent(t *testing.T) {
	_, c := spendsItsDay(t, "../configs/scenarios/steep-last-hour.yaml", Options{})
	t.Logf("left locked or available at the end %d micros, leased at midnight %d", c.Ledger.Unreleased, c.Ledger.LeasedAtDayEnd)
}

// spendsItsDay runs a one-campaign scenario and checks the money (balanced
// ledger, no overspend) and that the campaign spent at least 99.5% of its
// budget, the goal where the curve oracle reaches it.
func spendsItsDay(t *testing.T, path string, opt Options) (*Results, *CampaignResult) {
	t.Helper()
	res := runScenario(t, path, opt)
	c := res.Campaigns[0]
	q := c.Results[StrategyPacer]
	t.Logf("%s: utilisation %.4f (the curve oracle %.4f)", c.ID, q.Utilisation, c.OracleUtilisation)
	if q.OverspendMicros > 0 {
		t.Errorf("overspent %d micros", q.OverspendMicros)
	}
	if q.Utilisation < 0.995 {
		t.Errorf("utilisation %.4f, want >= 0.995 (the curve oracle reaches %.4f)", q.Utilisation, c.OracleUtilisation)
	}
	return res, c
}

// A host whose SPENDs of a small budget come minutes apart keeps no
// standing bid that leaves the other hosts' SPENDs no room in front of the
// curve (pace.StandingFits, condition 9): the ledger counts what hosts hold
// against its advance. The tiny scenario's seed 9 keeps every invariant
// (runScenario). Before, its b100-01 fell 1.15x the "behind" bound behind
// at 11:36: one host's standing bid (4,151 asked) stood unspent from 10:56
// to 11:21 at the shard's advance of 3,105 micros, and SPENDs of 2,412,
// 2,853 and 3,795 were paced.
func TestStandingBidLeavesOtherHostsRoom(t *testing.T) {
	res := runScenario(t, "../configs/scenarios/tiny.yaml", Options{Seed: 9})
	for _, c := range res.Campaigns {
		if c.ID == "b100-01" {
			t.Logf("%s: behind at most %.2f of the bound", c.ID, float64(c.BehindMaxMicros)/float64(max(c.BehindBoundMicros, 1)))
		}
	}
}

// A small budget's advance in front of its curve is two of the fleet's
// mean SPENDs less one and a half standard errors of that mean
// (pace.Advance, condition 21), the fleet's mean as the demand flushes count it: the tiny scenario's
// seed 14 keeps every invariant (runScenario). Before, at 1.5 of the
// calling host's own mean (2,024 micros, the bids' mean being 2,000), its
// b60-03 fell 1.02x the "behind" bound behind at 15:21: at 13:30, on its
// curve, the shard let 3,188 out where a SPEND of 3,276 came.
func TestAdvanceIsTheFleetsMeanBids(t *testing.T) {
	res := runScenario(t, "../configs/scenarios/tiny.yaml", Options{Seed: 14})
	for _, c := range res.Campaigns {
		if c.ID == "b60-03" {
			t.Logf("%s: behind at most %.2f of the bound", c.ID, float64(c.BehindMaxMicros)/float64(max(c.BehindBoundMicros, 1)))
		}
	}
}

// Small budgets with plentiful sparse demand (5, 20 and 50 bids a day, a
// SPEND every 2-10 minutes a host, 3 hosts) stay within two mean bids of
// their flat curve (runScenario fails on the "ahead" invariant) and still
// spend their day. Before the ledger counted what hosts hold against its
// advance, and measured it in mean bids, a 5-bid budget ran 87% of its
// budget ahead of its curve, a 20-bid one 41-43%, a 50-bid one 17-20%.
func TestSmallBudgetsFollowTheirCurve(t *testing.T) {
	res := runScenario(t, "../configs/scenarios/small-budgets.yaml", Options{})
	for _, c := range res.Campaigns {
		q := c.Results[StrategyPacer]
		t.Logf("%s: utilisation %.4f, tracking max %.4f", c.ID, q.Utilisation, q.TrackingMax)
		if q.OverspendMicros > 0 {
			t.Errorf("%s: overspent %d micros", c.ID, q.OverspendMicros)
		}
		if q.Utilisation < 0.95 {
			t.Errorf("%s: utilisation %.4f, want >= 0.95 with demand 17-260x its budget", c.ID, q.Utilisation)
		}
	}
}

// runScenario runs the scenario at path and checks that the ledger balanced.
func runScenario(t *testing.T, path string, opt Options) *Results {
	t.Helper()
	sc, err := LoadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), sc, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ConservationOK {
		t.Error("ledger conservation failed")
	}
	for _, v := range res.Violations {
		t.Errorf("pacing invariant broken: %s", v)
	}
	return res
}

// A campaign split into more shards than a bucket has feeds (bucket.MaxFeeds,
// 8) meets a fresh host at midnight: budget-bound.yaml's campaign on 16
// shards, served by one host. Its start sweep fills the bucket's feeds
// within a round; from then on a full bucket makes room for the shard due
// (the one asked longest ago) by releasing a lease it swept, not by
// renewing that lease on its own shard, which the host had asked a moment
// before (package daemon, condition 13). Renewing in place kept the host on
// the first eight shards it swept for the day's first minute, each giving a
// tick of its release: half the pace (0.50 over 2-12 s; the run exited 1).
func TestFreshHostReachesPaceOnMoreShardsThanFeeds(t *testing.T) {
	data, err := os.ReadFile("../configs/scenarios/budget-bound.yaml")
	if err != nil {
		t.Fatal(err)
	}
	one := regexp.MustCompile(`(?m)^  - \{name: bidder-(0[2-9]|1[0-9]).*\n`).ReplaceAll(data, nil)
	one = bytes.Replace(one, []byte("shards: 8}"), []byte("shards: 16}"), 1)
	sc, err := ParseScenario(one, "../configs/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Hosts) != 1 || sc.Defaults.Shards != 16 || 16 <= bucket.MaxFeeds {
		t.Fatalf("%d hosts, %d shards, %d feeds; want one host on 16 shards, more than its bucket's feeds", len(sc.Hosts), sc.Defaults.Shards, bucket.MaxFeeds)
	}
	res, err := Run(context.Background(), sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Violations {
		t.Errorf("pacing invariant broken: %s", v)
	}
	c := res.Campaigns[0]
	q := c.Results[StrategyPacer]
	t.Logf("%s: cold start %.3f of the pace, utilisation %.4f (the curve oracle %.4f)", c.ID, c.ColdStartRatio, q.Utilisation, c.OracleUtilisation)
	if !res.ConservationOK || q.OverspendMicros > 0 || c.ColdStartRatio < ColdStartShare {
		t.Errorf("conservation %v, overspent %d micros, cold start %.3f; want conservation, none, at least %.2f of the pace",
			res.ConservationOK, q.OverspendMicros, c.ColdStartRatio, ColdStartShare)
	}
}

// budget-bound.yaml's fresh fleet of 16 hosts of equal weight meets its
// campaign (8 shards, 1.5x demand) at midnight and keeps every invariant
// (runScenario), its cold start at least 0.8 of the pace: the ledger's fair
// split judges only each sweep round's regular ask (package pace, condition
// 19). With every ask split, each host gathered its part of a shard only
// when its one-shard-a-round rotation reached that shard, and the fleet
// spent 0.58 of what it could over 2-12 s (the scenario exited 1).
func TestFreshFleetOfSixteenReachesPace(t *testing.T) {
	res := runScenario(t, "../configs/scenarios/budget-bound.yaml", Options{})
	c := res.Campaigns[0]
	q := c.Results[StrategyPacer]
	t.Logf("%s: cold start %.3f of the pace, utilisation %.4f (the curve oracle %.4f)", c.ID, c.ColdStartRatio, q.Utilisation, c.OracleUtilisation)
	if len(res.Hosts) != 16 || c.ColdStartRatio < ColdStartShare {
		t.Errorf("%d hosts, cold start %.3f; want 16 fresh hosts at least %.2f of the pace", len(res.Hosts), c.ColdStartRatio, ColdStartShare)
	}
	if q.OverspendMicros > 0 {
		t.Errorf("overspent %d micros", q.OverspendMicros)
	}
}
