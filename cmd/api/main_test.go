package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/cli"
	"github.com/lookout-dev/lookout/internal/clitest"
	"github.com/lookout-dev/lookout/internal/pgtest"
)

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Run(context.Background(), "api", "test", commands, append([]string{"--config", "../../examples/config"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// api run serves /v1 beside /metrics, /healthz and /readyz; a token made
// by `api token create` (printed once, alone and last on its line) works
// until `api token revoke`; `token list` shows no secret.
func TestRunServesAPIWithTokens(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	d := clitest.StartDaemon(t, "../../examples/config", runDaemon)
	d.WaitFor("readyz 200", func() bool {
		code, _ := d.Get("/readyz")
		return code == http.StatusOK
	})
	_, body := d.Get("/readyz")
	if !strings.Contains(body, `"name":"outbox_listener","ok":true`) {
		t.Errorf("readyz: %s", body)
	}
	if code, m := d.Get("/metrics"); code != 200 || !clitest.Has(m, "lookout_database_up 1") {
		t.Errorf("metrics: %d", code)
	}
	if code, body := d.Get("/mcp"); code != http.StatusUnauthorized || !strings.Contains(body, "no bearer token") {
		t.Errorf("/mcp without a token: %d %s", code, body)
	}
	if code, doc := d.Get("/openapi.json"); code != 200 || !strings.Contains(doc, `"openapi": "3.1.0"`) && !strings.Contains(doc, `"openapi":"3.1.0"`) {
		t.Errorf("openapi.json: %d %.80s", code, doc)
	}

	// The admin page is served beside the API: without a token, its sign-in form.
	if code, page := d.Get("/admin/"); code != 200 || !strings.Contains(page, `action="/admin/login"`) {
		t.Errorf("/admin/: %d %.200s", code, page)
	}
	// So is each user's page.
	if code, page := d.Get("/me/"); code != 200 || !strings.Contains(page, `action="/me/login"`) {
		t.Errorf("/me/: %d %.200s", code, page)
	}

	out, errOut, code := run(t, "token", "create", "--owner", "alice")
	if code != 0 {
		t.Fatalf("token create: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	secret := lines[len(lines)-1]
	if len(lines) != 1 || !strings.HasPrefix(secret, "lk_") || !strings.Contains(errOut, "shown once") {
		t.Fatalf("token create printed %q / %q", out, errOut)
	}
	me := func() (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+d.Addr+"/v1/me", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		_ = json.Unmarshal(b, &v)
		return resp.StatusCode, v
	}
	if code, v := me(); code != 200 || v["owner"] != "alice" {
		t.Fatalf("/v1/me: %d %v", code, v)
	}
	list, _, _ := run(t, "token", "list")
	if strings.Contains(list, secret) || !strings.Contains(list, "alice") || !strings.Contains(list, secret[:9]) {
		t.Errorf("token list:\n%s", list)
	}
	id := strings.Fields(strings.Split(list, "\n")[1])[0]
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("token list:\n%s", list)
	}
	if out, errOut, code := run(t, "token", "revoke", id); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("token revoke: %d %s %s", code, out, errOut)
	}
	if code, v := me(); code != http.StatusUnauthorized || !strings.Contains(v["detail"].(string), "revoked") {
		t.Errorf("/v1/me after revoke: %d %v", code, v)
	}
	pool := pgtest.PoolFor(t, url)
	var audits int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE kind = 'token' AND via = 'cli' AND after IS NOT NULL`).Scan(&audits); err != nil || audits != 2 {
		t.Errorf("audit rows of token create and revoke: %d %v", audits, err)
	}
	if _, errOut, code := run(t, "token", "create"); code != 2 || !strings.Contains(errOut, "--owner") {
		t.Errorf("token create without owner: %d %s", code, errOut)
	}
}

func TestCheckAndSecretKey(t *testing.T) {
	out, errOut, code := run(t, "check")
	if code != 0 || !strings.Contains(out, "is valid") {
		t.Errorf("check: %d %s %s", code, out, errOut)
	}
	key, _, code := run(t, "secret-key", "--id", "k2")
	if code != 0 || !strings.HasPrefix(key, "k2:") {
		t.Fatalf("secret-key: %d %q", code, key)
	}
	t.Setenv("LOOKOUT_SECRET_KEY", strings.TrimSpace(key))
	if _, errOut, code := run(t, "check"); code != 0 {
		t.Errorf("check with a key: %d %s", code, errOut)
	}
	t.Setenv("LOOKOUT_SECRET_KEY", "k1:tooshort")
	if _, errOut, code := run(t, "check"); code == 0 || !strings.Contains(errOut, "LOOKOUT_SECRET_KEY entry 1 (k1)") {
		t.Errorf("check with a bad key: %d %s", code, errOut)
	}
	doc, _, code := run(t, "openapi")
	if code != 0 || !strings.Contains(doc, "3.1.0") {
		t.Errorf("openapi: %d", code)
	}
}

// The api binary validates a source made through it with the code `syncer
// check` runs on a file: the connector's decoder (an unknown key of its
// block) and its constructor without I/O (an expression of the block that
// does not compile), each a 422 problem naming the field; nothing is
// created. Before, the api linked no connector and both were found only
// by the syncer's first run.
func TestConnectorBlocksValidated(t *testing.T) {
	_, url := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", url)
	d := clitest.StartDaemon(t, "../../examples/config", runDaemon)
	d.WaitFor("readyz 200", func() bool {
		code, _ := d.Get("/readyz")
		return code == http.StatusOK
	})
	out, errOut, code := run(t, "token", "create", "--owner", "alice")
	if code != 0 {
		t.Fatalf("token create: %d %s", code, errOut)
	}
	secret := strings.TrimSpace(out)
	post := func(body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+d.Addr+"/v1/sources", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("answer %s: %v", b, err)
		}
		return resp.StatusCode, v
	}
	// 93.184.216.34 is a public address: the egress check passes without DNS.
	for _, tc := range []struct{ name, block, pointer, detail string }{
		{"decoder", `{"url":"https://93.184.216.34/items.json","itms":"body.items"}`, "/http/itms", "http.itms: is not a known key"},
		{"constructor", `{"url":"https://93.184.216.34/items.json","items":"body.items[["}`, "/http/items", "http.items: "},
	} {
		code, p := post(`{"name":"bad-` + tc.name + `","connector":"http","every":"1h","http":` + tc.block + `}`)
		errs, _ := p["errors"].([]any)
		found := false
		for _, e := range errs {
			m, _ := e.(map[string]any)
			if m["pointer"] == tc.pointer && strings.HasPrefix(fmt.Sprint(m["detail"]), tc.detail) {
				found = true
			}
		}
		if code != http.StatusUnprocessableEntity || p["type"] == nil || !found {
			t.Errorf("%s: %d, want 422 with an error at %s %q: %v", tc.name, code, tc.pointer, tc.detail, p)
		}
	}
	if code, p := post(`{"name":"good","connector":"http","every":"1h","http":{"url":"https://93.184.216.34/items.json","items":"body.items"}}`); code != http.StatusCreated {
		t.Errorf("a valid source: %d %v", code, p)
	}
	pool := pgtest.PoolFor(t, url)
	var names []string
	rows, err := pool.Query(context.Background(), `SELECT name FROM source_definitions WHERE owner = 'alice' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if fmt.Sprint(names) != "[good]" {
		t.Errorf("alice's sources: %v, want [good]", names)
	}
}
