package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
)

// seedDrift writes embedded decisions of alice's watch tickets/triage:
// ten per week over the last three weeks, the last one turned 90
// degrees, and a digest change of its model in the last week.
const seedDrift = `
WITH w AS (SELECT date_trunc('week', now(), 'UTC') AS cur)
INSERT INTO drift_embeddings (model_call_id, call_created_at, source, watch, owner, model, model_digest, reason, state,
                              embed_model, embed_digest, embedding, embedded_at)
SELECT 1000 * k + i, w.cur - (2 - k) * interval '7 days' + i * interval '1 minute', 'tickets', 'triage', 'alice',
       'llama3.2', 'sha256:c1', 'reason ' || i, 'embedded', 'tiny-embed', 'sha256:e1',
       CASE WHEN k = 2 THEN ARRAY[0, 1, 0]::real[] ELSE ARRAY[1, 0.05 * (i % 2), 0]::real[] END, now()
FROM w, generate_series(0, 2) k, generate_series(1, 10) i;
INSERT INTO model_versions (model, digest, seen_at)
VALUES ('llama3.2', 'sha256:c1', date_trunc('week', now(), 'UTC') - interval '30 days'),
       ('llama3.2', 'sha256:c2', date_trunc('week', now(), 'UTC') + interval '1 minute');`

func TestReportModelDrift(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.pool.Exec(context.Background(), seedDrift); err != nil {
		t.Fatal(err)
	}
	// Off: enabled false, nothing reported.
	var off control.ModelDrift
	if resp := f.do(http.MethodGet, "/v1/reports/model-drift", "alice", nil, &off); resp.StatusCode != http.StatusOK || off.Enabled || len(off.Watches) != 0 {
		t.Fatalf("drift off: %d %+v", resp.StatusCode, off)
	}
	// On: a service of its own with ollama.drift set.
	svc := control.New(f.pool, f.store, f.hub, control.Config{
		Drift: &config.Drift{EmbedModel: "tiny-embed", Threshold: 0.2, MinSamples: 5}}, slog.New(slog.DiscardHandler))
	a := New(svc, slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(a.Shutdown)
	f.srv = srv

	var got control.ModelDrift
	if resp := f.do(http.MethodGet, "/v1/reports/model-drift?weeks=3", "alice", nil, &got); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice: %d", resp.StatusCode)
	}
	if !got.Enabled || got.Queue != nil || len(got.Watches) != 1 {
		t.Fatalf("alice's report: %+v", got)
	}
	r := got.Watches[0]
	if r.Source != "tickets" || r.Watch != "triage" || len(r.Weeks) != 3 || r.BaselineWeek == nil || !r.BaselineWeek.Equal(r.Weeks[0].Start) {
		t.Fatalf("report %+v", r)
	}
	if w := r.Weeks[1]; w.Distance == nil || *w.Distance > 0.01 || w.Drifted {
		t.Errorf("a week like the baseline: %+v", w)
	}
	last := r.Weeks[2]
	if last.Distance == nil || *last.Distance < 0.9 || !last.Drifted {
		t.Errorf("the turned week: %+v", last)
	}
	if len(last.ModelChanges) != 1 || last.ModelChanges[0].From != "sha256:c1" || last.ModelChanges[0].To != "sha256:c2" {
		t.Errorf("model changes of the last week: %+v", last.ModelChanges)
	}
	// Bob sees none of alice's watches; an admin sees them and the queue.
	var bob control.ModelDrift
	if resp := f.do(http.MethodGet, "/v1/reports/model-drift", "bob", nil, &bob); resp.StatusCode != http.StatusOK || len(bob.Watches) != 0 {
		t.Errorf("bob: %d %+v", resp.StatusCode, bob)
	}
	var root control.ModelDrift
	if resp := f.do(http.MethodGet, "/v1/reports/model-drift?source=tickets", "root", nil, &root); resp.StatusCode != http.StatusOK ||
		len(root.Watches) != 1 || root.Queue == nil || root.Queue.Embedded != 30 {
		t.Errorf("admin: %d %+v", resp.StatusCode, root)
	}
	var problem map[string]any
	if resp := f.do(http.MethodGet, "/v1/reports/model-drift?weeks=500", "alice", nil, &problem); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("weeks=500: %d %v", resp.StatusCode, problem)
	}
}
