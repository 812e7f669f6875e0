package sim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const curvesDir = "../configs/curves"

func TestParseScenarioErrors(t *testing.T) {
	base := "date: 2026-11-21\ncurves_dir: " + curvesDir + "\nhosts: [{name: a}]\n"
	camp := "campaigns: [{id: c1, rate: 10}]\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", base + camp + "hostz: 1\n", "field hostz not found"},
		{"no date", "curves_dir: " + curvesDir + "\nhosts: [{name: a}]\n" + camp, "date: missing"},
		{"bad date", strings.Replace(base, "2026-11-21", "21/11/2026", 1) + camp, "not YYYY-MM-DD"},
		{"no hosts", "date: 2026-11-21\ncurves_dir: " + curvesDir + "\n" + camp, "hosts: none"},
		{"no campaigns", base, "campaigns: none"},
		{"bad duration", base + camp + "step: 5\n", "not a duration"},
		{"step and tick", base + camp + "step: 1s\narrival_tick: 300ms\n", "must divide step"},
		{"unknown curve", base + "campaigns: [{id: c1, rate: 10, curve: nope}]\n", `curve "nope": not in`},
		{"auto curve, curve traffic", base + "campaigns: [{id: c1, rate: 10, curve: auto, traffic: curve}]\n", "known only once the fleet fits it"},
		{"bad tz", base + "campaigns: [{id: c1, rate: 10, tz: Mars/Olympus}]\n", "not an IANA zone"},
		{"bad id", base + "campaigns: [{id: 'a{b}', rate: 10}]\n", "want 1 to 128 characters"},
		{"duplicate id", base + "campaigns: [{id: c1, rate: 10}, {id: c1, rate: 5}]\n", "id used twice"},
		{"zero rate", base + "campaigns: [{id: c1}]\n", "rate 0"},
		{"bad traffic", base + "campaigns: [{id: c1, rate: 10, traffic: sine}]\n", `"sine": want flat`},
		{"missing csv", base + "campaigns: [{id: c1, rate: 10, traffic: 'csv:nope.csv'}]\n", "nope.csv"},
		{"kill unknown host", base + camp + "faults: [{at: 1h, kill: zz}]\n", `no host named "zz"`},
		{"two faults in one", base + camp + "faults: [{at: 1h, kill: a, stop_nats: true}]\n", "exactly one of"},
		{"refuse unknown host", base + camp + "faults: [{at: 1h, refuse_leases: zz, for: 1h}]\n", `refuse_leases: no host named "zz"`},
		{"refuse for no time", base + camp + "faults: [{at: 1h, refuse_leases: a}]\n", "needs a positive for"},
		{"for without refuse", base + camp + "faults: [{at: 1h, kill: a, for: 1h}]\n", "for is refuse_leases's duration"},
		{"baseline campaign", base + camp + "baselines: {campaigns: [c9]}\n", `"c9" is not a campaign`},
		{"baseline name", base + camp + "baselines: {disable: [pacer]}\n", "want lua, batch or nopacing"},
		{"bids", base + camp + "bids: {dist: pareto}\n", "want lognormal or uniform"},
		{"warm-up", base + camp + "warmup: 25h\n", "want 0 to 24h"},
		{"expect a share", base + "campaigns: [{id: c1, rate: 10, expect: {tracking_max: 2}}]\n", "expect.tracking_max 2: want a share"},
		{"expect below_ideal alone", base + "campaigns: [{id: c1, rate: 10, expect: {below_ideal: 0.002}}]\n", "give expect.utilisation too"},
	} {
		_, err := ParseScenario([]byte(tc.yaml), ".")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

func TestParseScenarioDefaultsAndBudget(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "hours.csv")
	var b strings.Builder
	b.WriteString("hour,weight\n")
	for h := range 24 {
		w := "1"
		if h >= 12 {
			w = "3"
		}
		b.WriteString(strconv.Itoa(h) + "," + w + "\n")
	}
	if err := os.WriteFile(csv, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(curvesDir)
	s, err := ParseScenario([]byte(`
date: 2026-11-21
curves_dir: `+abs+`
hosts: [{name: a}, {name: b, weight: 3}]
bids: {mean_micros: 1000}
campaigns:
  - {id: c1, rate: 10, demand: 2}
  - {id: c2, rate: 10, budget_micros: 432000000, traffic: "csv:hours.csv", curve: daytime}
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	// 10/s x 86,400 s x 1,000 micros / 2
	if s.Campaigns[0].BudgetMicros != 432_000_000 || s.Campaigns[1].Demand != 2 {
		t.Fatalf("budget %d, demand %v", s.Campaigns[0].BudgetMicros, s.Campaigns[1].Demand)
	}
	if s.Hosts[0].Weight != 1 || s.Step == 0 || s.Campaigns[0].Curve != "flat" || s.Campaigns[0].Shards != 8 {
		t.Fatalf("defaults not applied: %+v", s)
	}
	if got := s.shapes[1].at(0.25); !near(got, 0.5) { // mean of 1,1..3,3 is 2
		t.Fatalf("csv shape at 06:00 = %v, want 0.5", got)
	}
}

func TestScenarioFilesParse(t *testing.T) {
	files, _ := filepath.Glob("../configs/scenarios/*.yaml")
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, f := range files {
		if _, err := LoadScenario(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
