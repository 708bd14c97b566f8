package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/admin"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// seedModelDrift is three weeks of embedded decisions of watch
// tickets/triage (the last one turned 90 degrees) and a digest change of
// its model in the last week.
const seedModelDrift = `
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

func modelDriftPage(t *testing.T, d *config.Drift, path string) (int, string) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, seedModelDrift); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store := definitions.NewStore(pool, &definitions.Validator{Global: &config.Global{}})
	adm, err := admin.New(control.New(pool, store, nil, control.Config{Drift: d}, log), admin.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(adm.Handler())
	t.Cleanup(srv.Close)
	_, tok, err := tokens.Create(ctx, pool, tokens.NewToken{Owner: "ops", Scope: tokens.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The drift page charts each watch's distance per week, the threshold,
// and marks the week of a model digest change; its table flags the
// drifted week.
func TestModelDriftPage(t *testing.T) {
	t.Parallel()
	status, body := modelDriftPage(t, &config.Drift{EmbedModel: "tiny-embed", Threshold: 0.2, MinSamples: 5}, "/admin/model-drift?weeks=3")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	for _, want := range []string{
		`<h3>tickets / triage`,
		`<svg class="chart drift"`,
		`class="threshold"`,
		`<title>model llama3.2 changed sha256:c1 → sha256:c2 at `,
		`<td>drifted</td>`,
		`<td>baseline</td>`,
		`Queue: 0 pending (0 held), 30 embedded.`,
		`href="/admin/model-drift" class="on">Drift</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`class="mark model-change"`).FindAllString(body, -1)); n != 1 {
		t.Errorf("%d model change marks, want 1", n)
	}
	if n := len(regexp.MustCompile(`<circle class="pt s1 drifted"`).FindAllString(body, -1)); n != 1 {
		t.Errorf("%d drifted points, want 1", n)
	}
}

func TestModelDriftPageOff(t *testing.T) {
	t.Parallel()
	status, body := modelDriftPage(t, nil, "/admin/model-drift")
	if status != http.StatusOK || !strings.Contains(body, "Drift is off: set <code>ollama.drift</code>") {
		t.Errorf("status %d, body without the off hint:\n%s", status, body)
	}
	status, body = modelDriftPage(t, &config.Drift{EmbedModel: "e", Threshold: 0.2}, "/admin/model-drift?weeks=900")
	if status != http.StatusUnprocessableEntity && status != http.StatusBadRequest || !strings.Contains(body, "weeks must be between 1 and 104") {
		t.Errorf("weeks=900: status %d:\n%s", status, body)
	}
}
