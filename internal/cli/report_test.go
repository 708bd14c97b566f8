package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/pgtest"
)

func TestReportCommand(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO sources (name, connector, config_hash, lease_owner, lease_expires_at, run_id)
		VALUES ('inbox', 'file', 'h', 'host-a:12', now() - interval '5 minutes', 42),
		       ('feed', 'rss', 'h', NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	report := ReportCommand()
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := report.Run(ctx, &Env{Args: args, Stdout: &out, Stderr: &out})
		return out.String(), err
	}

	out, err := run()
	if err != nil || !strings.Contains(out, "stuck                  report_stuck                  expired leases") {
		t.Errorf("report (list): %v\n%s", err, out)
	}
	out, err = run("stuck", "--source", "inbox")
	if err != nil || !strings.Contains(out, "source_lease_expired") || !strings.Contains(out, "host-a:12") {
		t.Errorf("report stuck: %v\n%s", err, out)
	}
	out, err = run("--source", "feed", "active_sources", "-x")
	if err != nil || !strings.Contains(out, "name                 feed") || strings.Contains(out, "inbox") {
		t.Errorf("report active_sources for feed: %v\n%s", err, out)
	}
	if _, err := run("stuk"); err == nil || !strings.Contains(err.Error(), `report "stuk" is not known`) {
		t.Errorf("unknown report: %v", err)
	}
	var ue *UsageError
	if _, err := run("stuck", "overview"); !errors.As(err, &ue) {
		t.Errorf("two names: %v, want a usage error", err)
	}
}
