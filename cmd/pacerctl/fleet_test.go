package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/internal/embedded"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestBroadcast(t *testing.T) {
	h := newHarness(t)
	n, err := embedded.StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	sub, err := broadcast.Connect(n.URL, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	events := make(chan pacer.Event, 16)
	if err := sub.Subscribe(func(e pacer.Event) { events <- e }); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	expect := func(step, kind string, version int64) {
		t.Helper()
		select {
		case e := <-events:
			want := pacer.Event{Kind: kind, Campaign: "c1", Version: version, From: "pacerctl", AtMillis: t0.UnixMilli()}
			if e != want {
				t.Errorf("%s: event %+v, want %+v", step, e, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no %s event", step, kind)
		}
	}
	withNATS := func(args ...string) string {
		t.Helper()
		return h.ok(append([]string{"--nats", n.URL}, args...)...)
	}

	out := withNATS("campaign", "set", "c1", "--daily", "10units", "--shards", "1")
	if !strings.HasSuffix(out, "broadcast pacer.changed.c1 (version 1)\n") {
		t.Errorf("set: %q", out)
	}
	expect("create", pacer.EventChanged, 1)
	h.openToday("c1")
	withNATS("campaign", "set", "c1", "--daily", "4units")
	expect("budget cut", pacer.EventRevoked, 2)
	withNATS("campaign", "set", "c1", "--daily", "6units")
	expect("budget raise", pacer.EventChanged, 3)
	withNATS("campaign", "set", "c1", "--curve", "daytime")
	expect("curve change", pacer.EventChanged, 4)
	withNATS("campaign", "pause", "c1")
	expect("pause", pacer.EventRevoked, 5)
	// Pausing again changes nothing but announces the state again.
	withNATS("--json", "campaign", "pause", "c1")
	expect("pause again", pacer.EventRevoked, 5)
	withNATS("campaign", "resume", "c1")
	expect("resume", pacer.EventChanged, 6)

	// Without --nats: one line on stderr, nothing published.
	r := h.run("campaign", "pause", "c1")
	if r.code != 0 || r.stderr != "pacerctl: note: no --nats: daemons learn of this from the ledger within a lease window\n" {
		t.Errorf("pause without --nats: %+v", r)
	}
	select {
	case e := <-events:
		t.Errorf("event without --nats: %+v", e)
	case <-time.After(200 * time.Millisecond):
	}

	// NATS down: the change is made, the failed broadcast is an error.
	n.Close()
	r = h.run("--nats", n.URL, "campaign", "resume", "c1")
	if r.code != 1 || !strings.Contains(r.stderr, "pacerctl: campaign resume: broadcast pacer.changed.c1") ||
		!strings.Contains(r.stderr, "the change is in the ledger") {
		t.Errorf("resume with NATS down: %+v", r)
	}
	wantFields(t, "after resume with NATS down", h.get("c1"), map[string]any{"state": "active", "version": 8.0})
}

// grant leases want micros of a shard to holder, expiring at expiry.
func grant(t *testing.T, l *lease.Ledger, k lease.ShardKey, id, holder string, want int64, now, expiry time.Time, dayStart time.Time) int64 {
	t.Helper()
	g, err := l.Grant(context.Background(), lease.GrantRequest{Shard: k, LeaseID: id, Holder: holder, Want: want,
		Expiry: expiry, Now: now, Pace: lease.Pace{Now: bucket.PPB, Cap: bucket.PPB}, Grace: 4 * time.Second, DayStart: dayStart})
	if err != nil {
		t.Fatalf("grant %s: %v", id, err)
	}
	return g.Granted
}

func TestReport(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.ok("campaign", "set", "c1", "--daily", "10units", "--shards", "2")
	c, err := h.ledger.GetCampaign(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	// Yesterday, as t0 sees it in UTC.
	day, err := bucket.ParseDayKey("2099-03-07", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	noon := day.Start.Add(12 * time.Hour)
	if _, err := h.ledger.OpenDay(ctx, c, day.Key, day.Start, day.Start); err != nil {
		t.Fatal(err)
	}
	s0 := lease.ShardKey{Campaign: "c1", Day: day.Key, Shard: 0}
	s1 := lease.ShardKey{Campaign: "c1", Day: day.Key, Shard: 1}
	exp := noon.Add(30 * time.Second)
	for _, g := range []struct {
		k      lease.ShardKey
		id, h  string
		micros int64
	}{{s0, "L1", "h1", 3_000_000}, {s1, "L2", "h2", 2_000_000}, {s0, "L3", "h1", 1_000_000}} {
		if got := grant(t, h.ledger, g.k, g.id, g.h, g.micros, noon, exp, day.Start); got != g.micros {
			t.Fatalf("grant %s: %d", g.id, got)
		}
	}
	if _, err := h.ledger.Release(ctx, s0, "L1", 1_000_000, noon.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if st, err := h.ledger.Settle(ctx, s1, exp.Add(time.Minute), 4*time.Second, 0); err != nil || st.Count != 1 {
		t.Fatalf("settle: %+v, %v", st, err)
	}

	r := h.run("report", "c1")
	wantOut := "report c1 2099-03-07 (UTC): PROVISIONAL, the day is not closed: rebuilt from the audit streams now,\n" +
		"its figures can still change\n\n" +
		"                MICROS    UNITS    OF BUDGET  WHAT\n" +
		"budget          10000000  10units  100.0%     opened, plus or minus adjustments\n" +
		"spent           4000000   4units   40.0%      reported by daemons, plus lost\n" +
		"returned        1000000   1units   10.0%      unused lease budget given back\n" +
		"lost            2000000   2units   20.0%      settled leases of daemons that never reported\n" +
		"outstanding     1000000   1units   10.0%      still leased\n" +
		"under_delivery  6000000   6units   60.0%      budget - spent\n" +
		"leases          3                             granted\n" +
		"settled_leases  1                             expired unreported and settled as spent\n"
	if r.code != 0 || r.stdout != wantOut || r.stderr != "" {
		t.Errorf("report: exit %d\n%s\nwant:\n%s\nstderr %q", r.code, r.stdout, wantOut, r.stderr)
	}
	var v reportView
	if err := json.Unmarshal([]byte(h.ok("--json", "report", "c1", "--day", "2099-03-07")), &v); err != nil {
		t.Fatal(err)
	}
	want := reportView{Report: lease.Report{Campaign: "c1", Day: "2099-03-07", Budget: 10_000_000, Spent: 4_000_000,
		Returned: 1_000_000, Lost: 2_000_000, Outstanding: 1_000_000, UnderDelivery: 6_000_000, Leases: 3, Settled: 1,
		Events: v.Events}, Provisional: true}
	if v != want {
		t.Errorf("report --json:\n got %+v\nwant %+v", v, want)
	}

	// A saved report is printed as saved, not rebuilt.
	saved := want.Report
	saved.Spent, saved.UnderDelivery = 5_000_000, 5_000_000
	if err := h.ledger.SaveReport(ctx, saved); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(h.ok("--json", "report", "c1")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Provisional || v.Spent != 5_000_000 {
		t.Errorf("saved report: %+v", v)
	}
	if out := h.ok("report", "c1"); !strings.Contains(out, "report c1 2099-03-07 (UTC): final") {
		t.Errorf("saved report: %q", out)
	}

	if r := h.run("report", "c1", "--day", "2099-03-06"); r.code != 1 || !strings.Contains(r.stderr, "campaign c1 has no day 2099-03-06 in the ledger") {
		t.Errorf("day never opened: %+v", r)
	}
	if r := h.run("report", "c1", "--day", "2099-3-6"); r.code != 2 || !strings.Contains(r.stderr, `report: --day "2099-3-6": want a date YYYY-MM-DD`) {
		t.Errorf("bad --day: %+v", r)
	}
	if r := h.run("report", "nope"); r.code != 1 || !strings.Contains(r.stderr, `unknown campaign "nope"`) {
		t.Errorf("unknown campaign: %+v", r)
	}
}

func TestYesterdayAcrossDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// 2026-03-08 is 23 hours long in New York; the day after it, early.
	now := time.Date(2026, 3, 9, 0, 30, 0, 0, ny)
	if got := yesterday(now, ny).Key; got != "2026-03-08" {
		t.Errorf("yesterday of %v = %s", now, got)
	}
	now = time.Date(2026, 11, 2, 0, 10, 0, 0, ny) // after the 25-hour day
	if got := yesterday(now, ny).Key; got != "2026-11-01" {
		t.Errorf("yesterday of %v = %s", now, got)
	}
}

func TestStatus(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The fleet: host-a leads the reconciler election, host-b waits.
	etcd, err := embedded.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	etcdUp := true
	t.Cleanup(func() {
		if etcdUp {
			etcd.Close()
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if _, err := reconcile.NewEtcdElector(cli, "host-a", 5).Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	standby := make(chan error, 1)
	go func() {
		_, err := reconcile.NewEtcdElector(cli, "host-b", 5).Campaign(ctx)
		standby <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-standby
	})

	// c1: open, 5units of 10units leased by two daemons, one lease expired.
	// c2: paused, today not open. c3: everything leased: exhausted.
	h.ok("campaign", "set", "c1", "--daily", "10units", "--shards", "2")
	h.ok("campaign", "set", "c2", "--daily", "1units", "--tz", "Europe/Paris", "--curve", "evening-peak")
	h.ok("campaign", "pause", "c2")
	h.ok("campaign", "set", "c3", "--daily", "1", "--shards", "1")
	day := h.openToday("c1")
	h.openToday("c3")
	s := func(id string, shard int) lease.ShardKey {
		return lease.ShardKey{Campaign: id, Day: day.Key, Shard: shard}
	}
	grant(t, h.ledger, s("c1", 0), "L1", "host-a", 4_000_000, t0, t0.Add(30*time.Second), day.Start)
	grant(t, h.ledger, s("c1", 1), "L2", "host-b", 1_000_000, t0.Add(-2*time.Minute), t0.Add(-time.Minute), day.Start)
	grant(t, h.ledger, s("c3", 0), "L3", "host-a", 5, t0, t0.Add(30*time.Second), day.Start)

	global := []string{"--etcd", etcd.Endpoint + ", " + etcd.Endpoint}
	var v statusView
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := json.Unmarshal([]byte(h.ok(append(global, "--json", "status")...)), &v); err != nil {
			t.Fatal(err)
		}
		if len(v.Reconciler.Standby) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := v.Reconciler; r.Leader != "host-a" || len(r.Standby) != 1 || r.Standby[0] != "host-b" || r.Error != "" {
		t.Errorf("reconciler: %+v", r)
	}
	wantDaemons := []holderView{
		{Holder: "host-a", Leases: 2, Micros: 4_000_001, Campaigns: 2},
		{Holder: "host-b", Leases: 1, Micros: 1_000_000, Expired: 1, Campaigns: 1},
	}
	if len(v.Daemons) != 2 || v.Daemons[0] != wantDaemons[0] || v.Daemons[1] != wantDaemons[1] {
		t.Errorf("daemons: %+v\nwant %+v", v.Daemons, wantDaemons)
	}
	flatTarget := bucket.Flat(24).AtTime(t0, day) // 23:30 UTC: 97.9%
	if len(v.Campaigns) != 3 {
		t.Fatalf("campaigns: %+v", v.Campaigns)
	}
	for i, want := range []campaignStatus{
		{ID: "c1", TZ: "UTC", Curve: "flat", Day: "2099-03-08", DayOpen: true, State: "active",
			Budget: 10_000_000, Leased: 5_000_000, Remaining: 5_000_000, TargetPPB: &flatTarget},
		{ID: "c2", TZ: "Europe/Paris", Curve: "evening-peak", Day: "2099-03-09", State: "paused"},
		{ID: "c3", TZ: "UTC", Curve: "flat", Day: "2099-03-08", DayOpen: true, State: "exhausted",
			Budget: 1, Leased: 1, TargetPPB: &flatTarget},
	} {
		got := v.Campaigns[i]
		if got.TargetPPB == nil {
			t.Errorf("campaign %s: no target", got.ID)
			continue
		}
		if want.ID == "c2" {
			// 00:30 in Paris on the evening-peak curve: early, small.
			if *got.TargetPPB <= 0 || *got.TargetPPB > bucket.PPB/20 {
				t.Errorf("c2 target %d", *got.TargetPPB)
			}
			want.TargetPPB = got.TargetPPB
		}
		if *got.TargetPPB != *want.TargetPPB {
			t.Errorf("campaign %s: target %d, want %d", got.ID, *got.TargetPPB, *want.TargetPPB)
		}
		got.TargetPPB, want.TargetPPB = nil, nil
		if got != want {
			t.Errorf("campaign %d:\n got %+v\nwant %+v", i, got, want)
		}
	}

	out := h.ok(append(global, "status")...)
	for _, line := range []string{
		"reconciler: leader host-a (standby: host-b)\n",
		"DAEMON  LEASES  LEASED         EXPIRED  CAMPAIGNS\nhost-a  2       4.000001units  0        2\nhost-b  1       1units         1        1\n",
		"CAMPAIGN  DAY         STATE      BUDGET         SPENT   LEASED         SPENT%  TARGET%  PACE\n" +
			"c1        2099-03-08  active     10units        0units  5units         0.00%   97.91%   -97.91 pts\n" +
			"c2        2099-03-09  paused     -              -       -              -       0.73%    day not open\n" +
			"c3        2099-03-08  exhausted  0.000001units  0units  0.000001units  0.00%   97.91%   -97.91 pts\n",
		"\nSPENT counts what daemons have reported: spend from a lease shows as the lease renews or\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("status:\n%s\nwant it to contain %q", out, line)
		}
	}

	// Without --etcd the leader is unknown; with etcd down, status says so
	// and fails after printing what the ledger knows.
	if out := h.ok("status"); !strings.HasPrefix(out, "reconciler: unknown (pass --etcd to read the election)\n") {
		t.Errorf("status without --etcd: %q", out)
	}
	cancel()
	<-standby
	standby <- nil // for the cleanup
	etcd.Close()
	etcdUp = false
	r := h.run("--etcd", etcd.Endpoint, "--json", "status")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 1 || v.Reconciler == nil || v.Reconciler.Error == "" ||
		len(v.Campaigns) != 3 || !strings.Contains(r.stderr, "warning: etcd") {
		t.Errorf("status with etcd down: %+v (%v)", r, err)
	}
}
