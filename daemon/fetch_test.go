package daemon_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
)

// fetchDaemon is a daemon with lease.sparse_wait on (the default), long
// enough that a test on a loaded machine never sees a fetch answered late.
func (f *fixture) fetchDaemon(t *testing.T, holder string) *daemon.Daemon {
	t.Helper()
	return f.sparseDaemon(t, holder, time.Second)
}

// tinyDay runs six 20-bid campaigns (flat curve) for a day on three hosts
// with 45/35/20% of the traffic: about 30 SPENDs a campaign at random
// instants (1.5x the budget), their amounts spread around the bid as bids
// are (lognormal, sigma 0.5). It returns what was allowed of the six
// budgets, and what the ledger had leased out at 23:59:30.
func tinyDay(t *testing.T, f *fixture, ds []*daemon.Daemon) (allowed, budget, leasedAtEnd int64) {
	t.Helper()
	const bid = 2_000
	const day20 = 20 * bid
	ids := []string{"t0", "t1", "t2", "t3", "t4", "t5"}
	for _, id := range ids {
		f.campaignWithBid(t, id, day20, 8, 2*bid) // the operator's: the bids' typical largest
		budget += day20
	}
	rng := rand.New(rand.NewPCG(848, 10))
	type arrival struct {
		at     time.Duration
		id     pacer.CampaignID
		host   int
		amount int64
	}
	var arrivals []arrival
	for _, id := range ids {
		for range 30 {
			host := 0
			switch r := rng.Float64(); {
			case r >= 0.8:
				host = 2
			case r >= 0.45:
				host = 1
			}
			amount := int64(float64(bid) * math.Exp(0.5*rng.NormFloat64()-0.125))
			arrivals = append(arrivals, arrival{time.Duration(rng.Int64N(int64(24*time.Hour - time.Minute))), pacer.CampaignID(id), host, max(amount, 1)})
		}
	}
	const step = 30 * time.Second
	for now := time.Duration(0); now < 24*time.Hour; now += step {
		f.Clock.Set(midnight.Add(now))
		for _, d := range ds {
			d.Step(ctx)
		}
		for _, a := range arrivals {
			if a.at < now || a.at >= now+step {
				continue
			}
			dec, err := ds[a.host].Spend(a.id, pacer.Micros(a.amount), "")
			if err != nil {
				t.Fatal(err)
			}
			if dec == pacer.Allowed {
				allowed += a.amount
			}
		}
		if now == 24*time.Hour-30*time.Second {
			for _, id := range ids {
				tot, err := f.Ledger.DayTotals(ctx, id, day)
				if err != nil {
					t.Fatal(err)
				}
				leasedAtEnd += tot.Leased
			}
		}
	}
	for _, id := range ids {
		f.Check(t, id)
	}
	return allowed, budget, leasedAtEnd
}

// Issue 10: a sparse campaign's SPEND that finds its bucket short waits for
// a lease of what it lacks (lease.sparse_wait), so no budget is held on hosts
// between SPENDs: at midnight nothing is leased, where standing bids held
// about a tenth of 20-bid budgets on hosts whose next SPEND did not come.
// The same day with standing bids spends less and ends with bids held.
func TestSparseSpendsFetchTheirLeases(t *testing.T) {
	var got [2]struct{ allowed, budget, leased int64 }
	for i, mode := range []string{"fetch", "standing"} {
		f := newFixture(t)
		var ds []*daemon.Daemon
		for h := range 3 {
			if mode == "fetch" {
				ds = append(ds, f.fetchDaemon(t, fmt.Sprint("h", h)))
			} else {
				ds = append(ds, f.standingDaemon(t, fmt.Sprint("h", h)))
			}
		}
		a, b, l := tinyDay(t, f, ds)
		got[i].allowed, got[i].budget, got[i].leased = a, b, l
		t.Logf("%s: allowed %.2f%% of six 20-bid budgets; leased at 23:59:30 %.2f%%", mode, 100*float64(a)/float64(b), 100*float64(l)/float64(b))
		if a > b {
			t.Fatalf("%s: allowed %d of budgets totalling %d", mode, a, b)
		}
	}
	fetch, standing := got[0], got[1]
	if fetch.leased != 0 {
		t.Errorf("fetching: %d micros leased at 23:59:30; want none held between SPENDs", fetch.leased)
	}
	if fetch.allowed < fetch.budget*95/100 {
		t.Errorf("fetching: allowed %d of %d; want at least 95%%", fetch.allowed, fetch.budget)
	}
	if fetch.allowed <= standing.allowed {
		t.Errorf("fetching allowed %d, standing bids %d: want fetching to spend more", fetch.allowed, standing.allowed)
	}
}

// SpendAtNoWait, which the socket server's event loops call, never waits:
// a SPEND that would fetch a sparse campaign's lease, or load a campaign,
// returns pacer.ErrWouldWait and decides and charges nothing; SpendAt,
// from a goroutine that may wait, then decides it.
func TestSpendAtNoWaitDefersWhatWouldWait(t *testing.T) {
	const bid = 2_000
	f := newFixture(t)
	f.Campaign(t, "s", 20*bid, 1)
	d := f.fetchDaemon(t, "h")
	f.Clock.Set(midnight.Add(3 * time.Hour))
	now := f.Clock.Now()
	if _, _, err := d.SpendAtNoWait(now, "s", bid, ""); !errors.Is(err, pacer.ErrWouldWait) {
		t.Fatalf("SpendAtNoWait of a campaign not loaded: %v; want ErrWouldWait", err)
	}
	// Its first SPEND loads it; the refill loop then measures it sparse.
	if _, _, err := d.SpendAt(now, "s", bid, ""); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		f.Clock.Add(time.Minute)
		d.Step(ctx)
	}
	f.Clock.Add(time.Hour)
	d.Step(ctx)
	now = f.Clock.Now()
	before, err := f.Ledger.DayTotals(ctx, "s", day)
	if err != nil {
		t.Fatal(err)
	}
	dec, _, err := d.SpendAtNoWait(now, "s", bid, "a1")
	if !errors.Is(err, pacer.ErrWouldWait) || dec != pacer.Paced {
		t.Fatalf("SpendAtNoWait of a sparse campaign with an empty bucket = %v, %v; want ErrWouldWait", dec, err)
	}
	if after, _ := f.Ledger.DayTotals(ctx, "s", day); after != before {
		t.Fatalf("SpendAtNoWait reached the ledger: %+v -> %+v", before, after)
	}
	if b, _ := d.Balance("s"); b.Tokens != 0 {
		t.Fatalf("SpendAtNoWait left %d tokens; want none fetched", b.Tokens)
	}
	dec, _, err = d.SpendAt(now, "s", bid, "a1")
	if err != nil || dec != pacer.Allowed {
		t.Fatalf("SpendAt = %v, %v; want allowed from a fetched lease", dec, err)
	}
	after, err := f.Ledger.DayTotals(ctx, "s", day)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Spent + after.Leased - before.Spent - before.Leased; got != bid {
		t.Fatalf("the ledger handed out %d for the SPEND; want exactly its %d", got, bid)
	}
	if b, _ := d.Balance("s"); b.Tokens != 0 {
		t.Fatalf("the host holds %d tokens after the SPEND; want none (a lease of what it lacked)", b.Tokens)
	}
	// A retry of the allowed auction is answered from memory.
	if dec, _, err := d.SpendAt(now, "s", bid, "a1"); err != nil || dec != pacer.Allowed {
		t.Fatalf("retry of a1 = %v, %v; want allowed", dec, err)
	}
	f.Check(t, "s")
}

// A campaign loaded on this host (Warm, as at a restart) and not asked for
// in a lease window is sparse here: its first SPEND, hours later, fetches
// its lease instead of meeting the empty bucket the primed lease left.
func TestFirstSpendAfterAQuietLoadFetches(t *testing.T) {
	const bid = 2_000
	f := newFixture(t)
	f.Campaign(t, "s", 20*bid, 1)
	d := f.fetchDaemon(t, "h")
	f.Clock.Set(midnight.Add(time.Hour))
	d.Warm([]string{"s"})
	for range 2 * 60 { // two hours in minute ticks, no SPEND
		f.Clock.Add(time.Minute)
		d.Step(ctx)
	}
	if b, _ := d.Balance("s"); b.Tokens != 0 {
		t.Fatalf("the host holds %d tokens after two quiet hours; want the primed lease gone", b.Tokens)
	}
	if dec, err := d.Spend("s", bid, ""); err != nil || dec != pacer.Allowed {
		t.Fatalf("first SPEND after two quiet hours = %v, %v; want allowed from a fetched lease", dec, err)
	}
	f.Check(t, "s")
}

// A sparse SPEND's fetch asks a shard that refused the host a larger lease
// while holding what the SPEND lacks, though the refill loop's pacing puts
// the host's next ask later: a standing bid or a SPEND the shard could not
// cover whole put off the host's next ledger call, and a smaller SPEND that
// came next was paced with the budget it needed available (family seed 7's
// 113-bid campaign lost its last 1,292 micros so: 99.43% spent).
func TestFetchAfterARefusalAsksAgain(t *testing.T) {
	const bid = 2_000
	f := newFixture(t)
	f.campaignWithBid(t, "s", 20*bid, 1, bid)
	d := f.fetchDaemon(t, "h")
	f.Clock.Set(midnight.Add(time.Hour))
	d.Warm([]string{"s"})
	for range 60 { // an hour with no SPEND: sparse here, nothing held
		f.Clock.Add(time.Minute)
		d.Step(ctx)
	}
	tot, err := f.Ledger.DayTotals(ctx, "s", day)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := d.Balance("s"); b.Tokens != 0 || tot.Leased != 0 || tot.Available < 2 {
		t.Fatalf("at 02:00 the host holds %d, the ledger leases %d and has %d available; want nothing held, something available", b.Tokens, tot.Leased, tot.Available)
	}
	// More than the day's whole budget: refused (all or nothing).
	if dec, err := d.Spend("s", 20*bid+1, ""); err != nil || dec != pacer.Paced {
		t.Fatalf("a SPEND of more than the day's budget = %v, %v; want paced", dec, err)
	}
	// A second later, one the shard covers.
	f.Clock.Add(time.Second)
	if dec, err := d.Spend("s", pacer.Micros(tot.Available-1), ""); err != nil || dec != pacer.Allowed {
		t.Fatalf("a SPEND of %d with %d available, a second after a refused fetch = %v, %v; want allowed from a fetched lease", tot.Available-1, tot.Available, dec, err)
	}
	f.Check(t, "s")
}
