package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// The run command serves /metrics, /healthz and /readyz; it is ready once
// both LISTEN connections are up.
func TestRunServesMetricsAndHealth(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	d := clitest.StartDaemon(t, "../../examples/config", runDaemon)

	d.WaitFor("readyz 200", func() bool {
		code, _ := d.Get("/readyz")
		return code == http.StatusOK
	})
	_, body := d.Get("/readyz")
	for _, want := range []string{`"name":"database","ok":true`, `"name":"migrations","ok":true`, `"name":"changes_listener","ok":true`, `"name":"outbox_listener","ok":true`} {
		if !strings.Contains(body, want) {
			t.Errorf("readyz lacks %s: %s", want, body)
		}
	}
	_, m := d.Get("/metrics")
	for _, want := range []string{`lookout_pending_changes 0`, `lookout_pending_notifications{sink="log"} 0`, `lookout_database_up 1`,
		`lookout_notifications_delivered_total{sink="log",status="delivered"} 0`} {
		if !clitest.Has(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(d.Logs(), `"msg":"watchdog started"`) {
		t.Errorf("the watchdog did not start:\n%s", d.Logs())
	}
}
