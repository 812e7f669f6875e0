package daemon_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
)

// Issue 10: under supply constraint each host's share of the spend is within
// 3 points of its share of the demand. Three daemons with 45/35/20% of a
// campaign's SPENDs, 1.5x its pace in all, 8 shards, from 00:01 (on its
// curve: nothing to catch up), for 20 minutes of an injected clock. Before
// the shards split what they release by the holders' demand, the hosts got
// 42/33/24% (4.4 points off): each asks its shards as often, and grants were
// first come, first served. Also with 2 s ticks, as pacersim steps its
// daemons, where a lease's renewal may come a tick before its end.
func TestConstrainedHostsSpendByDemand(t *testing.T) {
	for _, tick := range []time.Duration{100 * time.Millisecond, 2 * time.Second} {
		t.Run(tick.String(), func(t *testing.T) { constrainedHosts(t, tick) })
	}
}

func constrainedHosts(t *testing.T, tick time.Duration) {
	f := newFixture(t)
	const pace = 100_000 // micros a second
	const bid = 1_000
	paceCampaign(t, f, pace, time.Minute)
	const warmup, run = 3 * time.Minute, 20 * time.Minute
	allowed, _ := spendFleet(t, f, fleetHosts(t, f, tick), 1.5*pace/bid, bid, tick, warmup, run)
	total, worst := shareGap(t, allowed)
	// The fleet spends about the pace: the split holds nothing back.
	if secs := (run - warmup).Seconds(); float64(total) < 0.97*pace*secs || float64(total) > 1.03*pace*secs {
		t.Errorf("the fleet spent %d micros in %.0f s; want about the pace's %.0f", total, secs, pace*secs)
	}
	if worst > 3 {
		t.Errorf("a host's share of the spend is %.1f points from its share of the demand; want at most 3", worst)
	}
	f.Check(t, "c")
}

// tickDaemon starts a daemon on f's clock whose refill loop ticks every tick.
func tickDaemon(t *testing.T, f *fixture, holder string, tick time.Duration) *daemon.Daemon {
	t.Helper()
	// A sparse SPEND's fetch waits for its lease in real time, 5 ms by
	// default: on a loaded machine (CI runs packages side by side, with
	// -race) that decided which fetches landed in time, and moved a host's
	// share of the spend by up to four points between runs of the same test.
	// A second takes the machine's load out of it; a fetch that lands sooner
	// returns sooner.
	d, err := daemon.New(f.Ledger, daemon.Config{Holder: holder, Clock: f.Clock, TickInterval: tick, LeaseTiming: daemon.LeaseTiming{SparseWait: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(ctx) })
	return d
}

// fleetHosts starts three daemons (h1-h3) on f's clock with the given tick.
func fleetHosts(t *testing.T, f *fixture, tick time.Duration) []*daemon.Daemon {
	t.Helper()
	var ds []*daemon.Daemon
	for _, h := range []string{"h1", "h2", "h3"} {
		ds = append(ds, tickDaemon(t, f, h, tick))
	}
	return ds
}

// paceCampaign stores campaign "c" with 8 shards and a flat day of pace
// micros a second, and sets f's clock to at into the test day.
func paceCampaign(t *testing.T, f *fixture, pace int64, at time.Duration) {
	t.Helper()
	f.Campaign(t, "c", pace*86_400, 8)
	f.Clock.Set(midnight.Add(at))
}

// hostWeights are the three hosts' shares of a campaign's SPENDs.
var hostWeights = []float64{0.45, 0.35, 0.20}

// spendFleet runs ds for run on f's clock, stepping each every tick and
// sending campaign "c" SPENDs of bid at regular intervals, perSecond in all
// split by hostWeights. It returns what each host was allowed from warmup
// on, and what the fleet was allowed in each minute of the run.
func spendFleet(t *testing.T, f *fixture, ds []*daemon.Daemon, perSecond float64, bid int64, tick, warmup, run time.Duration) (allowed, perMinute []int64) {
	t.Helper()
	return spendHosts(t, f, ds, hostWeights, perSecond, bid, tick, warmup, run, nil)
}

// spendHosts is spendFleet with the hosts' shares of the SPENDs given
// (weights), and before, if not nil, called at each tick's offset into the
// run before the hosts step.
func spendHosts(t *testing.T, f *fixture, ds []*daemon.Daemon, weights []float64, perSecond float64, bid int64, tick, warmup, run time.Duration, before func(at time.Duration)) (allowed, perMinute []int64) {
	t.Helper()
	allowed = make([]int64, len(ds))
	perMinute = make([]int64, (run+time.Minute-1)/time.Minute)
	owed := make([]float64, len(ds)) // SPENDs due but not yet sent
	for i := range int(run / tick) {
		at := time.Duration(i) * tick
		if before != nil {
			before(at)
		}
		for h, d := range ds {
			d.Step(ctx)
			owed[h] += perSecond * weights[h] * tick.Seconds()
			for ; owed[h] >= 1; owed[h]-- {
				dec, err := d.Spend("c", pacer.Micros(bid), "")
				if err != nil {
					t.Fatal(err)
				}
				if dec != pacer.Allowed {
					continue
				}
				perMinute[at/time.Minute] += bid
				if at >= warmup {
					allowed[h] += bid
				}
			}
		}
		f.Clock.Add(tick)
	}
	return allowed, perMinute
}

// shareGap logs each host's share of allowed and returns the total and the
// largest gap, in points, to its share of the SPENDs (hostWeights).
func shareGap(t *testing.T, allowed []int64) (total int64, worst float64) {
	t.Helper()
	for _, a := range allowed {
		total += a
	}
	for h, a := range allowed {
		share := float64(a) / float64(total)
		t.Logf("h%d: demand share %.1f%%, spend share %.1f%%", h+1, 100*hostWeights[h], 100*share)
		worst = max(worst, 100*(share-hostWeights[h]), 100*(hostWeights[h]-share))
	}
	return total, worst
}

// The same for a campaign whose hosts keep standing bids (a SPEND every
// 10-22 s on each): a standing top-up or a fetch is a whole bid however
// small the host's share of the campaign, so the host with 20% of the
// SPENDs, at 3x the budget, was topped up at each SPEND the shards could
// serve. Before each such host waited for its share of the fleet's rate to
// cover its last bid (shareThrottle), and before an ordinary grant's part
// stopped being raised to a bid, the hosts got 41/35/24% of the spend in
// the simulator's family (f42, f48). Two hours of an injected clock, after
// ten minutes' warm-up, from several starts: judged on the demand slot in
// progress (where the others' counts lag a host's own), the small host took
// itself for 40% of the SPENDs, and the test passed or failed by its start
// (from 00:05, 42.7/32.2/25.1%); shares are judged on whole spans of
// minutes (updateShare).
func TestStandingHostsSpendByDemand(t *testing.T) {
	for _, start := range []time.Duration{time.Minute, 5 * time.Minute, 7 * time.Minute} {
		t.Run(start.String(), func(t *testing.T) { slowHostsOnCurve(t, start, 3) })
	}
}

// slowHostsOnCurve runs three hosts of a campaign of 150 micros a second
// and bids of 2,000 from start, with demand x its pace in SPENDs, and
// checks that the fleet spends the pace and each host its share.
func slowHostsOnCurve(t *testing.T, start time.Duration, demand float64) {
	f := newFixture(t)
	const pace = 150 // micros a second: 12,960,000 a day
	const bid = 2_000
	paceCampaign(t, f, pace, start)
	const tick = time.Second
	const warmup, run = 10 * time.Minute, 130 * time.Minute
	allowed, _ := spendFleet(t, f, fleetHosts(t, f, 100*time.Millisecond), demand*pace/bid, bid, tick, warmup, run)
	total, worst := shareGap(t, allowed)
	// The pace, and up to half an hour's more.
	if secs := (run - warmup).Seconds(); float64(total) < 0.95*pace*secs || float64(total) > 1.05*pace*(secs+1800) {
		t.Errorf("the fleet spent %d micros in %.0f s; want about the pace's %.0f, plus at most half an hour's", total, secs, pace*secs)
	}
	if worst > 3 {
		t.Errorf("a host's share of the spend is %.1f points from its share of the demand; want at most 3", worst)
	}
	f.Check(t, "c")
}

// The fairness goal holds while the fleet catches up too: a campaign hours
// behind its curve, with 5x its pace in SPENDs, is bound by the catch-up
// rate (3x) its shards release, and each host's share of the spend is
// within 3 points of its share of the SPENDs. The hosts with 35% and 20%
// of them (a SPEND every 7.6 s and 13.3 s) keep standing bids; unmetered
// behind the curve (shareThrottle metered only on it), they took a bid at
// every top-up the shards could serve, and the 35% host took 39.7% and 43.6%
// of the spend (4.7 and 8.6 points) from two starts six hours behind.
func TestStandingHostsCatchingUpSpendByDemand(t *testing.T) {
	for _, start := range []time.Duration{6 * time.Hour, 6*time.Hour + 7*time.Minute} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			f := newFixture(t)
			const pace = 150 // micros a second
			const bid = 2_000
			paceCampaign(t, f, pace, start)
			const warmup, run = 10 * time.Minute, 130 * time.Minute
			allowed, _ := spendFleet(t, f, fleetHosts(t, f, 100*time.Millisecond), 5.0*pace/bid, bid, time.Second, warmup, run)
			total, worst := shareGap(t, allowed)
			rate := float64(total) / (run - warmup).Seconds() / pace
			t.Logf("the fleet spent %.2fx the pace", rate)
			if rate < 2.7 || rate > 3.3 {
				t.Errorf("the fleet caught up at %.2fx the pace; want the catch-up rate, 3x", rate)
			}
			if worst > 3 {
				t.Errorf("a host's share of the spend is %.1f points from its share of the demand; want at most 3", worst)
			}
			f.Check(t, "c")
		})
	}
}

// Hosts that move between ordinary leases and standing bids: at 4-6x the
// pace, on the curve, the three hosts see a SPEND every 5-17 s, about the
// 7.5 s at which a host's 10-second EWMA of its SPENDs calls it sparse, so
// each asks one way and then the other. The shards' fair split binds the
// ordinary leases and shareThrottle the standing bids, but neither both:
// the hosts got 33/41/26% of the spend (up to 14 points off) before each
// host's spend was metered at its share of the fleet's rate (meterSpend).
func TestMixedHostsSpendByDemand(t *testing.T) {
	for _, demand := range []float64{4, 6} {
		for _, start := range []time.Duration{time.Minute, 7 * time.Minute} {
			t.Run(fmt.Sprint(demand, "x/", start), func(t *testing.T) { slowHostsOnCurve(t, start, demand) })
		}
	}
}

// When a host leaves the fleet (it died, or its traffic moved), the others
// take what it would have spent: each is metered by its share of the
// fleet's demand (meterSpend, shareThrottle), which it learns only over the
// next quarter hours, so until then they are metered by their old shares,
// and the fleet falls behind until it meters by the catch-up rate
// (catchingWindows). Three hosts, 3x the pace in all; h1 (45%) stops at
// minute 30. With the catch-up rate from a cap window behind, a busy
// campaign ran at 0.66x its pace for the ten minutes after, and a slow one
// at 0.62x; before the spend was metered at all, 0.91x and 0.84x.
func TestFleetRecoversWhenAHostLeaves(t *testing.T) {
	for _, c := range []struct {
		name                  string
		pace, bid             int64
		tick                  time.Duration
		firstTen, firstThirty float64 // the least the fleet spends, as a multiple of the pace
	}{
		{"busy", 100_000, 1_000, 100 * time.Millisecond, 0.85, 0.95},
		{"slow", 150, 2_000, time.Second, 0.6, 0.85},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			paceCampaign(t, f, c.pace, time.Minute)
			ds := fleetHosts(t, f, c.tick)
			const leave, run = 30 * time.Minute, 70 * time.Minute
			perSecond := 3.0 * float64(c.pace) / float64(c.bid)
			owed := make([]float64, len(ds))
			perMinute := make([]int64, run/time.Minute)
			for i := range int(run / c.tick) {
				at := time.Duration(i) * c.tick
				for h, d := range ds {
					if h == 0 && at >= leave {
						continue // h1 is gone: no steps, no SPENDs
					}
					d.Step(ctx)
					owed[h] += perSecond * hostWeights[h] * c.tick.Seconds()
					for ; owed[h] >= 1; owed[h]-- {
						dec, err := d.Spend("c", pacer.Micros(c.bid), "")
						if err != nil {
							t.Fatal(err)
						}
						if dec == pacer.Allowed {
							perMinute[at/time.Minute] += c.bid
						}
					}
				}
				f.Clock.Add(c.tick)
			}
			rate := func(from, to time.Duration) float64 {
				var sum int64
				for _, a := range perMinute[from/time.Minute : to/time.Minute] {
					sum += a
				}
				return float64(sum) / (to - from).Seconds() / float64(c.pace)
			}
			ten, thirty := rate(leave, leave+10*time.Minute), rate(leave, leave+30*time.Minute)
			t.Logf("before h1 left: %.2fx the pace; the ten minutes after: %.2fx; the thirty after: %.2fx", rate(10*time.Minute, leave), ten, thirty)
			if ten < c.firstTen || thirty < c.firstThirty {
				t.Errorf("the fleet spent %.2fx its pace in the ten minutes after a host left, %.2fx in the thirty; want at least %.2fx and %.2fx", ten, thirty, c.firstTen, c.firstThirty)
			}
			f.Check(t, "c")
		})
	}
}

// Issue 10's catch-up goal: a campaign behind its curve recovers as fast as
// demand allows, up to the catch-up rate (3x the pace by default), also
// when several hosts share it. Two hours behind with nothing spent, three
// daemons see 5x the pace in all. The shards' first calls release the
// catch-up's cap windows at once (available may hold up to 3x a cap window
// behind its plan); after nine minutes, that burst spent and the hosts'
// shares of the demand settled, the fleet spends 3x the pace. Each host's
// cap was its share of half of what one lease may take, which is half a
// window of the catch-up pace already: the fleet caught up at 2.2x.
func TestFleetCatchesUpAtTheCatchUpRate(t *testing.T) {
	f := newFixture(t)
	const pace = 100_000 // micros a second
	const bid = 1_000
	paceCampaign(t, f, pace, 2*time.Hour)
	const tick = 100 * time.Millisecond
	const warmup, run = 9 * time.Minute, 14 * time.Minute
	_, perMinute := spendFleet(t, f, fleetHosts(t, f, tick), 5.0*pace/bid, bid, tick, warmup, run)
	var total int64
	for _, a := range perMinute[warmup/time.Minute:] {
		total += a
	}
	secs := (run - warmup).Seconds()
	rate := float64(total) / secs / pace
	t.Logf("allowed per minute %v (the pace: 6,000,000); %.2fx the pace from minute %d", perMinute, rate, warmup/time.Minute)
	if rate < 2.7 || rate > 3.3 {
		t.Errorf("the fleet caught up at %.2fx the pace; want the catch-up rate, 3x", rate)
	}
	f.Check(t, "c")
}

// A lease is renewed the tick before it ends, not the tick after: in
// between, the tokens it took with it were missing, and a campaign behind
// its curve, asked for half its pace, paced its SPENDs for up to a tick at
// every lease's end (the simulator steps its daemons every 2 s: 4% of a
// busy campaign's SPENDs while it caught up).
func TestRenewalIsInPlaceBeforeTheLeaseEnds(t *testing.T) {
	f := newFixture(t)
	const pace = 100_000 // micros a second
	const bid = 1_000
	paceCampaign(t, f, pace, time.Hour) // an hour behind: nothing is paced for the curve
	// Ticks of 2 s, as the simulator's: a lease's end (its expiry less the
	// 1 s skew bound) falls between two of them.
	d := tickDaemon(t, f, "h1", 2*time.Second)
	const warmup, run = time.Minute, 6 * time.Minute
	var asked, paced int
	for i := range int(run / (2 * time.Second)) {
		d.Step(ctx)
		for range 100 { // 50 a second, 20 ms apart: half the pace
			dec, err := d.Spend("c", bid, "")
			if err != nil {
				t.Fatal(err)
			}
			if time.Duration(i)*2*time.Second >= warmup {
				asked++
				if dec != pacer.Allowed {
					paced++
				}
			}
			f.Clock.Add(20 * time.Millisecond)
		}
	}
	t.Logf("%d of %d SPENDs paced", paced, asked)
	if paced > asked/200 {
		t.Errorf("%d of %d SPENDs paced at half the pace, an hour behind the curve; want none but the odd one", paced, asked)
	}
	f.Check(t, "c")
}
