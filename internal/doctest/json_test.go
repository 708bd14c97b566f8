package doctest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// elided says whether an example is shortened: it holds "..." or "…".
func elided(s string) bool { return strings.Contains(s, "...") || strings.Contains(s, "…") }

// dropElided removes the keys named "..." of an example's objects.
func dropElided(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "...")
		for k, e := range x {
			x[k] = dropElided(e)
		}
	case []any:
		for i, e := range x {
			x[i] = dropElided(e)
		}
	}
	return v
}

// loosen removes every "required" of a schema: a shortened example
// leaves fields out, but every field it has must be allowed and of its
// type.
func loosen(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "required")
		for k, e := range x {
			x[k] = loosen(e)
		}
	case []any:
		for i, e := range x {
			x[i] = loosen(e)
		}
	}
	return v
}

// openAPISchema is components.schemas.NAME of docs/openapi.json as a JSON
// Schema (2020-12, which OpenAPI 3.1 uses), its references moved to $defs.
// loose drops every required.
func openAPISchema(t *testing.T, name string, loose bool) *jsonschema.Resolved {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.ReplaceAll(string(raw), `"#/components/schemas/`, `"#/$defs/`))
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/openapi.json: %v", err)
	}
	if _, ok := doc.Components.Schemas[name]; !ok {
		t.Fatalf("docs/openapi.json has no components.schemas.%s", name)
	}
	var defs any = doc.Components.Schemas
	if loose {
		defs = loosen(defs)
	}
	return resolve(t, map[string]any{"$ref": "#/$defs/" + name, "$defs": defs})
}

func resolve(t *testing.T, schema any) *jsonschema.Resolved {
	t.Helper()
	b, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("resolve schema: %v", err)
	}
	return rs
}

// parseJSON decodes a block; JSON Lines (one value per line) too.
func parseJSON(body string) ([]any, error) {
	dec := json.NewDecoder(strings.NewReader(body))
	var out []any
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// runJSON checks the JSON blocks that need no fixture: every one parses;
// <!-- openapi: SCHEMA --> validates against docs/openapi.json (loosely
// where the example is shortened); <!-- client: NAME --> against the
// client's published configuration format. <!-- mcp: ... --> blocks are
// run by runMCP on the fixture.
func runJSON(t *testing.T, ta *tally, blocks []*block) {
	for _, b := range blocks {
		if hasMarker(b, "mcp") || hasMarker(b, "payload") {
			continue
		}
		ta.run(t, b, func(t *testing.T) {
			t.Parallel()
			vs, err := parseJSON(b.body)
			if err != nil {
				t.Fatalf("not JSON: %v\n%s", err, numbered(b.body))
			}
			if name, ok := b.marker("openapi"); ok {
				rs := openAPISchema(t, name, elided(b.body))
				for _, v := range vs {
					if err := rs.Validate(dropElided(v)); err != nil {
						t.Errorf("not a %s of docs/openapi.json: %v", name, err)
					}
				}
			}
			if name, ok := b.marker("client"); ok {
				checkClient(t, name, vs[0])
			}
		})
	}
}

// clients are the configuration formats of the MCP clients docs/mcp.md
// shows, each as its documentation publishes it (a JSON Schema of the
// shape, the fields lookout's examples use).
var clients = map[string]string{
	// Claude Code, .mcp.json at the project root (or ~/.claude.json):
	// https://code.claude.com/docs/en/mcp — mcpServers, each with a type
	// (stdio, the default; http; sse): command/args/env, or url/headers.
	"Claude Code": `{"type": "object", "required": ["mcpServers"], "additionalProperties": false,
	  "properties": {"mcpServers": {"type": "object", "additionalProperties": {"oneOf": [
	    {"type": "object", "required": ["command"], "additionalProperties": false,
	     "properties": {"type": {"const": "stdio"}, "command": {"type": "string"},
	       "args": {"type": "array", "items": {"type": "string"}}, "env": {"type": "object", "additionalProperties": {"type": "string"}}}},
	    {"type": "object", "required": ["type", "url"], "additionalProperties": false,
	     "properties": {"type": {"enum": ["http", "sse"]}, "url": {"type": "string"},
	       "headers": {"type": "object", "additionalProperties": {"type": "string"}}}}]}}}}`,
	// Claude Desktop, claude_desktop_config.json:
	// https://modelcontextprotocol.io/quickstart/user — mcpServers of local
	// (stdio) servers only: command, args, env. Remote servers are added as
	// connectors in its settings, not in this file.
	"Claude Desktop": `{"type": "object", "required": ["mcpServers"],
	  "properties": {"mcpServers": {"type": "object", "additionalProperties":
	    {"type": "object", "required": ["command"], "additionalProperties": false,
	     "properties": {"command": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}},
	       "env": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}`,
	// VS Code, .vscode/mcp.json:
	// https://code.visualstudio.com/docs/copilot/reference/mcp-configuration
	// — servers (not mcpServers), each with a required type: stdio
	// (command, args, env, envFile) or http/sse (url, headers); inputs for
	// prompted secrets.
	"VS Code": `{"type": "object", "required": ["servers"], "additionalProperties": false,
	  "properties": {"inputs": {"type": "array"}, "servers": {"type": "object", "additionalProperties": {"oneOf": [
	    {"type": "object", "required": ["type", "command"], "additionalProperties": false,
	     "properties": {"type": {"const": "stdio"}, "command": {"type": "string"},
	       "args": {"type": "array", "items": {"type": "string"}}, "env": {"type": "object", "additionalProperties": {"type": "string"}},
	       "envFile": {"type": "string"}}},
	    {"type": "object", "required": ["type", "url"], "additionalProperties": false,
	     "properties": {"type": {"enum": ["http", "sse"]}, "url": {"type": "string"},
	       "headers": {"type": "object", "additionalProperties": {"type": "string"}}}}]}}}}`,
	// Cursor, .cursor/mcp.json (or ~/.cursor/mcp.json):
	// https://cursor.com/docs/mcp — mcpServers, each either command/args/env
	// (stdio) or url/headers (a remote server).
	"Cursor": `{"type": "object", "required": ["mcpServers"], "additionalProperties": false,
	  "properties": {"mcpServers": {"type": "object", "additionalProperties": {"oneOf": [
	    {"type": "object", "required": ["command"], "additionalProperties": false,
	     "properties": {"command": {"type": "string"}, "args": {"type": "array", "items": {"type": "string"}},
	       "env": {"type": "object", "additionalProperties": {"type": "string"}}}},
	    {"type": "object", "required": ["url"], "additionalProperties": false,
	     "properties": {"url": {"type": "string"}, "headers": {"type": "object", "additionalProperties": {"type": "string"}}}}]}}}}`,
}

// checkClient validates a client configuration against its client's format,
// and its stdio servers' commands against lookout's: api ... mcp --stdio.
func checkClient(t *testing.T, name string, v any) {
	t.Helper()
	format, ok := clients[name]
	if !ok {
		t.Fatalf("<!-- client: %s -->: no such client (known: Claude Code, Claude Desktop, VS Code, Cursor)", name)
	}
	var schema any
	if err := json.Unmarshal([]byte(format), &schema); err != nil {
		t.Fatal(err)
	}
	if err := resolve(t, schema).Validate(v); err != nil {
		t.Errorf("not %s's configuration format: %v", name, err)
	}
	servers, _ := v.(map[string]any)["mcpServers"].(map[string]any)
	if servers == nil {
		servers, _ = v.(map[string]any)["servers"].(map[string]any)
	}
	for key, s := range servers {
		s := s.(map[string]any)
		if cmd, ok := s["command"]; ok {
			args := fmt.Sprint(cmd, " ", s["args"])
			if cmd != "api" || !strings.Contains(args, "mcp --stdio") {
				t.Errorf("server %s: %s does not start api mcp --stdio", key, args)
			}
		}
		if u, ok := s["url"].(string); ok && !mcpURL.MatchString(u) {
			t.Errorf("server %s: url %s is not http(s)://HOST:PORT/mcp", key, u)
		}
	}
}

var mcpURL = regexp.MustCompile(`^https?://[^/]+/mcp$`)

func TestClientFormats(t *testing.T) {
	http := map[string]any{"type": "http", "url": "https://x:9466/mcp", "headers": map[string]any{"Authorization": "Bearer x"}}
	stdio := map[string]any{"command": "api", "args": []any{"mcp", "--stdio"}}
	for _, c := range []struct {
		client string
		conf   map[string]any
		ok     bool
	}{
		{"Claude Code", map[string]any{"mcpServers": map[string]any{"l": http}}, true},
		{"Claude Desktop", map[string]any{"mcpServers": map[string]any{"l": http}}, false},
		{"Claude Desktop", map[string]any{"mcpServers": map[string]any{"l": stdio}}, true},
		{"VS Code", map[string]any{"mcpServers": map[string]any{"l": http}}, false},
		{"VS Code", map[string]any{"servers": map[string]any{"l": stdio}}, false}, // type is required
		{"VS Code", map[string]any{"servers": map[string]any{"l": http}}, true},
		{"Cursor", map[string]any{"mcpServers": map[string]any{"l": http}}, false}, // no type
	} {
		var schema any
		if err := json.Unmarshal([]byte(clients[c.client]), &schema); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(c.conf)
		var v any
		_ = json.Unmarshal(b, &v)
		if err := resolve(t, schema).Validate(v); (err == nil) != c.ok {
			t.Errorf("%s %s: valid %v, want %v (%v)", c.client, b, err == nil, c.ok, err)
		}
	}
}
