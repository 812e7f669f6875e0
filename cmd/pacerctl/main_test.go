package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/redistest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/transport"
)

// t0 is "now" in every test: late on 8 March in UTC, already 9 March in
// Paris, so a campaign's day visibly follows its own time zone. It is far in
// the future because the ledger's keys expire at real instants derived from
// the day (retention), which must not have passed on the Redis server.
var t0 = time.Date(2099, 3, 8, 23, 30, 0, 0, time.UTC)

type result struct {
	code           int
	stdout, stderr string
}

// harness runs pacerctl in-process against a real redis-server.
type harness struct {
	t      *testing.T
	redis  *redistest.Server
	ledger *lease.Ledger
	global []string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	srv := redistest.Start(t)
	return &harness{
		t:      t,
		redis:  srv,
		ledger: lease.New(srv.Client(), lease.Config{}, nil),
		global: []string{"--redis", srv.Socket, "--curves", "../../configs/curves"},
	}
}

func runArgs(args ...string) result {
	var out, errOut bytes.Buffer
	code := run(context.Background(), env{stdout: &out, stderr: &errOut, now: func() time.Time { return t0 }}, args)
	return result{code, out.String(), errOut.String()}
}

func (h *harness) run(args ...string) result {
	return runArgs(append(append([]string{}, h.global...), args...)...)
}

// ok runs a command that must succeed and returns its stdout.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("pacerctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func (h *harness) get(id string) map[string]any {
	h.t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(h.ok("campaign", "get", id)), &m); err != nil {
		h.t.Fatal(err)
	}
	return m
}

// openToday opens the campaign's current day in the ledger, as the
// reconciler would at local midnight.
func (h *harness) openToday(id string) bucket.Day {
	h.t.Helper()
	ctx := context.Background()
	c, err := h.ledger.GetCampaign(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	day := bucket.DayOf(t0, c.Location())
	if _, err := h.ledger.OpenDay(ctx, c, day.Key, day.Start, t0); err != nil {
		h.t.Fatal(err)
	}
	return day
}

// wantFields compares the named JSON fields (numbers as float64).
func wantFields(t *testing.T, step string, got map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %s = %v (%T), want %v (%T)", step, k, got[k], got[k], w, w)
		}
	}
}

func TestCampaignRoundTrip(t *testing.T) {
	h := newHarness(t)

	out := h.ok("campaign", "set", "c1", "--daily", "5units", "--tz", "Europe/Paris", "--curve", "evening-peak")
	if want := "campaign c1 created (version 1): daily 5000000 micros (5units), tz Europe/Paris, curve evening-peak, 8 shards, active\n" +
		"today 2099-03-09 is not open yet: it will open with the new budget\n"; out != want {
		t.Errorf("set c1:\n got %q\nwant %q", out, want)
	}
	wantFields(t, "get c1", h.get("c1"), map[string]any{
		"id": "c1", "daily_micros": 5e6, "tz": "Europe/Paris", "curve": "evening-peak", "shards": 8.0,
		"state": "active", "version": 1.0, "day": "2099-03-09", "day_open": false,
		"budget": 0.0, "spent": 0.0, "available": 0.0, "leased": 0.0, "locked": 0.0, "lost": 0.0,
	})

	// Fields not given keep their values; flags may come before the id.
	h.ok("campaign", "set", "--shards", "4", "c1")
	wantFields(t, "get c1 after --shards", h.get("c1"), map[string]any{
		"daily_micros": 5e6, "tz": "Europe/Paris", "curve": "evening-peak", "shards": 4.0, "version": 2.0,
	})
	if out := h.ok("campaign", "set", "c1", "--shards", "4"); !strings.Contains(out, "campaign c1 unchanged (version 2)") {
		t.Errorf("no-op set: %q", out)
	}

	// New campaigns default to UTC, flat, 8 shards.
	h.ok("campaign", "set", "c0", "--daily", "1500000")
	wantFields(t, "get c0", h.get("c0"), map[string]any{
		"daily_micros": 1.5e6, "tz": "UTC", "curve": "flat", "shards": 8.0, "state": "active", "day": "2099-03-08",
	})

	if out := h.ok("campaign", "pause", "c1"); out != "campaign c1 paused (version 3); daemons apply it at their next campaign refresh\n" {
		t.Errorf("pause: %q", out)
	}
	wantFields(t, "get c1 paused", h.get("c1"), map[string]any{"state": "paused", "version": 3.0})
	if out := h.ok("campaign", "pause", "c1"); out != "campaign c1 is already paused (version 3)\n" {
		t.Errorf("pause again: %q", out)
	}
	h.ok("campaign", "resume", "c1")
	wantFields(t, "get c1 resumed", h.get("c1"), map[string]any{"state": "active", "version": 4.0})

	// Today's spent share shows once the day is open.
	h.openToday("c0")
	want := "ID  DAILY     TZ            CURVE         SHARDS  STATE   SPENT TODAY\n" +
		"c0  1.5units  UTC           flat          8       active  0.0%\n" +
		"c1  5units    Europe/Paris  evening-peak  4       active  -\n"
	if out := h.ok("campaign", "list"); out != want {
		t.Errorf("list:\n%s\nwant:\n%s", out, want)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(h.ok("--json", "campaign", "list")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("list --json: %v", list)
	}
	wantFields(t, "list[0]", list[0], map[string]any{"id": "c0", "day_open": true, "budget": 1.5e6, "locked": 1.5e6})
	wantFields(t, "list[1]", list[1], map[string]any{"id": "c1", "day_open": false})

	// Failures that are not usage errors: exit 1.
	r := h.run("campaign", "get", "nope")
	if r.code != 1 || r.stderr != "pacerctl: campaign get: unknown campaign \"nope\"\n" {
		t.Errorf("get nope: %+v", r)
	}
	if r := h.run("campaign", "pause", "nope"); r.code != 1 || !strings.Contains(r.stderr, `unknown campaign "nope"`) {
		t.Errorf("pause nope: %+v", r)
	}
}

func TestCampaignSetAdjustsOpenDay(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.ok("campaign", "set", "c1", "--daily", "10units", "--shards", "1")
	day := h.openToday("c1")
	if day.Key != "2099-03-08" {
		t.Fatalf("day %s", day.Key)
	}

	// A raise and a cut that fits are applied in full.
	out := h.ok("campaign", "set", "c1", "--daily", "12units")
	if want := "campaign c1 updated (version 2): daily 12000000 micros (12units), tz UTC, curve flat, 1 shards, active\n" +
		"today 2099-03-08 is open: budget 10000000 -> 12000000 micros (+2000000)\n"; out != want {
		t.Errorf("raise:\n got %q\nwant %q", out, want)
	}
	h.ok("campaign", "set", "c1", "--daily", "4units")
	wantFields(t, "after cut", h.get("c1"), map[string]any{"budget": 4e6, "locked": 4e6, "day_open": true})

	// Lease part of the budget, then cut to zero: the cut is applied in full,
	// the leased part as a pending cut taken back as the lease returns.
	k := lease.ShardKey{Campaign: "c1", Day: day.Key, Shard: 0}
	g, err := h.ledger.Grant(ctx, lease.GrantRequest{Shard: k, LeaseID: "L1", Holder: "h1", Want: 3_000_000,
		Expiry: t0.Add(30 * time.Second), Now: t0, Pace: lease.Pace{Now: bucket.PPB, Cap: bucket.PPB},
		Grace: 4 * time.Second, DayStart: day.Start})
	if err != nil || g.Granted == 0 {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	out = h.ok("campaign", "set", "c1", "--daily", "0")
	want := fmt.Sprintf("today 2099-03-08 is open: budget 4000000 -> 0 micros (-4000000)\n"+
		"%d micros of the cut were already leased: they are taken back as those leases return (cut_pending in campaign get)\n", g.Granted)
	if !strings.HasSuffix(out, want) {
		t.Errorf("cut below what is leased:\n got %q\nwant suffix %q", out, want)
	}
	wantFields(t, "after a cut below leased", h.get("c1"), map[string]any{"budget": float64(g.Granted), "cut_pending": float64(g.Granted), "leased": float64(g.Granted)})
	var res setResult
	if err := json.Unmarshal([]byte(h.ok("--json", "campaign", "set", "c1", "--daily", "0")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Today == nil || !res.Today.Open || res.Today.BudgetAfter != 0 || res.Today.CutPending != g.Granted || res.Campaign.DailyMicros != 0 {
		t.Errorf("--json set: %+v %+v", res, res.Today)
	}
	if r := h.run("check", "c1"); r.code != 0 {
		t.Errorf("check after adjustments: %+v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	h := newHarness(t)
	h.ok("campaign", "set", "c1", "--daily", "1units")
	for _, tc := range []struct {
		args []string
		want string // the first line of stderr
	}{
		{[]string{"campaign", "set", "c1", "--daily", "-5"}, `campaign set: invalid value "-5" for flag -daily: amount "-5" is negative`},
		{[]string{"campaign", "set", "c1", "--daily", "1.5"}, `campaign set: invalid value "1.5" for flag -daily: amount "1.5": a plain number is integer micros; write currency units with the suffix units (1.5units)`},
		{[]string{"campaign", "set", "c1", "--tz", "Mars/Olympus"}, `campaign set: unknown time zone "Mars/Olympus": want an IANA zone such as Europe/Paris or UTC`},
		{[]string{"campaign", "set", "c1", "--tz", "Local"}, `campaign set: unknown time zone "Local": want an IANA zone such as Europe/Paris or UTC`},
		{[]string{"campaign", "set", "bad/id", "--daily", "1"}, `campaign set: bad campaign id "bad/id": want 1 to 128 characters from [A-Za-z0-9_.-]`},
		{[]string{"campaign", "set", "c1", "c2"}, `campaign set: want exactly one campaign id, got 2 arguments`},
		{[]string{"campaign", "set", "new", "--curve", "daytime"}, `campaign set: campaign "new" is new: --daily is required`},
		{[]string{"campaign", "set", "c1", "--curve", "nope"}, `campaign set: unknown curve "nope": ../../configs/curves has daytime, evening-peak, flat, overnight-low`},
		{[]string{"campaign", "set", "c1", "--curve", "Bad"}, `campaign set: curve name "Bad": want 1 to 64 characters from [a-z0-9_-]`},
		{[]string{"campaign", "set", "c1", "--shards", "0"}, `campaign set: --shards 0: want 1 to 256`},
		{[]string{"campaign", "set", "c1", "--daily", "1000000001units"}, `campaign set: --daily 1000000001units: at most 1000000000000000 micros (1000000000units)`},
		{[]string{"campaign", "set", "c1", "--color"}, `campaign set: flag provided but not defined: -color`},
		{[]string{"campaign", "get"}, `campaign get: want exactly one campaign id, got 0 arguments`},
		{[]string{"campaign", "list", "x"}, `campaign list: takes no arguments, got ["x"]`},
		{[]string{"campaign"}, `campaign: want a subcommand: set, get, list, pause, resume`},
		{[]string{"campaign", "delete", "c1"}, `campaign: unknown subcommand "delete" (want set, get, list, pause, resume)`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"check", "a", "b"}, `check: want at most one campaign id, got 2 arguments`},
		{[]string{"spend", "c1", "0"}, `spend: amount must be positive`},
		// A negative number is an argument (refused as money), not a flag.
		{[]string{"spend", "c1", "-5"}, `spend: amount "-5" is negative`},
		{[]string{"refund", "c1", "-1.5units", "a1"}, `refund: amount "-1.5units" is negative`},
		{[]string{"campaign", "set", "c1", "--daily", "86400u"}, `campaign set: invalid value "86400u" for flag -daily: amount "86400u": the suffix u is no longer read (it looks like µ, micro); write 86400units for currency units or 86400000000 for micros`},
		{[]string{"campaign", "list", "--timeout"}, `flag needs an argument: -timeout`},
		{[]string{"campaign", "list", "--timeout", "0s"}, `--timeout 0s: must be positive`},
		{[]string{"spend", "c1"}, `spend: want <campaign> <MONEY> [auction-id], got 1 arguments`},
		{[]string{"refund", "c1", "1.0000001units"}, `refund: amount "1.0000001units" has more than 6 decimals; 0.000001units (1 micro) is the smallest amount`},
		{[]string{"curve", "show"}, `curve show: want exactly one curve name, got 0 arguments`},
	} {
		r := h.run(tc.args...)
		first, _, _ := strings.Cut(r.stderr, "\n")
		if r.code != 2 || first != "pacerctl: "+tc.want {
			t.Errorf("pacerctl %s: exit %d, stderr %q\nwant exit 2, %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "pacerctl: no command given"},
		{[]string{"--redis", "/a.sock,h:1", "campaign", "list"}, `pacerctl: --redis: "/a.sock": a Unix socket path must be the only address (several addresses are Cluster seeds, host:port)`},
		{[]string{"--timeout", "0s", "campaign", "list"}, "pacerctl: --timeout 0s: must be positive"},
		{[]string{"--bogus", "campaign", "list"}, "pacerctl: flag provided but not defined: -bogus"},
	} {
		r := runArgs(tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want+"\n") {
			t.Errorf("pacerctl %q: exit %d, stderr %q; want exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := runArgs(args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%v: %+v", args, r)
		}
		for _, c := range commands() {
			if !strings.Contains(r.stdout, "\n  "+c.name) {
				t.Errorf("%v: usage does not list %q", args, c.name)
			}
		}
	}
	r := runArgs("campaign", "set", "-h")
	if r.code != 0 || !strings.Contains(r.stdout, "Usage: pacerctl campaign set <id>") || !strings.Contains(r.stdout, "-daily") {
		t.Errorf("campaign set -h: %+v", r)
	}
}

// TestGlobalFlagsAnywhere: a global flag means the same before the command,
// after it, or between its arguments; a command's own flags still work, and
// "--" ends the flags.
func TestGlobalFlagsAnywhere(t *testing.T) {
	h := newHarness(t)
	h.ok("campaign", "set", "c1", "--daily", "5units", "--tz", "Europe/Paris")
	first := runArgs("--redis", h.redis.Socket, "--json", "campaign", "list")
	if first.code != 0 || !strings.HasPrefix(first.stdout, "[") {
		t.Fatalf("--json campaign list: %+v", first)
	}
	for _, args := range [][]string{
		{"campaign", "list", "--json", "--redis", h.redis.Socket},
		{"campaign", "--redis=" + h.redis.Socket, "list", "-json"},
		{"--redis", h.redis.Socket, "campaign", "list", "--json=true", "--timeout", "1m"},
	} {
		if r := runArgs(args...); r.code != 0 || r.stdout != first.stdout {
			t.Errorf("pacerctl %s: %+v\nwant the output of --json campaign list:\n%s", strings.Join(args, " "), r, first.stdout)
		}
	}
	// A command flag and a global flag mixed after the positional id.
	r := runArgs("campaign", "set", "c1", "--json", "--daily", "6units", "--redis", h.redis.Socket)
	var set setResult
	if err := json.Unmarshal([]byte(r.stdout), &set); r.code != 0 || err != nil || set.Campaign.DailyMicros != 6_000_000 {
		t.Errorf("campaign set c1 --json --daily 6units --redis ...: %+v %v", r, err)
	}
	// -h after the command is the command's help, not the global usage.
	if r := runArgs("campaign", "list", "--json", "-h"); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: pacerctl campaign list") ||
		!strings.Contains(r.stdout, "global flags (pacerctl help) may be given anywhere") {
		t.Errorf("campaign list --json -h: %+v", r)
	}
	// After "--", a flag-like word is an argument: here a campaign id.
	if r := runArgs("--redis", h.redis.Socket, "campaign", "get", "--", "--json"); r.code != 1 || !strings.Contains(r.stderr, `unknown campaign "--json"`) {
		t.Errorf("campaign get -- --json: %+v", r)
	}
	// A "--" before the command ends the flags there.
	if r := runArgs("--redis", h.redis.Socket, "--", "campaign", "list"); r.code != 0 || !strings.HasPrefix(r.stdout, "ID ") {
		t.Errorf("--redis R -- campaign list: %+v", r)
	}
	if r := runArgs("--redis", h.redis.Socket, "--", "campaign", "list", "--json"); r.code != 2 || !strings.Contains(r.stderr, "flag provided but not defined: -json") {
		t.Errorf("--redis R -- campaign list --json: %+v", r)
	}
}

func TestCheck(t *testing.T) {
	h := newHarness(t)
	h.ok("campaign", "set", "c1", "--daily", "10units", "--shards", "2")
	h.ok("campaign", "set", "c2", "--daily", "3", "--shards", "2", "--tz", "Asia/Tokyo")

	if out := withoutDurability(h.ok("check")); out != "no open campaign-days to check\n" {
		t.Errorf("check with nothing open: %q", out)
	}
	h.openToday("c1")
	h.openToday("c2")
	okC1 := "ok c1 2099-03-08 budget=10000000 locked=10000000 available=0 leased=0 spent=0\n"
	okC2 := "ok c2 2099-03-09 budget=3 locked=3 available=0 leased=0 spent=0\n"
	if out := withoutDurability(h.ok("check", "c1")); out != okC1 {
		t.Errorf("check c1: %q", out)
	}
	if out := withoutDurability(h.ok("check")); out != okC1+okC2 {
		t.Errorf("check: %q", out)
	}

	// Corrupt one shard: seven micros appear from nowhere.
	state := "pacer:{c1/2099-03-08/1}:state"
	if err := h.redis.Client().HSet(context.Background(), state, "locked", 5_000_007).Err(); err != nil {
		t.Fatal(err)
	}
	r := h.run("check")
	wantOut := "FAIL c1 2099-03-08: c1/2099-03-08/1: budget 5000000 != locked 5000007 + available 0 + leased 0 + spent 0 = 5000007 (off by 7)\n" + okC2
	if r.code != 1 || withoutDurability(r.stdout) != wantOut || r.stderr != "pacerctl: check: 1 problem(s) in 2 campaign-day(s) checked\n" {
		t.Errorf("check after corruption: exit %d\nstdout %q\nwant   %q\nstderr %q", r.code, r.stdout, wantOut, r.stderr)
	}
	if r := h.run("check", "c2"); r.code != 0 {
		t.Errorf("check c2 (untouched): %+v", r)
	}
	r = h.run("--json", "check", "c1")
	var days []dayCheck
	if err := json.Unmarshal([]byte(r.stdout), &days); err != nil || r.code != 1 || len(days) != 1 || days[0].OK || len(days[0].Problems) != 1 {
		t.Errorf("check --json: %+v %v", r, err)
	}

	if r := h.run("check", "nope"); r.code != 1 || r.stderr != "pacerctl: check: unknown campaign \"nope\"\n" {
		t.Errorf("check nope: %+v", r)
	}
}

func TestRedisUnreachable(t *testing.T) {
	r := runArgs("--redis", filepath.Join(t.TempDir(), "none.sock"), "--timeout", "5s", "campaign", "list")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "pacerctl: campaign list: list campaigns: dial unix") {
		t.Errorf("%+v", r)
	}
}

func TestCurveCommands(t *testing.T) {
	curves := []string{"--curves", "../../configs/curves"}
	r := runArgs(append(curves, "curve", "list")...)
	want := "NAME           SLOTS  PEAK SLOT         PEAK SHARE\n" +
		"daytime        24     9 (09:00-10:00)   7.52%\n" +
		"evening-peak   24     20 (20:00-21:00)  11.76%\n" +
		"flat           24     0 (00:00-01:00)   4.17%\n" + // 1/24, rounded to the nearest
		"overnight-low  24     8 (08:00-09:00)   5.41%\n" +
		"auto           96     fitted daily per campaign  (pacerctl curve show auto)\n"
	want = strings.ReplaceAll(want, "PEAK SLOT         PEAK SHARE", "PEAK SLOT                  PEAK SHARE")
	want = strings.ReplaceAll(want, ")   ", ")            ")
	want = strings.ReplaceAll(want, ")  1", ")           1")
	if r.code != 0 || r.stdout != want {
		t.Errorf("curve list: %+v\nwant:\n%s", r, want)
	}

	// auto is built in: listed, and explained by curve show with the
	// daemon's own constants.
	r = runArgs(append(curves, "curve", "show", "auto")...)
	for _, s := range []string{
		"curve auto: built in, fitted per campaign-day (96 slots)\n",
		"on the 7 local days before", "bounded to 0.2..5 times the mean share", "With fewer than 200",
		"pacerctl curve fit <campaign> --days 7 --slots 96",
	} {
		if r.code != 0 || !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), strings.Join(strings.Fields(s), " ")) {
			t.Errorf("curve show auto: %+v\nwant it to contain %q", r, s)
		}
	}
	var auto autoDetail
	r = runArgs(append(curves, "curve", "show", "auto", "--json")...)
	if err := json.Unmarshal([]byte(r.stdout), &auto); err != nil || auto.Days != daemon.AutoCurveDays || auto.Slots != daemon.AutoCurveSlots ||
		auto.MinRequests != daemon.AutoCurveMinRequests || !auto.Fitted {
		t.Errorf("curve show auto --json: %+v %v", r, err)
	}
	var list []curveSummary
	r = runArgs(append(curves, "curve", "list", "--json")...)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 5 || list[4].Name != "auto" || !list[4].Fitted {
		t.Errorf("curve list --json: %+v %v", r, err)
	}
	if r := runArgs(append(curves, "curve", "show", "auto", "--png", filepath.Join(t.TempDir(), "a.png"))...); r.code != 2 ||
		!strings.Contains(r.stderr, "auto has no fixed shape to draw") {
		t.Errorf("curve show auto --png: %+v", r)
	}

	r = runArgs(append(curves, "curve", "show", "evening-peak")...)
	for _, s := range []string{
		"curve evening-peak: 24 slots, peak slot 20 (20:00-21:00) with 11.76% of the day\n",
		"  ▁▁▁▁▁▁▁▂▃▃▃▃▃▃▃▃▃▄▅███▆▃\n  0  3  6  9  12 15 18 21\n",
		"  24:00     100.00%",
	} {
		if r.code != 0 || !strings.Contains(r.stdout, s) {
			t.Errorf("curve show: %+v\nwant it to contain %q", r, s)
		}
	}
	r = runArgs(append(curves, "curve", "show", "flat")...)
	if strings.Count(r.stdout, "%       12.50%\n") != 8 {
		t.Errorf("curve show flat: each 3 hours should read 12.50%%:\n%s", r.stdout)
	}
	var detail curveDetail
	r = runArgs(append(curves, "--json", "curve", "show", "flat")...)
	if err := json.Unmarshal([]byte(r.stdout), &detail); err != nil || detail.Slots != 24 || detail.CumulativePPB[24] != bucket.PPB {
		t.Errorf("curve show --json: %+v %v", r, err)
	}
	if r := runArgs(append(curves, "curve", "show", "nope")...); r.code != 1 || !strings.Contains(r.stderr, `unknown curve "nope"`) {
		t.Errorf("curve show nope: %+v", r)
	}

	// No curves directory: a warning, and the built-in flat.
	missing := filepath.Join(t.TempDir(), "missing")
	r = runArgs("--curves", missing, "curve", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "flat") || !strings.Contains(r.stderr, "warning: cannot read the curves directory (open "+missing) {
		t.Errorf("curve list, missing dir: %+v", r)
	}
	// campaign set warns and goes on: the curve may exist where pacerd runs.
	h := newHarness(t)
	r = runArgs("--redis", h.redis.Socket, "--curves", missing, "campaign", "set", "c1", "--daily", "1", "--curve", "custom")
	if r.code != 0 || !strings.Contains(r.stdout, "curve custom") || !strings.Contains(r.stderr, `warning: cannot check that curve "custom" exists: open `+missing) {
		t.Errorf("campaign set, missing curves dir: %+v", r)
	}
	// A directory with a bad file is an error, not a warning.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("name: y\nweights: [1]"), 0o644)
	if r := runArgs("--curves", dir, "curve", "list"); r.code != 1 || !strings.Contains(r.stderr, "x.yaml") {
		t.Errorf("curve list, bad file: %+v", r)
	}
}

func TestSparkline(t *testing.T) {
	flat := make([]int64, 24)
	for i := range flat {
		flat[i] = 1
	}
	if got := sparkline(flat); got != strings.Repeat("█", 24) {
		t.Errorf("flat: %q", got)
	}
	if got := sparkline([]int64{0, 1, 8, 4}); got != " ▁█▄" {
		t.Errorf("levels: %q", got)
	}
	if got := []rune(sparkline(make([]int64, 1440))); len(got) != 96 {
		t.Errorf("1440 slots drawn in %d columns", len(got))
	}
}

func TestParseMoney(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"1500000", 1_500_000, ""},
		{"0", 0, ""},
		{"1.5units", 1_500_000, ""},
		{"0.000001units", 1, ""},
		{"12units", 12_000_000, ""},
		{"007units", 7_000_000, ""},
		{"1.000000units", 1_000_000, ""},
		{"9223372036854775807", math.MaxInt64, ""},
		{"9223372036854.775807units", math.MaxInt64, ""},
		{"1.0000001units", 0, `amount "1.0000001units" has more than 6 decimals; 0.000001units (1 micro) is the smallest amount`},
		{"-1", 0, `amount "-1" is negative`},
		{"-1.5units", 0, `amount "-1.5units" is negative`},
		{"9223372036854775808", 0, `amount "9223372036854775808" is too large`},
		{"9223372036854.775808units", 0, `amount "9223372036854.775808units" is too large`},
		{"9223372036855units", 0, `amount "9223372036855units" is too large`},
		{"99999999999999999999units", 0, `amount "99999999999999999999units" is too large`},
		{"1.5", 0, `amount "1.5": a plain number is integer micros; write currency units with the suffix units (1.5units)`},
		{"", 0, "empty amount"},
		{"1500000micros", 1_500_000, ""},
		{"0micros", 0, ""},
		{"1.5micros", 0, `amount "1.5micros": want integer micros (1500000) or currency units with the suffix units (1.5units)`},
		{"units", 0, `amount "units": want currency units such as 1.5units or 12units`},
		{".5units", 0, `amount ".5units": want currency units such as 1.5units or 12units`},
		{"1.units", 0, `amount "1.units": want currency units such as 1.5units or 12units`},
		// The former suffix u reads as µ: refused, naming both spellings.
		{"86400u", 0, `amount "86400u": the suffix u is no longer read (it looks like µ, micro); write 86400units for currency units or 86400000000 for micros`},
		{"1.5u", 0, `amount "1.5u": the suffix u is no longer read (it looks like µ, micro); write 1.5units for currency units or 1500000 for micros`},
		{"u", 0, `amount "u": want integer micros (1500000) or currency units with the suffix units (1.5units)`},
		{"+1", 0, `amount "+1": want integer micros (1500000) or currency units with the suffix units (1.5units)`},
		{"1e6", 0, `amount "1e6": want integer micros (1500000) or currency units with the suffix units (1.5units)`},
		{"1,000", 0, `amount "1,000": want integer micros (1500000) or currency units with the suffix units (1.5units)`},
		{"1.5U", 0, `amount "1.5U": want integer micros (1500000) or currency units with the suffix units (1.5units)`},
		{"1.5UNITS", 0, `amount "1.5UNITS": want integer micros (1500000) or currency units with the suffix units (1.5units)`},
	} {
		got, err := parseMoney(tc.in)
		switch {
		case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
			t.Errorf("parseMoney(%q) = %d, %v; want error %q", tc.in, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("parseMoney(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatUnits(t *testing.T) {
	for micros, want := range map[int64]string{
		0: "0units", 1: "0.000001units", 1_500_000: "1.5units", 12_000_000: "12units", -2_500_000: "-2.5units",
		math.MaxInt64: "9223372036854.775807units", math.MinInt64: "-9223372036854.775808units",
	} {
		if got := formatUnits(micros); got != want {
			t.Errorf("formatUnits(%d) = %q, want %q", micros, got, want)
		}
		if micros >= 0 {
			if back, err := parseMoney(want); err != nil || back != micros {
				t.Errorf("parseMoney(formatUnits(%d)) = %d, %v", micros, back, err)
			}
		}
	}
}

// fakeSpender is a pacerd stand-in for the local commands: campaign "c1"
// has tokens, "empty" has none, anything else is unknown.
type fakeSpender struct {
	mu      sync.Mutex
	tokens  map[string]int64
	auction []string
}

var _ transport.Spender = (*fakeSpender)(nil)

func (f *fakeSpender) Spend(id pacer.CampaignID, micros pacer.Micros, auctionID string) (pacer.Decision, error) {
	campaign, amount := string(id), int64(micros)
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[campaign]
	switch {
	case !ok:
		return pacer.Paced, fmt.Errorf("unknown campaign %q", campaign)
	case t == 0:
		return pacer.Exhausted, nil
	case t < amount:
		return pacer.Paced, nil
	}
	f.auction = append(f.auction, auctionID)
	f.tokens[campaign] = t - amount
	return pacer.Allowed, nil
}

func (f *fakeSpender) Refund(id pacer.CampaignID, micros pacer.Micros, auctionID string) error {
	campaign, amount := string(id), int64(micros)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tokens[campaign]; !ok {
		return fmt.Errorf("unknown campaign %q", campaign)
	}
	f.tokens[campaign] += amount
	return nil
}

func (f *fakeSpender) Balance(id pacer.CampaignID) (pacer.Balance, error) {
	campaign := string(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[campaign]
	if !ok {
		return pacer.Balance{}, fmt.Errorf("unknown campaign %q", campaign)
	}
	return pacer.Balance{Tokens: t, Reserve: 7, PacePerSecond: 100, State: "active"}, nil
}

func (f *fakeSpender) Info() []transport.InfoField { return nil }

func TestLocalCommands(t *testing.T) {
	// Unix socket paths are limited to ~104 bytes: t.TempDir() can be too long.
	dir, err := os.MkdirTemp("", "pacerctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "pacer.sock")
	ln, err := transport.ListenUnix(sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	sp := &fakeSpender{tokens: map[string]int64{"c1": 2_000_000, "empty": 0}}
	srv := transport.NewServer(sp, transport.ServerConfig{MaxAmountMicros: 5_000_000})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})

	local := func(args ...string) result { return runArgs(append([]string{"--socket", sock}, args...)...) }
	for _, st := range []struct {
		args []string
		code int
		out  string
		err  string
	}{
		{[]string{"spend", "c1", "1.5units", "auction-1"}, 0, "allowed 1\n", ""},
		{[]string{"spend", "c1", "600000"}, 0, "paced 0\n", ""},
		{[]string{"spend", "empty", "1"}, 0, "exhausted -1\n", ""},
		{[]string{"refund", "c1", "0.25units", "auction-1"}, 0, "refunded 250000\n", ""},
		{[]string{"balance", "c1"}, 0, "tokens=750000 reserve=7 pace=100/s state=active\n", ""},
		{[]string{"--json", "spend", "c1", "1"}, 0, "{\n  \"campaign\": \"c1\",\n  \"amount_micros\": 1,\n  \"decision\": \"allowed\",\n  \"reply\": 1\n}\n", ""},
		{[]string{"spend", "nope", "1"}, 1, "", "pacerctl: spend: pacerd: unknown campaign \"nope\"\n"},
		{[]string{"spend", "c1", "6units"}, 1, "", "pacerctl: spend: pacerd: amount 6000000 exceeds the per-call maximum 5000000\n"},
		{[]string{"balance", "nope"}, 1, "", "pacerctl: balance: pacerd: unknown campaign \"nope\"\n"},
	} {
		r := local(st.args...)
		if r.code != st.code || r.stdout != st.out || r.stderr != st.err {
			t.Errorf("pacerctl %s: %+v\nwant exit %d, stdout %q, stderr %q", strings.Join(st.args, " "), r, st.code, st.out, st.err)
		}
	}
	if sp.auction[0] != "auction-1" {
		t.Errorf("auction id not passed: %q", sp.auction)
	}

	r := runArgs("--socket", filepath.Join(dir, "none.sock"), "balance", "c1")
	if r.code != 1 || !strings.Contains(r.stderr, "pacerctl: balance: transport: dial") {
		t.Errorf("no daemon: %+v", r)
	}
}
