package mcp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
)

// report_model_drift over MCP: alice's watch drifted in the current week
// (its reasons turned 90 degrees) after a model digest change; bob sees
// none of it; a bad weeks is a tool error naming the argument.
func TestReportModelDriftTool(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pool.Exec(context.Background(), `
		WITH w AS (SELECT date_trunc('week', now(), 'UTC') AS cur)
		INSERT INTO drift_embeddings (model_call_id, call_created_at, source, watch, owner, model, model_digest, reason, state,
		                              embed_model, embed_digest, embedding, embedded_at)
		SELECT 1000 * k + i, w.cur - (1 - k) * interval '7 days' + i * interval '1 minute', 'releases', 'big', 'alice',
		       'llama3.2', 'sha256:c1', 'reason ' || i, 'embedded', 'tiny-embed', 'sha256:e1',
		       CASE WHEN k = 1 THEN ARRAY[0, 1]::real[] ELSE ARRAY[1, 0]::real[] END, now()
		FROM w, generate_series(0, 1) k, generate_series(1, 6) i;
		INSERT INTO model_versions (model, digest, seen_at)
		VALUES ('llama3.2', 'sha256:c1', now() - interval '60 days'), ('llama3.2', 'sha256:c2', date_trunc('week', now(), 'UTC'))`)
	if err != nil {
		t.Fatal(err)
	}
	alice := f.connect("alice", nil)
	got := call[control.ModelDrift](t, alice, "report_model_drift", map[string]any{"weeks": 2})
	if !got.Enabled || got.EmbedModel != "tiny-embed" || len(got.Watches) != 1 || len(got.Watches[0].Weeks) != 2 {
		t.Fatalf("report_model_drift = %+v", got)
	}
	cur := got.Watches[0].Weeks[1]
	if !cur.Drifted || cur.Distance == nil || *cur.Distance < 0.99 || len(cur.ModelChanges) != 1 || cur.ModelChanges[0].To != "sha256:c2" {
		t.Errorf("current week %+v", cur)
	}
	bob := call[control.ModelDrift](t, f.connect("bob", nil), "report_model_drift", map[string]any{})
	if len(bob.Watches) != 0 {
		t.Errorf("bob sees %+v", bob.Watches)
	}
	if msg := toolError(t, alice, "report_model_drift", map[string]any{"weeks": 500}); !strings.Contains(msg, "weeks must be between 1 and 104") {
		t.Errorf("weeks 500: %s", msg)
	}
}
