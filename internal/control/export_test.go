package control

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// defService is a Service over a real store and validator, with a key
// ring and the sink log.
func defService(t *testing.T) *Service {
	t.Helper()
	pool := pgtest.Pool(t)
	k, err := secrets.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.Parse(k)
	if err != nil {
		t.Fatal(err)
	}
	v := NewValidator(&config.Global{Sinks: map[string]*config.Sink{"log": {Type: "log"}}})
	v.Keys = keys
	store := definitions.NewStore(pool, v)
	s := New(pool, store, nil, Config{Keys: keys, Limits: Limits{Sources: 10, Watches: 10}}, slog.New(slog.DiscardHandler))
	pub := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	s.SetResolver(fakeResolver{"go.dev": pub, "feeds.example": pub, "blog.example": pub, "hooks.example": pub})
	return s
}

var (
	alice = Principal{Owner: "alice", Via: "api"}
	bob   = Principal{Owner: "bob", Via: "api"}
)

func mustCreateSource(t *testing.T, s *Service, p Principal, def string) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := s.CreateSource(ctx, tx, p, json.RawMessage(def)); err != nil {
		t.Fatalf("create source: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

const ghSource = `{"name": "gh", "connector": "github", "every": "1h", "github": {"repo": "lookout-dev/lookout", "token": "ghp_secret123"},
	"watches": [{"name": "new", "when": "change.kind == \"created\"", "notify": ["log"]}]}`

const feedSource = `{"name": "go-blog", "connector": "rss", "every": "1h", "rss": {"url": "https://go.dev/blog/feed.atom"}}`

// An export holds the owner's sources with their watches, credentials
// redacted; importing it into another owner (credentials given) creates
// the same definitions, importing it again changes nothing.
func TestExportImportRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := defService(t)
	mustCreateSource(t, s, alice, ghSource)
	mustCreateSource(t, s, alice, feedSource)

	exp, err := s.Export(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.Sources) != 2 || len(exp.Watches) != 0 {
		t.Fatalf("export: %d sources, %d watches; want 2, 0: %s", len(exp.Sources), len(exp.Watches), exp.Sources)
	}
	if strings.Contains(string(exp.Sources[0]), "ghp_secret123") || strings.Contains(string(exp.Sources[0]), "sealed") {
		t.Fatalf("the export shows a credential: %s", exp.Sources[0])
	}
	if !strings.Contains(string(exp.Sources[0]), `"token":"[redacted]"`) || !strings.Contains(string(exp.Sources[0]), `"watches":[{`) {
		t.Fatalf("export of gh: %s", exp.Sources[0])
	}
	if empty, _ := s.Export(ctx, bob); len(empty.Sources) != 0 {
		t.Fatalf("bob's export holds alice's sources: %s", empty.Sources)
	}

	// Into the same owner: everything exists unchanged ([redacted] keeps
	// the stored credential).
	res, err := s.Import(ctx, alice, ImportRequest{Sources: exp.Sources})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 0 || res.Unchanged != 3 {
		t.Fatalf("re-import into alice: %+v", res)
	}

	// Into bob: [redacted] is refused, naming the field.
	_, err = s.Import(ctx, bob, ImportRequest{Sources: exp.Sources, DryRun: true})
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Errors[0].Pointer != "/sources/0/github/token" {
		t.Fatalf("import of a [redacted] credential into bob: %v", err)
	}
	// gh is a name alice holds: rename for bob and give the token.
	srcs := []json.RawMessage{json.RawMessage(strings.Replace(string(exp.Sources[0]), `"[redacted]"`, `"ghp_bobs"`, 1)), exp.Sources[1]}
	srcs[0] = json.RawMessage(strings.Replace(string(srcs[0]), `"name":"gh"`, `"name":"gh-bob"`, 1))
	srcs[1] = json.RawMessage(strings.Replace(string(srcs[1]), `"name":"go-blog"`, `"name":"go-blog-bob"`, 1))

	dry, err := s.Import(ctx, bob, ImportRequest{Sources: srcs, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || dry.Created != 3 {
		t.Fatalf("dry run: %+v", dry)
	}
	if after, _ := s.Export(ctx, bob); len(after.Sources) != 0 {
		t.Fatalf("a dry run saved: %s", after.Sources)
	}
	res, err = s.Import(ctx, bob, ImportRequest{Sources: srcs})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 3 {
		t.Fatalf("import into bob: %+v", res)
	}
	again, err := s.Import(ctx, bob, ImportRequest{Sources: srcs})
	if err != nil {
		t.Fatal(err)
	}
	if again.Created != 0 || again.Unchanged != 3 {
		t.Fatalf("second import into bob changed something: %+v", again)
	}

	// A different definition under an existing name is a conflict naming it.
	changed := json.RawMessage(strings.Replace(string(srcs[1]), `"1h"`, `"2h"`, 1))
	_, err = s.Import(ctx, bob, ImportRequest{Sources: []json.RawMessage{changed}})
	var ce *ConflictError
	if !errors.As(err, &ce) || !strings.Contains(ce.Detail, `source "go-blog-bob" (/sources/0) exists with a different definition`) {
		t.Fatalf("conflicting import: %v", err)
	}
	// A name another owner holds is a conflict too.
	_, err = s.Import(ctx, bob, ImportRequest{Sources: []json.RawMessage{json.RawMessage(feedSource)}})
	if !errors.As(err, &ce) || !strings.Contains(ce.Error(), "go-blog") {
		t.Fatalf("import of a name alice holds: %v", err)
	}
}

// Each exported source, written as YAML, is a source file `check`
// accepts.
func TestExportYAMLIsSourceFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := defService(t)
	mustCreateSource(t, s, alice, feedSource)
	exp, err := s.Export(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	y, err := exp.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "format: lookout-export/v1") {
		t.Fatalf("YAML export:\n%s", y)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, raw := range exp.Sources {
		b, err := SourceFileYAML(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "sources", "s"+string(rune('a'+i))+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte("sinks:\n  log: {type: log}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatalf("the exported sources are not a configuration: %v", err)
	}
	if len(cfg.Sources) != 1 || cfg.Sources[0].Name != "go-blog" {
		t.Fatalf("loaded %d sources", len(cfg.Sources))
	}
}

// A watch's own webhook exports with its secret [redacted]; imported
// into another owner it gets a new secret, shown once in the answer
// (never in a dry run), and importing it again keeps it unchanged.
func TestImportWebhookGetsNewSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := defService(t)
	mustCreateSource(t, s, alice, feedSource)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	created, err := s.CreateWatch(ctx, tx, alice, CreateWatchRequest{Source: "go-blog", Watch: json.RawMessage(`{"name": "hook", "when": "true", "webhook": {"url": "https://hooks.example/in"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	exp, err := s.Export(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(exp.Sources[0]), created.Watch.WebhookSecret) || !strings.Contains(string(exp.Sources[0]), `"secret":"[redacted]"`) {
		t.Fatalf("export of the webhook: %s", exp.Sources[0])
	}
	src := json.RawMessage(strings.Replace(string(exp.Sources[0]), `"name":"go-blog"`, `"name":"bobs-blog"`, 1))
	dry, err := s.Import(ctx, bob, ImportRequest{Sources: []json.RawMessage{src}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Items[1].WebhookSecret != "" {
		t.Fatalf("a dry run showed a secret: %+v", dry.Items)
	}
	res, err := s.Import(ctx, bob, ImportRequest{Sources: []json.RawMessage{src}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 2 || !strings.HasPrefix(res.Items[1].WebhookSecret, "whsec_") || res.Items[1].WebhookSecret == created.Watch.WebhookSecret {
		t.Fatalf("import of the webhook: %+v", res.Items)
	}
	again, err := s.Import(ctx, bob, ImportRequest{Sources: []json.RawMessage{src}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Unchanged != 2 || again.Items[1].WebhookSecret != "" {
		t.Fatalf("import again: %+v", again.Items)
	}
}

// The YAML export, and one source file, read back as an import.
func TestParseImportYAML(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := defService(t)
	mustCreateSource(t, s, alice, ghSource)
	exp, err := s.Export(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	y, err := exp.YAML()
	if err != nil {
		t.Fatal(err)
	}
	req, err := ParseImportYAML(string(y))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Import(ctx, alice, *req)
	if err != nil || res.Unchanged != 2 {
		t.Fatalf("import of the YAML export: %+v, %v", res, err)
	}
	file, err := SourceFileYAML(json.RawMessage(feedSource))
	if err != nil {
		t.Fatal(err)
	}
	req, err = ParseImportYAML(string(file))
	if err != nil || len(req.Sources) != 1 {
		t.Fatalf("a source file: %+v, %v", req, err)
	}
	for _, tc := range []struct{ text, want string }{
		{"sources:\n  - name: a\n\tconnector: rss\n", "/yaml: line 2: found a tab character that violates indentation"},
		{"- a\n", "must be a mapping"},
		{"format: x\nsourcez: []\n", `"sourcez" is not a key of an export`},
	} {
		if _, err := ParseImportYAML(tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseImportYAML(%q) = %v, want %q", tc.text, err, tc.want)
		}
	}
}
