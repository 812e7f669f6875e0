package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/daemon"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/pacer/pacer/lease"
	"github.com/pacer/pacer/reconcile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"
)

const (
	alertRules     = "../../configs/alerts/pacerd.rules.yaml"
	alertRuleTests = "../../configs/alerts/pacerd.rules.test.yaml"
	dashboard      = "../../configs/grafana-dashboard.json"
)

// exportedMetrics returns the name of every metric family pacerd's /metrics
// serves (those with no sample yet included: the collectors describe them),
// from the same collectors admin registers.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	// The client never dials: describing metrics touches no server.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	d, err := daemon.New(lease.New(rdb, lease.Config{}, nil), daemon.Config{Holder: "h", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	rc := reconcile.New(d.Ledger(), reconcile.Config{})
	ch := make(chan *prometheus.Desc, 1024)
	for _, c := range metricCollectors(d, nil, rc, &broadcast.Broadcaster{}) {
		c.Describe(ch)
	}
	close(ch)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for desc := range ch {
		m := fqName.FindStringSubmatch(desc.String())
		if m == nil {
			t.Fatalf("no name in %s", desc)
		}
		names[m[1]] = true
	}
	return names
}

var seriesName = regexp.MustCompile(`\bpacer_[a-z0-9_]+`)

// base strips a histogram's series suffix when the family is registered.
func base(name string, exported map[string]bool) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suf); ok && exported[b] {
			return b
		}
	}
	return name
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestConfigsNameExportedMetrics: every pacer_ metric the alerting rules and
// the Grafana dashboard name is one pacerd registers, every degraded mode
// (docs/OPERATIONS.md's runbook) has an alert on its metric, and every
// pacer_ metric pacerd registers has a dashboard panel.
func TestConfigsNameExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	if !exported["pacer_ledger_refusing_leases"] || !exported["pacer_reconciler_backlog"] || !exported["pacer_broadcast_rejected_total"] {
		t.Fatalf("the collectors describe too little: %v", exported)
	}
	rules := readRules(t)
	alerted := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("rule %q: want alert, expr, a severity label, a summary and a description", r.Alert)
			}
			for _, n := range seriesName.FindAllString(r.Expr, -1) {
				if b := base(n, exported); !exported[b] {
					t.Errorf("alert %s names %s, which pacerd does not export", r.Alert, n)
				} else {
					alerted[b] = true
				}
			}
		}
	}
	for _, m := range []string{
		"pacer_ledger_refusing_leases", "pacer_ledger_clock_offset_seconds", "pacer_ledger_errors_total",
		"pacer_ledger_lost_writes_total", "pacer_ledger_rollbacks_total", "pacer_ledger_frozen_days",
		"pacer_reconciler_leader", "pacer_reconciler_errors_total", "pacer_reconciler_pass_duration_seconds",
		"pacer_reconciler_backlog", "pacer_broadcast_rejected_total", "pacer_broadcasts_refused_total",
	} {
		if !alerted[m] {
			t.Errorf("no alerting rule watches %s", m)
		}
	}

	b, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range seriesName.FindAllString(tg.Expr, -1) {
				if b := base(n, exported); !exported[b] {
					t.Errorf("the dashboard queries %s, which pacerd does not export", n)
				} else {
					shown[b] = true
				}
			}
		}
	}
	for n := range exported {
		if strings.HasPrefix(n, "pacer_") && !shown[n] {
			t.Errorf("pacerd exports %s and no dashboard panel shows it", n)
		}
	}
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	return f
}

// TestAlertRules runs promtool on the rules: they load, and each alert fires
// on its degraded mode's series and stays quiet on a healthy fleet
// (pacerd.rules.test.yaml). The clock alert fires at half the default
// lease.skew_bound, as its description says.
func TestAlertRules(t *testing.T) {
	for _, args := range [][]string{{"check", "rules", alertRules}, {"test", "rules", alertRuleTests}} {
		if _, err := proctest.Promtool("", args...); errors.Is(err, proctest.ErrNoPromtool) {
			t.Fatal(err)
		} else if err != nil {
			t.Error(err)
		}
	}
	def, err := daemon.Config{Holder: "h"}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	rules := readRules(t)
	found := false
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "PacerClockOffset" {
				continue
			}
			found = true
			_, threshold, _ := strings.Cut(r.Expr, "> ")
			s, err := strconv.ParseFloat(strings.TrimSpace(threshold), 64)
			if want := (def.SkewBound / 2).Seconds(); err != nil || s != want {
				t.Errorf("PacerClockOffset fires at %q, want half the default skew bound (%v): %gs", threshold, def.SkewBound, want)
			}
			if !strings.Contains(r.Annotations["description"], "default "+def.SkewBound.String()) {
				t.Errorf("PacerClockOffset's description does not quote the default skew bound %v", def.SkewBound)
			}
		}
	}
	if !found {
		t.Error("no PacerClockOffset rule")
	}
}
