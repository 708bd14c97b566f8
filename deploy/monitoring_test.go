package deploy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []rule `yaml:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// served is what a process's /metrics serves: the families gathered from
// a registry with every database gauge, a source and a sink, with their
// labels.
type served struct {
	names  map[string]bool
	labels map[string]map[string]bool
}

func gather(t *testing.T) served {
	t.Helper()
	m := metrics.New()
	m.CollectDatabase(pgtest.Pool(t), metrics.SourceGauges|metrics.OutboxGauges, []string{"log"}, 0)
	m.InitSource("s")
	m.InitSink("log")
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := served{names: map[string]bool{}, labels: map[string]map[string]bool{}}
	for _, f := range fams {
		names := []string{f.GetName()}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			names = append(names, f.GetName()+"_bucket", f.GetName()+"_sum", f.GetName()+"_count")
		}
		for _, n := range names {
			s.names[n] = true
			s.labels[n] = map[string]bool{}
			for _, mm := range f.GetMetric() {
				for _, l := range mm.GetLabel() {
					s.labels[n][l.GetName()] = true
				}
			}
			if strings.HasSuffix(n, "_bucket") {
				s.labels[n]["le"] = true
			}
		}
	}
	return s
}

var (
	metricTokenRE = regexp.MustCompile(`\b((?:lookout|go|process)_[a-z0-9_]+)(\{[^}]*\})?`)
	matcherRE     = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)`)
)

// checkExpr checks that every metric a PromQL expression names is one the
// code exports (lookout_* from internal/metrics; go_* and process_* from
// the collectors every process registers), and that its label matchers
// name labels the metric has.
func checkExpr(t *testing.T, where, expr string, exported map[string]bool, s served) []string {
	t.Helper()
	var used []string
	for _, m := range metricTokenRE.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		used = append(used, name)
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suf); ok && exported[b] {
				base = b
			}
		}
		if strings.HasPrefix(name, "lookout_") && !exported[base] {
			t.Errorf("%s: %s is not a metric internal/metrics exports", where, name)
			continue
		}
		if !strings.HasPrefix(name, "lookout_") && !s.names[name] {
			t.Errorf("%s: %s is not served by a lookout process", where, name)
			continue
		}
		if labels, ok := s.labels[name]; ok && len(labels) > 0 && m[2] != "" {
			for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
				if l := lm[1]; !labels[l] && l != "job" && l != "instance" && l != "pod" && l != "service" {
					t.Errorf("%s: %s has no label %q (it has %v)", where, name, l, keys(labels))
				}
			}
		}
	}
	return used
}

// TestDashboard checks every query of the Grafana dashboard against the
// metrics the code exports, and that it shows each thing an operator
// watches.
func TestDashboard(t *testing.T) {
	exported := exportedMetrics(t)
	s := gather(t)
	for n := range s.names {
		if base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count"); strings.HasPrefix(n, "lookout_") && !exported[n] && !exported[base] {
			t.Errorf("the registry serves %s, which the scan of internal/metrics did not find: the scan is broken", n)
		}
	}
	var d struct {
		Title      string            `json:"title"`
		UID        string            `json:"uid"`
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	raw := readFile(t, "deploy/grafana/lookout.json")
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("deploy/grafana/lookout.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("deploy/grafana/lookout.json: no title, uid or panels")
	}
	var used []string
	ids := map[int]bool{}
	for _, p := range d.Panels {
		var panel struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		}
		if err := json.Unmarshal(p, &panel); err != nil {
			t.Fatal(err)
		}
		if ids[panel.ID] {
			t.Errorf("panel id %d twice", panel.ID)
		}
		ids[panel.ID] = true
		if panel.Type != "row" && len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, tg := range panel.Targets {
			used = append(used, checkExpr(t, fmt.Sprintf("panel %q", panel.Title), tg.Expr, exported, s)...)
		}
	}
	for _, v := range d.Templating.List {
		used = append(used, checkExpr(t, "variable "+v.Name, v.Definition, exported, s)...)
	}
	// runs, lateness, failures, changes, decisions, model calls and
	// latency, deliveries, dead letters, alerts
	for _, want := range []string{
		"lookout_polls_finished_total", "lookout_schedule_lateness_seconds_bucket", "lookout_records_changed_total",
		"lookout_decisions_total", "lookout_model_calls_total", "lookout_model_latency_seconds_bucket",
		"lookout_notifications_delivered_total", "lookout_dead_notifications", "lookout_alerts_total",
		"lookout_pending_changes", "lookout_change_decision_lag_seconds_bucket",
	} {
		if !slices.Contains(used, want) {
			t.Errorf("the dashboard shows no %s", want)
		}
	}
}

// TestAlertRules checks the Prometheus rules: metric names the code
// exports, one rule per watchdog alert kind, and the PrometheusRule of the
// base holding the same groups as deploy/prometheus/rules.yaml.
func TestAlertRules(t *testing.T) {
	exported := exportedMetrics(t)
	s := gather(t)
	var file struct {
		Groups []ruleGroup `yaml:"groups"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/prometheus/rules.yaml"), &file); err != nil {
		t.Fatalf("deploy/prometheus/rules.yaml: %v", err)
	}
	names := map[string]bool{}
	byKind := map[string]rule{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			where := "rule " + r.Alert
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: want alert, expr, labels.severity and annotations.summary", where)
			}
			if names[r.Alert] {
				t.Errorf("%s appears twice", where)
			}
			names[r.Alert] = true
			if len(checkExpr(t, where, r.Expr, exported, s)) == 0 && !strings.Contains(r.Expr, `up{job="lookout"}`) {
				t.Errorf("%s: its expression names no lookout metric", where)
			}
			if k := r.Labels["watchdog_kind"]; k != "" {
				byKind[k] = r
			}
		}
	}
	for _, k := range watchdogKinds(t) {
		r, ok := byKind[k]
		if !ok {
			t.Errorf("the watchdog raises %q alerts; no rule has watchdog_kind: %s", k, k)
			continue
		}
		if !strings.Contains(r.Expr, fmt.Sprintf(`lookout_alerts_total{kind=%q}`, k)) {
			t.Errorf("rule %s: its expression does not follow lookout_alerts_total{kind=%q}", r.Alert, k)
		}
	}
	for _, o := range baseObjects(t) {
		if o.Kind == "PrometheusRule" && !reflect.DeepEqual(o.Spec.Groups, file.Groups) {
			t.Errorf("%s: its groups differ from deploy/prometheus/rules.yaml (copy them over)", o.file)
		}
	}
}
