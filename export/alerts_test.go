package export_test

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/proctest"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"
)

// The alerting rules load in promtool and each alert fires on its fault's
// series and none on an exporter that keeps up (pacer-export.rules.test.yaml);
// every rule has an expression, a severity and a summary, and every
// pacer_export_ series an expression names is one the exporter exports.
func TestAlertRules(t *testing.T) {
	for _, args := range [][]string{{"check", "rules", "../configs/alerts/pacer-export.rules.yaml"}, {"test", "rules", "../configs/alerts/pacer-export.rules.test.yaml"}} {
		if _, err := proctest.Promtool("", args...); errors.Is(err, proctest.ErrNoPromtool) {
			t.Fatal(err)
		} else if err != nil {
			t.Error(err)
		}
	}
	b, err := os.ReadFile("../configs/alerts/pacer-export.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
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
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := export.NewMetrics(reg)
	m.Errors.WithLabelValues("sql")
	m.Gaps.WithLabelValues("trimmed")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	series := regexp.MustCompile(`pacer_export_[a-z_]+`)
	rules := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rules++
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v: want alert, expr, a severity label and a summary", r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", r.Alert, err)
				}
			}
			for _, s := range series.FindAllString(r.Expr, -1) {
				if !slices.Contains(names, s) {
					t.Errorf("%s: %s is not a series the exporter exports (%v)", r.Alert, s, names)
				}
			}
		}
	}
	if rules < 4 {
		t.Fatalf("%d rules; want lag, stall, errors and gap alerts", rules)
	}
}
