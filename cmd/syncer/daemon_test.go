package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// The run command serves /metrics, /healthz and /readyz while it syncs.
func TestRunServesMetricsAndHealth(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	d := clitest.StartDaemon(t, "../../examples/config", runDaemon)

	if code, _ := d.Get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz = %d", code)
	}
	// The LISTEN connection of the definitions comes up in the background.
	d.WaitFor("ready", func() bool { code, _ := d.Get("/readyz"); return code == http.StatusOK })
	code, body := d.Get("/readyz")
	var r struct {
		Status string                  `json:"status"`
		Checks []struct{ Name string } `json:"checks"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || code != http.StatusOK || r.Status != "ready" || len(r.Checks) != 5 {
		t.Errorf("readyz = %d %s (%v)", code, body, err)
	}
	d.WaitFor("a succeeded run in /metrics", func() bool {
		_, m := d.Get("/metrics")
		return clitest.Value(m, `lookout_polls_finished_total{source="tasks",status="succeeded"}`) >= 1
	})
	_, m := d.Get("/metrics")
	for _, want := range []string{`lookout_sources{status="active"} 1`, `lookout_database_up 1`, `lookout_records_changed_total{kind="created",source="tasks"} 3`} {
		if !clitest.Has(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	d.Stop()
	if !strings.Contains(d.Logs(), `"msg":"run finished"`) {
		t.Errorf("no run finished in the logs:\n%s", d.Logs())
	}
}
