package lease

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redistest"
)

// previousRelease is an earlier release's ledger library (testdata: its
// prelude and the scripts a daemon and the reconciler call on a shard):
// 3a9230c, before the state hash's writes were cut to the fields a call
// changes, and b170891, before a lease call read only the fields its path
// uses, hashed five arguments into the history and made a busy shard's
// done a hashtable.
type previousRelease struct{ grant, renew, release, settle *function }

// loadPreviousRelease is release 3a9230c's library.
func loadPreviousRelease(t *testing.T) previousRelease { return loadRelease(t, "3a9230c") }

// previousGrantArgs is r's grant arguments as the releases kept in testdata
// take them (and every release before callNumbers): each number an
// argument of its own, as decimal digits. A daemon of such a release sends
// them so to its own library.
func (l *Ledger) previousGrantArgs(r GrantRequest) []any {
	return []any{
		r.LeaseID, r.Holder, r.Want, r.Expiry.UnixMilli(), r.Now.UnixMilli(),
		r.Pace.Now, r.Pace.Cap, r.Grace.Milliseconds(), l.retainUntil(r.DayStart.Add(48 * time.Hour)), l.cfg.AuditMaxLen,
		r.Known.Seq, r.Known.Tip, r.Pace.Unit, r.Pace.CatchUpPermille, r.Demand, r.DemandTTL.Milliseconds(), r.Min, r.Pace.Shards,
		r.Pace.Hour, r.Pace.HourPPB, r.Pace.HourPermille, r.Pace.HourUnit, flag(r.Pace.HourNoBid),
		r.Known.Granted, r.Known.Returned, r.Pace.Ahead,
	}
}

func loadRelease(t *testing.T, rev string) previousRelease {
	t.Helper()
	dir := filepath.Join("testdata", "release-"+rev)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var bodies [][2]string
	for _, n := range []string{"grant", "renew", "release", "settle"} {
		bodies = append(bodies, [2]string{n, read(n)})
	}
	lib := newLibrary(read("prelude"), bodies)
	if lib.name == ledgerLibrary.name {
		t.Fatal("the previous release's library has this one's name")
	}
	return previousRelease{lib.function("grant"), lib.function("renew"), lib.function("release"), lib.function("settle")}
}

// A rolling upgrade runs two daemon versions on one master, each with its
// own library (the name carries the code's hash), on the same shards. Here
// the previous release's grant, renew, release and settle and this one's
// take turns on a shard laid out as the previous release opened it (two
// hosts taking turns, the version switching every third cycle): every call is granted,
// none sees the other version's writes as lost ones (a diverged history or
// a run behind its caller's totals), the leases left open are settled by
// the previous release's reconciler, the day balances and its report
// counters add up; the shard becomes a hashtable at its 64th grant at the
// latest (3a9230c leaves the encoding alone at its 32nd) and the previous
// release serves it as one. Run with each release kept in testdata, and
// with this release's Config.PackedCounters off (its records are the
// previous releases'), on (its lease calls count in rp, the others in
// r_*), and mixed (the version switching every third cycle between the
// previous release, this one off and this one on): the report is r_* plus
// rp, summed.
func TestRollingUpgradeSharesAShard(t *testing.T) {
	for _, rev := range []string{"3a9230c", "b170891"} {
		for _, mode := range []string{"off", "on", "mixed"} {
			t.Run(rev+"/"+mode, func(t *testing.T) { rollingUpgradeSharesAShard(t, rev, mode) })
		}
	}
}

func rollingUpgradeSharesAShard(t *testing.T, rev, mode string) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client()
	l := New(rdb, Config{Retention: 100 * 365 * 24 * time.Hour}, nil)
	on := New(rdb, Config{Retention: 100 * 365 * 24 * time.Hour, PackedCounters: true}, nil)
	// version is cycle i's writer: the previous release (nil) or this one.
	version := func(i int) *Ledger {
		switch {
		case mode == "mixed":
			return []*Ledger{nil, l, on}[(i/3)%3]
		case (i/3)%2 == 0:
			return nil
		case mode == "on":
			return on
		}
		return l
	}
	prev := loadRelease(t, rev)
	day0 := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	const day = "2026-11-21"
	c := Campaign{ID: "c", DailyMicros: 86_400_000_000, TZ: "UTC", Curve: "flat", Shards: 1, State: StateActive}
	if _, err := l.PutCampaign(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenDay(ctx, c, day, day0, day0); err != nil {
		t.Fatal(err)
	}
	k := ShardKey{Campaign: "c", Day: day, Shard: 0}
	// 3a9230c's open wrote every field this one's does but these.
	if rev == "3a9230c" {
		if err := rdb.HDel(ctx, k.keys()[0], "holds", "hr", "hrel").Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := day0.Add(12 * time.Hour)
	hosts := []*upgradeHost{{holder: "h1"}, {holder: "h2"}}
	for i := range 40 {
		now = now.Add(time.Second)
		if v := version(i); v != nil {
			hosts[i%2].cycle(t, v, prev, k, i, false, now, day0)
		} else {
			hosts[i%2].cycle(t, l, prev, k, i, true, now, day0)
		}
	}
	rep, err := l.run(ctx, prev.settle, k, now.Add(time.Hour).UnixMilli(), int64(5000), int64(7), int64(64), l.cfg.AuditMaxLen)
	if err != nil || rep.Status != 0 || len(rep.Extra) == 0 || rep.Extra[0] != 4 || rep.Value <= 0 || rep.Shard.Leased != 0 {
		t.Fatalf("the previous release's settle: status %d, %v leases for %d, leased %d left: %v", rep.Status, rep.Extra, rep.Value, rep.Shard.Leased, err)
	}
	// mixed: neither version's count of grants need pass a multiple of 32.
	if e, _ := rdb.ObjectEncoding(ctx, k.keys()[0]).Result(); e != "hashtable" && mode != "mixed" {
		t.Errorf("after 80 grants, 40 of them this release's: encoding %s, want hashtable", e)
	}
	rp, err := rdb.HGet(ctx, k.keys()[0], "rp").Result()
	if mode == "off" && err == nil {
		t.Errorf("switch off: rp written (%q)", rp)
	}
	if mode != "off" && len(rp) != rpLen {
		t.Errorf("switch on: rp %q (%v), want %d bytes", rp, err, rpLen)
	}
	if _, problems, err := l.CheckDay(ctx, "c", day); err != nil || len(problems) > 0 {
		t.Fatalf("check: %v %v", problems, err)
	}
	r, err := l.BuildReport(ctx, "c", day)
	if err != nil {
		t.Fatal(err)
	}
	// Events: the open, 80 grants, 76 releases (40 in renewals), 4 settlements.
	if r.Leases != 80 || r.Settled != 4 || r.Events != 161 || r.Returned != 40*100+36*250 || r.Outstanding != 0 ||
		r.Spent != rep.Shard.Spent || r.Lost != rep.Shard.Lost || r.Budget != c.DailyMicros {
		t.Errorf("report %+v, shard %+v", r, rep.Shard)
	}
	if n, ok, err := l.AuditEvents(ctx, k); err != nil || !ok || n != 161 {
		t.Errorf("audit events %d (%v): %v, want 161", n, ok, err)
	}
	if xl, err := rdb.XLen(ctx, k.keys()[4]).Result(); err != nil || xl != 161 {
		t.Errorf("audit stream holds %d entries (%v), want 161", xl, err)
	}
	if s, ok, err := l.ShardReport(ctx, k); err != nil || !ok || s.Leases != r.Leases || s.Spent != r.Spent || s.Returned != r.Returned || s.Events != r.Events {
		t.Errorf("shard report %+v (%v): %v; day's %+v", s, ok, err, r)
	}
}

// upgradeHost is a daemon's run on the shard: its holder and what it
// acknowledged (the last reply's history, its run's totals).
type upgradeHost struct {
	holder string
	known  History
}

func (h *upgradeHost) request(k ShardKey, id string, now, day0 time.Time) GrantRequest {
	return GrantRequest{Shard: k, LeaseID: id, Holder: h.holder, Want: 10_000, Expiry: now.Add(30 * time.Second), Now: now,
		Pace: Pace{Now: 500_000_000, Cap: 503_472_222, Unit: 1000, CatchUpPermille: 1500}, Grace: 5 * time.Second,
		DayStart: day0, Known: h.known, Demand: 1000, DemandTTL: time.Minute}
}

// seen checks a call's reply and takes its history and the run's totals.
func (h *upgradeHost) seen(t *testing.T, what string, status int64, sh Shard, granted, unused int64) {
	t.Helper()
	if status != 0 || sh.Diverged {
		t.Fatalf("%s: status %d, diverged %v", what, status, sh.Diverged)
	}
	h.known = History{Seq: sh.Seq, Tip: sh.Tip, Granted: h.known.Granted + granted, Returned: h.known.Returned + unused}
}

// cycle is a lease's grant, its renewal (100 unused) and, before cycle 36,
// the successor's release (250 unused), by the previous release's scripts
// (old) or this one's (l's).
func (h *upgradeHost) cycle(t *testing.T, l *Ledger, prev previousRelease, k ShardKey, i int, old bool, now, day0 time.Time) {
	t.Helper()
	ctx := context.Background()
	id := h.holder + "-boot-" + strconv.Itoa(i)
	what := "cycle " + strconv.Itoa(i) + map[bool]string{true: " (previous release)", false: ""}[old]
	var st, g int64
	var sh Shard
	var err error
	var rep scriptReply
	if old {
		rep, err = l.run(ctx, prev.grant, k, l.previousGrantArgs(h.request(k, id, now, day0))...)
		st, g, sh = rep.Status, rep.Value, rep.Shard
	} else {
		var gr Grant
		gr, err = l.Grant(ctx, h.request(k, id, now, day0))
		g, sh = gr.Granted, gr.Shard
	}
	if err != nil || g <= 0 {
		t.Fatalf("%s: grant %d: %v", what, g, err)
	}
	h.seen(t, what+": grant", st, sh, g, 0)
	if old {
		rep, err = l.run(ctx, prev.renew, k, append([]any{id, int64(100)}, l.previousGrantArgs(h.request(k, id+"r", now, day0))...)...)
		st, g, sh = rep.Status, rep.Value, rep.Shard
		if err == nil && (len(rep.Extra) == 0 || rep.Extra[0] != 0) {
			t.Fatalf("%s: renew: grant status %v", what, rep.Extra)
		}
	} else {
		var gr Grant
		gr, err = l.Renew(ctx, id, 100, h.request(k, id+"r", now, day0))
		g, sh = gr.Granted, gr.Shard
	}
	if err != nil || g <= 0 {
		t.Fatalf("%s: renew %d: %v", what, g, err)
	}
	h.seen(t, what+": renew", st, sh, g, 100)
	if i >= 36 {
		return // left open, for the reconciler to settle
	}
	if old {
		rep, err = l.run(ctx, prev.release, k, id+"r", int64(250), now.UnixMilli(), l.cfg.AuditMaxLen,
			h.known.Seq, h.known.Tip, h.known.Granted, h.known.Returned)
		st, sh = rep.Status, rep.Shard
	} else {
		sh, err = l.ReleaseKnown(ctx, k, id+"r", 250, now, h.known)
	}
	if err != nil {
		t.Fatalf("%s: release: %v", what, err)
	}
	h.seen(t, what+": release", st, sh, 0, 250)
}
