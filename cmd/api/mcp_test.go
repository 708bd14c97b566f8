package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

// apiMainEnv makes the test binary run the api's main instead of the
// tests, so that a test can start `api mcp --stdio` as a subprocess.
const apiMainEnv = "LOOKOUT_TEST_API_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(apiMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// apiCommand is `api --config ../../examples/config args...` as a process.
func apiCommand(url, token string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"--config", "../../examples/config"}, args...)...)
	cmd.Env = append(os.Environ(), apiMainEnv+"=1", "DATABASE_URL="+url, tokenEnv+"="+token)
	return cmd
}

// `api mcp --stdio` serves the tools to a local assistant as the owner of
// LOOKOUT_TOKEN, driven here by the SDK's own client over the command
// transport; a wrong token fails at start, saying why; a revoked one
// stops working at its next call.
func TestMCPStdio(t *testing.T) {
	_, url := pgtest.Schema(t)
	pool := pgtest.PoolFor(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tok, secret, err := tokens.Create(ctx, pool, tokens.NewToken{Owner: "alice", Scope: tokens.ScopeUser})
	if err != nil {
		t.Fatal(err)
	}

	var stderr bytes.Buffer
	cmd := apiCommand(url, secret, "mcp", "--stdio")
	cmd.Stderr = &stderr
	client := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "local-assistant", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcpsdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to api mcp --stdio: %v\n%s", err, stderr.String())
	}
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if len(names) != 20 || !slices.Contains(names, "report_task_runs") || !slices.Contains(names, "report_model_drift") || !slices.Contains(names, "me_link") || !slices.Contains(names, "preview") || !slices.Contains(names, "import_feeds") || !slices.Contains(names, "create_watch") || !slices.Contains(names, "recent_notifications") || !slices.Contains(names, "rotate_webhook_secret") {
		t.Errorf("tools over stdio: %v", names)
	}
	res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: "recent_notifications", Arguments: map[string]any{}})
	if err != nil || res.IsError || !strings.Contains(textOf(res), `"feed":"lookout://notifications/alice"`) {
		t.Fatalf("recent_notifications over stdio: %v %s", err, textOf(res))
	}
	res, err = cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: "describe_source", Arguments: map[string]any{"source": "nope"}})
	if err != nil || !res.IsError || !strings.HasPrefix(textOf(res), `not found: source "nope" does not exist`) {
		t.Errorf("describe_source of an unknown source: %v %s", err, textOf(res))
	}
	if _, err := tokens.Revoke(ctx, pool, tok.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: "recent_notifications", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("call with a revoked token: %v", err)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	// A wrong token: the command fails at once and says why.
	out, err := apiCommand(url, "lk_wrong", "mcp", "--stdio").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), tokens.ErrUnknown.Error()) {
		t.Errorf("api mcp --stdio with a wrong token: %v %s", err, out)
	}
	// No token: a usage error naming the variable.
	out, err = apiCommand(url, "", "mcp", "--stdio").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tokenEnv) {
		t.Errorf("api mcp --stdio without a token: %v %s", err, out)
	}
}

func textOf(res *mcpsdk.CallToolResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcpsdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
