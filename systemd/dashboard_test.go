package systemd_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// pacerdMetrics are the metric names pacerd exports (issue 5, part 5), with
// their Prometheus type: a histogram is queried through its _bucket, _sum and
// _count series.
var pacerdMetrics = map[string]string{
	"pacer_spend_decisions_total":         "counter",
	"pacer_spend_duration_seconds":        "histogram",
	"pacer_campaign_tokens_micros":        "gauge",
	"pacer_campaign_reserve_micros":       "gauge",
	"pacer_leases_held":                   "gauge",
	"pacer_lease_calls_total":             "counter",
	"pacer_lease_call_duration_seconds":   "histogram",
	"pacer_ledger_errors_total":           "counter",
	"pacer_reconciler_leader":             "gauge",
	"pacer_broadcasts_sent_total":         "counter",
	"pacer_broadcasts_received_total":     "counter",
	"pacer_refunds_unbacked_micros_total": "counter",
	// The bidder socket (issue 11).
	"pacer_socket_connections":                "gauge",
	"pacer_socket_connections_accepted_total": "counter",
	"pacer_socket_connections_dropped_total":  "counter",
	// The degraded modes (issue 38): each has a panel and an alerting rule
	// (configs/alerts/pacerd.rules.yaml). cmd/pacerd's
	// TestConfigsNameExportedMetrics checks these names against what pacerd
	// registers.
	"pacer_ledger_refusing_leases":                  "gauge",
	"pacer_ledger_clock_offset_seconds":             "gauge",
	"pacer_ledger_lost_writes_total":                "counter",
	"pacer_leases_reasserted_total":                 "counter",
	"pacer_ledger_rollbacks_total":                  "counter",
	"pacer_ledger_frozen_days":                      "gauge",
	"pacer_reconciler_pass_duration_seconds":        "histogram",
	"pacer_reconciler_backlog":                      "gauge",
	"pacer_reconciler_campaigns":                    "gauge",
	"pacer_reconciler_errors_total":                 "counter",
	"pacer_reconciler_pass_commands":                "histogram",
	"pacer_reconciler_full_pass_progress_ratio":     "gauge",
	"pacer_reconciler_full_passes_total":            "counter",
	"pacer_reconciler_terms_lost_total":             "counter",
	"pacer_reconciler_election_session_ttl_seconds": "gauge",
	"pacer_broadcast_rejected_total":                "counter",
	"pacer_broadcasts_refused_total":                "counter",
	"pacer_broadcasts_dropped_total":                "counter",
	"pacer_auction_ids_window_seconds":              "gauge",
	"pacer_auction_ids_remembered":                  "gauge",
	"pacer_auction_ids_memory_bytes":                "gauge",
}

var metricName = regexp.MustCompile(`\bpacer_[a-zA-Z0-9_]+`)

// TestGrafanaDashboard checks configs/grafana-dashboard.json: it parses, it
// is importable with a Prometheus data source chosen at import time, and
// every metric its queries name is one pacerd exports — and every metric
// pacerd exports has a panel.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "configs/grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Inputs []struct {
			Name, Type, PluginID string
		} `json:"__inputs"`
		SchemaVersion int               `json:"schemaVersion"`
		UID           string            `json:"uid"`
		Title         string            `json:"title"`
		Panels        []json.RawMessage `json:"panels"`
		Templating    struct {
			List []json.RawMessage `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json does not parse: %v", err)
	}
	if dash.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d; want a current Grafana schema (>= 36)", dash.SchemaVersion)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	if !slices.ContainsFunc(dash.Inputs, func(in struct{ Name, Type, PluginID string }) bool {
		return in.Name == "DS_PROMETHEUS" && in.Type == "datasource" && in.PluginID == "prometheus"
	}) {
		t.Error(`__inputs has no DS_PROMETHEUS prometheus data source`)
	}

	type target struct {
		Expr       string          `json:"expr"`
		RefID      string          `json:"refId"`
		Datasource json.RawMessage `json:"datasource"`
	}
	type panel struct {
		ID         int                       `json:"id"`
		Type       string                    `json:"type"`
		Title      string                    `json:"title"`
		Datasource json.RawMessage           `json:"datasource"`
		GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
		Targets    []target                  `json:"targets"`
		Panels     []json.RawMessage         `json:"panels"`
	}
	var exprs []string
	ids := map[int]string{}
	var walk func(raw []json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("panel: %v", err)
			}
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: bad or missing gridPos", p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no queries", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q, query %s: empty expr", p.Title, tg.RefID)
				}
				for _, ds := range []json.RawMessage{p.Datasource, tg.Datasource} {
					if !strings.Contains(string(ds), "${DS_PROMETHEUS}") {
						t.Errorf("panel %q: data source %s, want ${DS_PROMETHEUS}", p.Title, ds)
					}
				}
				if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
					t.Errorf("panel %q: unbalanced brackets in %s", p.Title, tg.Expr)
				}
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		exprs = append(exprs, string(v)) // variable queries name metrics too
	}

	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			base := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suf); ok && pacerdMetrics[b] == "histogram" {
					base = b
				}
			}
			kind, ok := pacerdMetrics[base]
			switch {
			case !ok:
				t.Errorf("dashboard queries %s, which pacerd does not export", name)
			case kind == "histogram" && base == name:
				t.Errorf("dashboard queries histogram %s without _bucket/_sum/_count", name)
			case kind == "counter" && !strings.Contains(e, "rate("+name) && !strings.Contains(e, "increase("+name):
				t.Errorf("counter %s used without rate() or increase(): %s", name, e)
			}
			used[base] = true
		}
	}
	for name := range pacerdMetrics {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}
