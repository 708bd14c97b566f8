package evaluator

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

// following returns an evaluator that follows the definitions of pool,
// parsing them with g, as the evaluator daemon does.
func following(t *testing.T, pool *pgxpool.Pool, cfg *config.Config) *Evaluator {
	t.Helper()
	conf := testConfig(cfg, Config{Owner: "test-evaluator", CatchUpInterval: time.Hour})
	conf.Sources = nil // from the definitions
	ev, err := New(pool, conf, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ev.Follow(definitions.NewFollower(pool, &cfg.Global, ev.Apply))
	return ev
}

// applied loads a configuration directory made of global and sources (as
// the syncer, with its environment, does), applies it to the definitions
// and writes one created change of record 1 of source.
func applied(t *testing.T, global string, sources map[string]string, source string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	cfg := loadConfig(t, global, sources)
	if _, err := definitions.Apply(ctx, pool, cfg, definitions.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO sources (name, connector, config_hash) VALUES ($1, 'github', 'x') ON CONFLICT DO NOTHING`, source); err != nil {
		t.Fatal(err)
	}
	h, err := normalize.NewHasher(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rec("1", "the printer is on fire", "open")
	h.Hash(&r)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := changes.Apply(ctx, tx, source, 0, []normalize.Record{r}, h)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return pool
}

// changeOf returns the state of the one change of source and how many
// evaluations and notifications it has.
func changeOf(t *testing.T, pool *pgxpool.Pool, source string) (status string, evalErr string, evaluations, notifications int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `
		SELECT c.eval_status, coalesce(c.eval_error, ''),
		       (SELECT count(*) FROM evaluations e WHERE e.source = c.source AND e.change_id = c.id),
		       (SELECT count(*) FROM notifications n WHERE n.source = c.source)
		FROM changes c WHERE c.source = $1`, source).Scan(&status, &evalErr, &evaluations, &notifications); err != nil {
		t.Fatal(err)
	}
	return status, evalErr, evaluations, notifications
}

// A watch the evaluator cannot build (here: it notifies a sink this
// evaluator's lookout.yaml does not declare) leaves its source's changes
// pending with the reason in eval_error, and reported by Unbuilt; they are
// evaluated once an evaluator can build it. They were marked done without
// an evaluation, for good.
func TestUnbuildableWatchLeavesItsChangesPending(t *testing.T) {
	const source = "tickets"
	pool := applied(t, "sinks:\n  team: {type: log}\n", map[string]string{"tickets.yaml": `name: tickets
connector: github
github: {repo: acme/app}
every: 1h
watches:
  - name: on-fire
    when: 'record.title contains "fire"'
    notify: [team]
`}, source)

	// This evaluator's lookout.yaml lacks the sink "team".
	ev := following(t, pool, loadConfig(t, "sinks:\n  log: {type: log}\n", nil))
	n, err := ev.Drain(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	status, why, evals, _ := changeOf(t, pool, source)
	if n != 0 || status != "pending" || evals != 0 {
		t.Fatalf("a change whose watch cannot be built: %d completed, status %s, %d evaluations; want 0, pending, 0", n, status, evals)
	}
	if !strings.Contains(why, `the watches of source tickets cannot be built by this evaluator`) || !strings.Contains(why, `names sink "team"`) {
		t.Errorf("eval_error = %q, want why", why)
	}
	if err := ev.Unbuilt(); err == nil || !strings.Contains(err.Error(), `names sink "team"`) {
		t.Errorf("Unbuilt() = %v, want the sink named", err)
	}
	// Not claimed again before its retry.
	if n, err := ev.Drain(context.Background()); err != nil || n != 0 {
		t.Errorf("second drain: %d %v", n, err)
	}

	// An evaluator with the sink (the operator fixed lookout.yaml and the
	// pods restarted) evaluates and notifies it once it is due.
	if _, err := pool.Exec(context.Background(), `UPDATE changes SET eval_next_at = now()`); err != nil {
		t.Fatal(err)
	}
	fixed := following(t, pool, loadConfig(t, "sinks:\n  team: {type: log}\n", nil))
	if n, err := fixed.Drain(context.Background()); err != nil || n != 1 {
		t.Fatalf("with the sink: %d completed, %v; want 1", n, err)
	}
	status, why, evals, notes := changeOf(t, pool, source)
	if status != "done" || why != "" || evals != 1 || notes != 1 {
		t.Errorf("with the sink: status %s, eval_error %q, %d evaluations, %d notifications; want done, none, 1, 1", status, why, evals, notes)
	}
	if err := fixed.Unbuilt(); err != nil {
		t.Errorf("Unbuilt() = %v, want nil", err)
	}
}

// The evaluator needs no webhook secret: a source whose webhook block
// names ${ENV} unset in the evaluator's environment is evaluated and
// notified (the api's ingest verifies signatures, never the evaluator).
func TestEvaluatorNeedsNoWebhookSecret(t *testing.T) {
	const source = "gh-issues"
	const env = "LOOKOUT_TEST_EVALUATOR_GH_WEBHOOK_SECRET"
	files := map[string]string{"gh-issues.yaml": `name: gh-issues
connector: github
github:
  repo: acme/app
  token: ${LOOKOUT_TEST_EVALUATOR_GH_TOKEN}
webhook:
  provider: github
  secret: ${` + env + `}
watches:
  - name: on-fire
    when: 'record.title contains "fire"'
    notify: [log]
`}
	t.Setenv(env, "the-syncer-and-the-api-have-it")
	t.Setenv("LOOKOUT_TEST_EVALUATOR_GH_TOKEN", "ghp_the-syncer-has-it")
	global := "sinks:\n  log: {type: log}\n"
	pool := applied(t, global, files, source)
	os.Unsetenv(env)
	os.Unsetenv("LOOKOUT_TEST_EVALUATOR_GH_TOKEN")

	// The evaluator's own directory holds the same file: it loads.
	dir := t.TempDir()
	for name, body := range map[string]string{"lookout.yaml": global, "sources/gh-issues.yaml": files["gh-issues.yaml"]} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := config.Load(dir); err == nil || !strings.Contains(err.Error(), env) {
		t.Fatalf("the syncer's side needs the secret: %v", err)
	}
	cfg, err := config.LoadFor(dir, config.UsesWatches)
	if err != nil {
		t.Fatalf("the evaluator's side: %v", err)
	}
	if got := cfg.Source(source).Webhook.Secret; got != "${"+env+"}" {
		t.Errorf("webhook.secret = %q, want it as written", got)
	}
	ev := following(t, pool, cfg)
	if n, err := ev.Drain(context.Background()); err != nil || n != 1 {
		t.Fatalf("Drain: %d %v, want 1 evaluated", n, err)
	}
	status, why, evals, notes := changeOf(t, pool, source)
	if status != "done" || why != "" || evals != 1 || notes != 1 {
		t.Errorf("status %s, eval_error %q, %d evaluations, %d notifications; want done, none, 1, 1", status, why, evals, notes)
	}
}
