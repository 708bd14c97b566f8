package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// A NUL byte in a path or a parameter is a 400 on every surface: it was
// a 500 on /v1 and /admin, and a 503 ("deliver it again later") on
// /ingest, which a webhook provider retries forever.
func TestNULInPathOrParameterIs400(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sources"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lookout.yaml"), []byte("sinks: {log: {type: log}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := clitest.StartDaemon(t, dir, runDaemon)
	_, tok, err := tokens.Create(context.Background(), pgtest.PoolFor(t, url), tokens.NewToken{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/sources/x%00"},
		{http.MethodGet, "/v1/watches/x%00y"},
		{http.MethodGet, "/v1/watches?source=x%00"},
		{http.MethodGet, "/v1/notifications?watch=a%00b"},
		{http.MethodDelete, "/v1/watches/x%00"},
		{http.MethodGet, "/admin/sources/x%00"},
		{http.MethodGet, "/admin/?q=%00"},
		{http.MethodPost, "/ingest/x%00"},
		{http.MethodPost, "/mcp?x=%00"},
	} {
		req, err := http.NewRequest(c.method, "http://"+d.Addr+c.path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "NUL") {
			t.Errorf("%s %s: %d %s, want 400 naming the NUL byte", c.method, c.path, resp.StatusCode, b)
		}
		// A problem like every other of /v1 (docs/openapi.json's Problem
		// requires type, title, status and detail).
		var p struct {
			Type, Title, Detail string
			Status              int
		}
		if err := json.Unmarshal(b, &p); err != nil || p.Type != "https://lookout.dev/problems/malformed-request" || p.Title == "" || p.Status != 400 || p.Detail == "" {
			t.Errorf("%s %s: %s (%v), want a problem of type malformed-request", c.method, c.path, b, err)
		}
	}
}
