package history_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/history"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
)

var (
	ctx = context.Background()
	t0  = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
)

const day = "2026-11-21"

func spend(r *history.Recorder, id string, amount int64, ok bool) {
	ans := ":0"
	if ok {
		ans = ":1"
	}
	r.Record(history.Call{At: t0, Client: "h1", Campaign: "c", Day: day, Auction: id, Amount: amount, OK: ok, Answer: ans})
}

func refund(r *history.Recorder, id string, amount int64, ok bool) {
	r.Record(history.Call{At: t0, Client: "h1", Campaign: "c", Day: day, Auction: id, Amount: amount, Refund: true, OK: ok, Answer: "+OK"})
}

func check(t *testing.T, r *history.Recorder, opt history.Options) history.Report {
	t.Helper()
	rep, err := history.Check(ctx, r, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func plan(limit int64) map[history.DayKey]history.DayPlan {
	return map[history.DayKey]history.DayPlan{{Campaign: "c", Day: day}: {Limit: limit}}
}

// The counting rule: a replayed :1 counts once; after an accepted refund the
// next :1 for the id counts again; id-less calls always count; denied SPENDs
// and refused REFUNDs count nothing.
func TestCountingRule(t *testing.T) {
	var r history.Recorder
	spend(&r, "a1", 100, true)
	spend(&r, "a1", 100, true) // a retry: the daemon replays its answer
	spend(&r, "a2", 100, false)
	spend(&r, "", 50, true)
	spend(&r, "", 50, true)
	refund(&r, "a1", 100, true)
	spend(&r, "a1", 100, true) // after the refund: a new charge
	refund(&r, "", 30, false)
	rep := check(t, &r, history.Options{Label: "rule", Plans: plan(1000)})
	got := rep.Days[history.DayKey{Campaign: "c", Day: day}]
	if got.Allowed != 300 || got.Replayed != 100 || got.Refunded != 100 || got.Net() != 200 || got.Spends != 6 || got.Refunds != 2 {
		t.Fatalf("tally %+v; want allowed 300, replayed 100, refunded 100, net 200", got)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if rep.Calls != 8 {
		t.Fatalf("calls %d, want 8", rep.Calls)
	}
}

// A cut holds the clients to the new limit from when it is made, not
// before: what they netted earlier was within the budget then (model seed
// 14: 90,000 netted under a budget of 145,430, refunds, then a cut to what
// was out, 73,967).
func TestACutHoldsFromWhenItIsMade(t *testing.T) {
	var r history.Recorder
	spend(&r, "a1", 900, true)
	refund(&r, "a1", 900, true)
	spend(&r, "a2", 100, true)
	cut := r.Len()
	r.Notef(t0, "c", "operator cuts the budget to 500")
	spend(&r, "a3", 300, true)
	p := history.DayPlan{Limit: 500, Earlier: []history.EarlierLimit{{Until: cut, Limit: 1000}}}
	plans := map[history.DayKey]history.DayPlan{{Campaign: "c", Day: day}: p}
	if err := check(t, &r, history.Options{Plans: plans}).Err(); err != nil {
		t.Fatalf("900 netted under a limit of 1000, 400 after the cut to 500: %v", err)
	}
	spend(&r, "a4", 200, true) // 600 after the cut
	err := check(t, &r, history.Options{Plans: plans}).Err()
	if err == nil || !strings.Contains(err.Error(), "limit of 500") || !strings.Contains(err.Error(), "overspend 100") {
		t.Fatalf("600 netted after a cut to 500: %v; want an overspend of 100", err)
	}
	// Without the earlier limit the first 900 is over the cut's 500.
	if err := check(t, &r, history.Options{Plans: plan(500)}).Err(); err == nil || !strings.Contains(err.Error(), "overspend 400") {
		t.Fatalf("one limit for the whole day: %v; want the 900 over 500", err)
	}
}

// Net over the limit is an overspend, reported with the label and an excerpt
// pointing at the call that crossed it. Replays do not push the net over;
// a re-spend after a refund does.
func TestOverspend(t *testing.T) {
	var r history.Recorder
	spend(&r, "a1", 600, true)
	spend(&r, "a1", 600, true)
	if err := check(t, &r, history.Options{Plans: plan(1000)}).Err(); err != nil {
		t.Fatalf("a replay counted as a second charge: %v", err)
	}
	refund(&r, "a1", 600, true)
	spend(&r, "a1", 600, true)
	r.Notef(t0, "c", "operator cuts the budget")
	spend(&r, "a2", 600, true)
	rep := check(t, &r, history.Options{Label: "seed 7", Plans: plan(1000)})
	err := rep.Err()
	if err == nil || len(rep.Violations) != 1 || rep.Violations[0].Kind != "overspend" {
		t.Fatalf("want one overspend, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"seed 7", "overspend 200", "limit of 1000", "operator cuts the budget", "replay, not counted", "id=a2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("report lacks %q:\n%s", want, msg)
		}
	}
	if !strings.Contains(msg, ">#6") {
		t.Errorf("the excerpt does not mark event #6, which crossed the limit:\n%s", msg)
	}
}

// On a restored day the re-assertion measures its shortfall net of what
// refunds gave back before it, so a moment's net may exceed Limit +
// Shortfall by the day's refunds still to come, and by no more; a day not
// restored is held to its limit at every event.
func TestARestoredDayCountsRefundsToCome(t *testing.T) {
	restored := func(limit, short int64) map[history.DayKey]history.DayPlan {
		return map[history.DayKey]history.DayPlan{{Campaign: "c", Day: day}: {Limit: limit, Restored: true, Shortfall: short}}
	}
	var r history.Recorder
	spend(&r, "a1", 700, true)
	spend(&r, "a2", 600, true) // 1,300 netted: 300 over 900 + 100
	refund(&r, "a2", 300, true)
	if err := check(t, &r, history.Options{Plans: restored(900, 100)}).Err(); err != nil {
		t.Fatalf("1,300 netted, 300 of it refunded later, on a restored day of 900 + 100: %v", err)
	}
	if err := check(t, &r, history.Options{Plans: plan(1000)}).Err(); err == nil || !strings.Contains(err.Error(), "overspend 300") {
		t.Fatalf("the same on a day not restored, limit 1,000: %v; want an overspend of 300", err)
	}
	spend(&r, "a3", 1, true) // after the refund: 1,001
	if err := check(t, &r, history.Options{Plans: restored(900, 100)}).Err(); err == nil || !strings.Contains(err.Error(), "overspend 1") {
		t.Fatalf("1,001 netted after the last refund on a restored day of 900 + 100: %v; want an overspend of 1", err)
	}
	var r2 history.Recorder
	spend(&r2, "a1", 700, true)
	spend(&r2, "a2", 601, true) // 301 over, 300 to come
	refund(&r2, "a2", 300, true)
	if err := check(t, &r2, history.Options{Plans: restored(900, 100)}).Err(); err == nil || !strings.Contains(err.Error(), "overspend 1 ") {
		t.Fatalf("1,301 netted with 300 refunded later, on a restored day of 900 + 100: %v; want an overspend of 1", err)
	}
}

func TestSpendingWithoutPlan(t *testing.T) {
	var r history.Recorder
	spend(&r, "", 1, true)
	if rep := check(t, &r, history.Options{}); len(rep.Kinds()) != 1 || rep.Kinds()[0] != "no-plan" {
		t.Fatalf("kinds %v, want [no-plan]", rep.Kinds())
	}
}

type ledgerFixture struct {
	srv    *redistest.Server
	ledger *lease.Ledger
}

func newLedger(t *testing.T, budget int64) ledgerFixture {
	t.Helper()
	srv := redistest.Start(t)
	l := lease.New(srv.Client(), lease.Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	c, err := l.PutCampaign(ctx, lease.Campaign{ID: "c", DailyMicros: budget, TZ: "UTC", Curve: "flat", Shards: 2, State: lease.StateActive})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	if _, err := l.OpenDay(ctx, c, day, start, t0); err != nil {
		t.Fatal(err)
	}
	return ledgerFixture{srv, l}
}

func (f ledgerFixture) grant(t *testing.T, id string, want int64) int64 {
	t.Helper()
	g, err := f.ledger.Grant(ctx, lease.GrantRequest{
		Shard: lease.ShardKey{Campaign: "c", Day: day, Shard: 0}, LeaseID: id, Holder: "h1", Want: want,
		Expiry: t0.Add(30 * time.Second), Now: t0, Pace: lease.Pace{Now: 1e9, Cap: 1e9}, Grace: 3 * time.Second,
		DayStart: time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC),
	})
	if err != nil {
		t.Fatal(err)
	}
	return g.Granted
}

// Against a real ledger: a clean history passes; allowing more than the
// ledger leased is uncharged; a shard edited by hand breaks conservation.
func TestAgainstLedger(t *testing.T) {
	f := newLedger(t, 10_000)
	if got := f.grant(t, "l1", 3000); got != 3000 {
		t.Fatalf("granted %d", got)
	}
	var r history.Recorder
	spend(&r, "", 1000, true)
	spend(&r, "x", 2000, true)
	opt := history.Options{Label: "clean", Plans: plan(10_000), Ledger: f.ledger}
	if err := check(t, &r, opt).Err(); err != nil {
		t.Fatalf("clean history: %v", err)
	}
	spend(&r, "y", 500, true) // past what the ledger handed out
	rep := check(t, &r, opt)
	if k := rep.Kinds(); len(k) != 1 || k[0] != "uncharged" {
		t.Fatalf("kinds %v, want [uncharged]: %v", k, rep.Err())
	}
	if !strings.Contains(rep.Err().Error(), "500 micros answered :1 without a charge") {
		t.Fatalf("report: %v", rep.Err())
	}

	// Mint 700 micros on shard 1, as a retried non-idempotent script would.
	rdb := f.srv.Client()
	state := "pacer:{c/" + day + "/1}:state"
	rdb.HIncrBy(ctx, state, "budget", 700)
	rdb.HIncrBy(ctx, state, "locked", 700)
	rep = check(t, &history.Recorder{}, history.Options{Ledger: f.ledger, ExtraDays: []history.DayKey{{Campaign: "c", Day: day}}})
	if k := rep.Kinds(); len(k) != 1 || k[0] != "conservation" || !strings.Contains(rep.Err().Error(), "day budget 10000 != shards' budgets 10700") {
		t.Fatalf("kinds %v, want [conservation] on the day total: %v", k, rep.Err())
	}
}

// Once nothing is leased, the ledger's budget must be the plan (Exact), or at
// least not above both the plan and what was spent.
func TestPlan(t *testing.T) {
	f := newLedger(t, 10_000)
	var r history.Recorder
	exact := map[history.DayKey]history.DayPlan{{Campaign: "c", Day: day}: {Limit: 10_000, Exact: true}}
	if err := check(t, &r, history.Options{Plans: exact, Ledger: f.ledger, ExtraDays: []history.DayKey{{Campaign: "c", Day: day}}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ledger.AdjustDay(ctx, "c", day, 12_000, t0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []history.DayPlan{{Limit: 10_000, Exact: true}, {Limit: 10_000}} {
		plans := map[history.DayKey]history.DayPlan{{Campaign: "c", Day: day}: p}
		rep := check(t, &r, history.Options{Plans: plans, Ledger: f.ledger, ExtraDays: []history.DayKey{{Campaign: "c", Day: day}}})
		if k := rep.Kinds(); len(k) != 1 || k[0] != "plan" {
			t.Fatalf("plan %+v: kinds %v, want [plan]: %v", p, k, rep.Err())
		}
	}
	// A lease outstanding: the plan check waits for it to come back.
	f.grant(t, "l1", 100)
	plans := map[history.DayKey]history.DayPlan{{Campaign: "c", Day: day}: {Limit: 10_000, Exact: true}}
	if err := check(t, &r, history.Options{Plans: plans, Ledger: f.ledger, ExtraDays: []history.DayKey{{Campaign: "c", Day: day}}}).Err(); err != nil {
		t.Fatalf("plan checked while a lease is out: %v", err)
	}
}

// Carry-over: the next day may spend what the previous day's clients did not,
// and no more.
func TestCarryIn(t *testing.T) {
	var r history.Recorder
	r.Record(history.Call{At: t0, Client: "h1", Campaign: "c", Day: "2026-11-21", Amount: 700, OK: true, Answer: ":1"})
	r.Record(history.Call{At: t0, Client: "h1", Campaign: "c", Day: "2026-11-22", Amount: 1300, OK: true, Answer: ":1"})
	plans := map[history.DayKey]history.DayPlan{
		{Campaign: "c", Day: "2026-11-21"}: {Limit: 1000},
		{Campaign: "c", Day: "2026-11-22"}: {Limit: 1000, CarryIn: true},
	}
	if err := check(t, &r, history.Options{Plans: plans}).Err(); err != nil {
		t.Fatalf("1300 on a day of 1000 plus a carry of 300: %v", err)
	}
	r.Record(history.Call{At: t0, Client: "h1", Campaign: "c", Day: "2026-11-22", Amount: 1, OK: true, Answer: ":1"})
	if k := check(t, &r, history.Options{Plans: plans}).Kinds(); len(k) != 1 || k[0] != "overspend" {
		t.Fatalf("kinds %v, want [overspend]", k)
	}
}
