package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/lookout-dev/lookout/internal/metrics"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// perSourceGroup is the group of rules over the per-source gauges of
// metrics.per_source: without it they have no series and never fire.
const perSourceGroup = "lookout-per-source"

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
// a registry with every database gauge (the opt-in per-source ones
// included), a source and a sink, and one call of every instrument, with
// their labels.
type served struct {
	names  map[string]bool
	labels map[string]map[string]bool
	// optIn are the families served only with metrics.per_source.
	optIn map[string]bool
}

func gather(t *testing.T) served {
	t.Helper()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO sources (name, connector, config_hash, last_success_at) VALUES ('s', 'file', 'h', now())`); err != nil {
		t.Fatal(err)
	}
	s := gatherFrom(t, pool, metrics.SourceGauges|metrics.OutboxGauges|metrics.PerSourceGauges)
	bounded := gatherFrom(t, pool, metrics.SourceGauges|metrics.OutboxGauges)
	s.optIn = map[string]bool{}
	for n := range s.names {
		if !bounded.names[n] {
			s.optIn[n] = true
		}
	}
	if len(s.optIn) == 0 {
		t.Fatal("metrics.PerSourceGauges adds no family")
	}
	return s
}

func gatherFrom(t *testing.T, pool *pgxpool.Pool, g metrics.Gauges) served {
	t.Helper()
	m := metrics.New()
	m.CollectDatabase(pool, g, []string{"log"}, 0)
	m.InitConnector("file")
	m.InitSink("log")
	// Every instrument once, so that its labels are known.
	m.PollStarted("file")
	m.PollFinished("s", "file", "failed", time.Second)
	m.ScheduleLateness(time.Second)
	m.RecordsChanged("file", 1, 1, 1)
	m.ClaimsExpired(metrics.ComponentSyncer, 1)
	m.RateLimitWait("h", metrics.LimitHost)
	m.UpstreamResponse("h", 429)
	m.HostBlocked("h")
	m.Decision("filter", "notify")
	m.DuplicatesSuppressed(1)
	m.DecisionLag(time.Second)
	m.ModelCall("llama3.2", "ok", 1, 1, time.Second)
	m.Delivery("log", "dead", time.Second)
	m.TaskRun("completed", time.Second)
	m.Alert("stale")
	m.WebhookDelivery(metrics.DeliveryStored, time.Second)
	m.WebhookProcessed("created", 1)
	m.WebhookRepaired(1)
	m.ConfigReload("applied", time.Now())
	m.Pruned("changes", 1, 1)
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
	groupingRE    = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelValuesRE = regexp.MustCompile(`label_values\(\s*([a-z_:]+)(?:\{[^}]*\})?\s*,\s*([a-z_]+)\s*\)`)
)

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = map[string]bool{"job": true, "instance": true, "pod": true, "service": true, "namespace": true}

// checkExpr checks that every metric a PromQL expression names is one the
// code exports (lookout_* from internal/metrics; go_* and process_* from
// the collectors every process registers), that its label matchers name
// labels the metric has, and that every label it groups by (by, without)
// or lists (Grafana's label_values) is a label of one of the metrics it
// names: `sum by (source)` over series without a source label would draw
// one line, or never fire. Unless optIn, it names no metric served only
// with metrics.per_source (a default deployment would not have it).
func checkExpr(t *testing.T, where, expr string, exported map[string]bool, s served, optIn bool) []string {
	t.Helper()
	var used []string
	defer func() {
		for _, n := range used {
			if s.optIn[n] && !optIn {
				t.Errorf("%s: %s is served only with metrics.per_source: true (put the rule in the lookout-per-source group)", where, n)
			}
		}
		for _, lv := range labelValuesRE.FindAllStringSubmatch(expr, -1) {
			if labels := s.labels[lv[1]]; !labels[lv[2]] {
				t.Errorf("%s: label_values of %s by %q, a label it does not have (it has %v)", where, lv[1], lv[2], keys(labels))
			}
		}
		for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
			for l := range strings.SplitSeq(g[1], ",") {
				l = strings.TrimSpace(l)
				if l == "" || targetLabels[l] || slices.ContainsFunc(used, func(n string) bool { return s.labels[n][l] }) {
					continue
				}
				t.Errorf("%s: groups by %q, which none of %v has", where, l, used)
			}
		}
	}()
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
				if l := lm[1]; !labels[l] && !targetLabels[l] {
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
			used = append(used, checkExpr(t, fmt.Sprintf("panel %q", panel.Title), tg.Expr, exported, s, false)...)
		}
	}
	for _, v := range d.Templating.List {
		used = append(used, checkExpr(t, "variable "+v.Name, v.Definition, exported, s, false)...)
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
			if len(checkExpr(t, where, r.Expr, exported, s, g.Name == perSourceGroup)) == 0 && !strings.Contains(r.Expr, `up{job="lookout"}`) {
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
