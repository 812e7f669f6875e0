package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/clocktest"
	"github.com/pacer/pacer/lease"
	"go.uber.org/zap"
)

// runAt runs pacerctl with the clock at now.
func (h *harness) runAt(now time.Time, args ...string) result {
	var out, errOut bytes.Buffer
	code := run(context.Background(), env{stdout: &out, stderr: &errOut, now: func() time.Time { return now }},
		append(append([]string{}, h.global...), args...))
	return result{code, out.String(), errOut.String()}
}

// topJSON runs top --json at now and decodes it.
func (h *harness) topJSON(now time.Time, args ...string) topView {
	h.t.Helper()
	r := h.runAt(now, append([]string{"top", "--json"}, args...)...)
	if r.code != 0 {
		h.t.Fatalf("top --json: %+v", r)
	}
	var v topView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		h.t.Fatalf("top --json: %v\n%s", err, r.stdout)
	}
	return v
}

// Two real daemons see SPENDs of three campaigns; once they have flushed
// their counts (a minute on their clock), top ranks the campaigns by the
// fleet's SPENDs a second, both hosts' added up.
func TestTopRanksTheFleetsSpends(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"hot", "warm", "idle"} {
		h.ok("campaign", "set", id, "--daily", "1000000units", "--shards", "2")
		h.openToday(id)
	}
	clock := clocktest.At(t0)
	spends := map[string]map[string]int{ // host -> campaign -> SPENDs
		"a": {"hot": 600, "warm": 40},
		"b": {"hot": 300, "warm": 80},
	}
	var fleet []*daemon.Daemon
	for _, host := range []string{"a", "b"} {
		d, err := daemon.New(h.ledger, daemon.Config{Holder: host, Clock: clock, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(context.Background()) })
		for id, n := range spends[host] {
			for i := range n {
				if _, err := d.Spend(pacer.CampaignID(id), 1000, fmt.Sprintf("%s-%s-%d", host, id, i)); err != nil {
					t.Fatalf("%s: SPEND %s: %v", host, id, err)
				}
			}
		}
		fleet = append(fleet, d)
	}
	// A minute on, each daemon's refill loop adds its counts to the ledger.
	now := clock.Add(61 * time.Second)
	for _, d := range fleet {
		d.Step(context.Background())
	}

	// The window is slot 93 (23:15) and slot 94 (23:30) so far: 961 s.
	window := now.Sub(time.Date(2099, 3, 8, 23, 15, 0, 0, time.UTC)).Seconds()
	v := h.topJSON(now)
	if v.Known != 3 || v.Reporting != 2 || len(v.Campaigns) != 2 {
		t.Fatalf("top: %+v; want 2 of 3 campaigns reporting", v)
	}
	for i, want := range []struct {
		id     string
		spends int64
	}{{"hot", 900}, {"warm", 120}} {
		c := v.Campaigns[i]
		if c.ID != want.id || c.Spends != want.spends || c.AskedMicros != want.spends*1000 || c.State != lease.StateActive ||
			c.Since != "2099-03-08T23:15:00Z" {
			t.Errorf("rank %d: %+v; want %s with %d SPENDs since 23:15", i+1, c, want.id, want.spends)
		}
		if r := float64(want.spends) / window; c.SpendsPerSecond < r*0.999 || c.SpendsPerSecond > r*1.001 {
			t.Errorf("%s: %v SPENDs a second; want %v", c.ID, c.SpendsPerSecond, r)
		}
		if c.AskedMicrosPerSecond != want.spends*1000*1000/961_000 {
			t.Errorf("%s: %d micros asked a second; want %d", c.ID, c.AskedMicrosPerSecond, want.spends*1000*1000/961_000)
		}
	}
	if s := v.Campaigns[0].SharePPB; s != 882_352_941 { // 900 of 1020
		t.Errorf("hot's share: %d ppb; want 882352941", s)
	}

	r := h.runAt(now, "top", "--limit", "1")
	want := "2099-03-08T23:31:01Z: 2 of 3 campaigns reported SPENDs, 1.1 a second in all\n" +
		"CAMPAIGN  SPEND/S  SHARE   ASKED/S        STATE   SINCE\n" +
		"hot       0.937    88.23%  0.000936units  active  23:15 UTC\n" +
		"(1 more; --limit 0 shows all)\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("top --limit 1: exit %d\n%s\nwant\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
}

// The window is the current quarter-hour slot of the campaign's local day
// and the one before: at local midnight, the previous day's last; on a DST
// day, slots of 25/96 or 23/96 of an hour, as daemons count them.
func TestTopWindow(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		now            time.Time
		loc            *time.Location
		day, prevDay   string
		slot, prevSlot int
		since          time.Time
	}{
		{t0, time.UTC, "2099-03-08", "2099-03-08", 94, 93, time.Date(2099, 3, 8, 23, 15, 0, 0, time.UTC)},
		{time.Date(2099, 3, 9, 0, 5, 0, 0, time.UTC), time.UTC, "2099-03-09", "2099-03-08", 0, 95, time.Date(2099, 3, 8, 23, 45, 0, 0, time.UTC)},
		{time.Date(2099, 3, 9, 0, 15, 0, 0, time.UTC), time.UTC, "2099-03-09", "2099-03-09", 1, 0, time.Date(2099, 3, 9, 0, 0, 0, 0, time.UTC)},
		// 00:30 in Paris is 23:30 UTC the day before.
		{t0, paris, "2099-03-09", "2099-03-09", 2, 1, time.Date(2099, 3, 9, 0, 15, 0, 0, paris)},
		// 2099-03-08 in New York is 23 hours (DST starts at 02:00), so a
		// slot is 14m22.5s: 12:40 local is 11h40m into the day, slot 48;
		// slot 47 starts 11h15m37.5s in, at 12:15:37.5 local.
		{time.Date(2099, 3, 8, 12, 40, 0, 0, ny), ny, "2099-03-08", "2099-03-08", 48, 47, time.Date(2099, 3, 8, 12, 15, 37, 500_000_000, ny)},
	} {
		w := windowAt(tc.now, tc.loc)
		if w.day != tc.day || w.prevDay != tc.prevDay || w.slot != tc.slot || w.prevSlot != tc.prevSlot || !w.since.Equal(tc.since) {
			t.Errorf("%v in %v: %+v; want days %s/%s, slots %d/%d, since %v", tc.now, tc.loc, w, tc.day, tc.prevDay, tc.slot, tc.prevSlot, tc.since)
		}
	}
}

// At midnight a campaign's rate adds the previous day's last slot; an empty
// ledger and a fleet that reports nothing say so; a campaign whose demand
// hash holds garbage is named, and the others are still ranked.
func TestTopEdges(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	r := h.run("top")
	if r.code != 0 || r.stdout != "2099-03-08T23:30:00Z: no campaigns in the ledger (--redis "+h.redis.Socket+")\n" {
		t.Errorf("empty ledger: %+v", r)
	}
	h.ok("campaign", "set", "night", "--daily", "10units")
	h.ok("campaign", "set", "bad", "--daily", "10units")
	r = h.run("top")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "2099-03-08T23:30:00Z: no SPENDs reported for any of 2 campaigns in the last 15 to 30 minutes.\n") ||
		!strings.Contains(r.stdout, "is a pacerd running against this Redis") {
		t.Errorf("nothing reported: %+v", r)
	}
	if v := h.topJSON(t0); v.Known != 2 || v.Reporting != 0 || v.Campaigns == nil || len(v.Campaigns) != 0 || v.SpendsPerSecond != 0 {
		t.Errorf("nothing reported, JSON: %+v", v)
	}

	rdb := h.redis.Client()
	rdb.HSet(ctx, lease.DemandKey("night", "2099-03-08"), "req:95", 600, "reqm:95", 600_000, "req:94", 1_000_000)
	rdb.HSet(ctx, lease.DemandKey("night", "2099-03-09"), "req:0", 300, "reqm:0", 300_000)
	rdb.HSet(ctx, lease.DemandKey("bad", "2099-03-09"), "req:0", "many")
	now := time.Date(2099, 3, 9, 0, 5, 0, 0, time.UTC)
	r = h.runAt(now, "--json", "top")
	var v topView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 1 || len(v.Campaigns) != 1 {
		t.Fatalf("midnight with a bad hash: %v %+v", err, r)
	}
	if c := v.Campaigns[0]; c.ID != "night" || c.Spends != 900 || c.SpendsPerSecond != 0.75 || c.AskedMicrosPerSecond != 750 ||
		c.Since != "2099-03-08T23:45:00Z" || c.SharePPB != 1_000_000_000 {
		t.Errorf("midnight: %+v; want 900 SPENDs over the 20 minutes since 23:45", c)
	}
	if !strings.Contains(r.stderr, `pacerctl: warning: campaign bad: `) || !strings.Contains(r.stderr, `req:0 is "many", not a count`) {
		t.Errorf("bad hash: stderr %q", r.stderr)
	}
}

func TestTopUsage(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"top", "c1"}, `top: takes no arguments, got ["c1"]`},
		{[]string{"top", "--limit", "-1"}, "top: --limit -1: want 0 (all) or more"},
		{[]string{"top", "--watch", "10ms"}, "top: --watch 10ms: want at least 1s"},
	} {
		if r := h.run(tc.args...); r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: %+v; want exit 2 and %q", tc.args, r, tc.want)
		}
	}
	r := h.run("top", "-h")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("(default %d; 0:\n", defaultTopLimit)) ||
		!strings.Contains(r.stdout, fmt.Sprintf("(default %d)", defaultTopLimit)) {
		t.Errorf("top -h does not quote the default --limit %d: %+v", defaultTopLimit, r)
	}
	ops, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("busiest first (default %d; `--limit 0` for all)", defaultTopLimit); !strings.Contains(string(ops), want) {
		t.Errorf("docs/OPERATIONS.md does not say %q", want)
	}
}

// top --watch prints a round every interval until interrupted; with --json
// each round is one line.
func TestTopWatch(t *testing.T) {
	h := newHarness(t)
	h.ok("campaign", "set", "c1", "--daily", "10units")
	h.redis.Client().HSet(context.Background(), lease.DemandKey("c1", "2099-03-08"), "req:94", 900, "reqm:94", 900)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineWaiter{want: 2, done: cancel}
	var errOut bytes.Buffer
	code := run(ctx, env{stdout: out, stderr: &errOut, now: func() time.Time { return t0 }},
		append(append([]string{}, h.global...), "top", "--json", "--watch", "1s"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if code != 0 || len(lines) != 2 || errOut.Len() != 0 {
		t.Fatalf("top --watch: exit %d, %d lines\n%s\nstderr: %s", code, len(lines), out.String(), errOut.String())
	}
	for _, l := range lines {
		var v topView
		if err := json.Unmarshal([]byte(l), &v); err != nil || v.Reporting != 1 || v.Campaigns[0].Spends != 900 {
			t.Errorf("round %q: %v %+v", l, err, v)
		}
	}
}

// lineWaiter collects output and calls done once it holds want lines.
type lineWaiter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want int
	done func()
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if bytes.Count(w.b.Bytes(), []byte("\n")) >= w.want {
		w.done()
	}
	return len(p), nil
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
