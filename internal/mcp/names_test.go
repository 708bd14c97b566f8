package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// Over streamable HTTP, as over the HTTP API: a watch name another owner
// uses is refused without a word of whose it is; a name over 200
// characters and a number where a string belongs are errors naming the
// field by its pointer; numbers in a definition (a 64-bit seed) are kept
// as sent, not rounded through float64.
func TestNamesAndTypesOverMCP(t *testing.T) {
	f := setup(t)
	alice, bob := f.connect("alice", nil), f.connect("bob", nil)
	call[map[string]any](t, alice, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "acquisition-target"}})

	msg := toolError(t, bob, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "acquisition-target"}})
	if !strings.Contains(msg, `watch name "acquisition-target" is not available on source "releases": choose another name`) {
		t.Errorf("bob's duplicate: %s", msg)
	}
	for _, w := range []string{"alice", "taken", "exists", "already", "managed by"} {
		if strings.Contains(msg, w) {
			t.Errorf("bob's duplicate says %q: %s", w, msg)
		}
	}
	msg = toolError(t, bob, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": strings.Repeat("w", 201)}})
	if !strings.Contains(msg, "/watch/name: name: is 201 characters long; a name has at most 200") {
		t.Errorf("a long name: %s", msg)
	}
	msg = toolError(t, bob, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": 42}})
	if !strings.Contains(msg, "/watch/name: name: must be a string, not 42") {
		t.Errorf("a number for the name: %s", msg)
	}
	msg = toolError(t, bob, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "w", "notify": []any{true}}})
	if !strings.Contains(msg, "/watch/notify/0: notify[0]: must be a string, not true") {
		t.Errorf("a boolean in notify: %s", msg)
	}

	seed := json.Number("9007199254740993") // 2^53 + 1: float64 makes it ...992
	call[map[string]any](t, bob, "create_watch", map[string]any{"source": "releases", "watch": map[string]any{"name": "seeded", "ask": "is it a release?",
		"model": map[string]any{"options": map[string]any{"seed": seed}}}})
	var stored string
	if err := f.pool.QueryRow(context.Background(), `SELECT definition->'model'->'options'->>'seed' FROM watches WHERE name = 'seeded'`).Scan(&stored); err != nil || stored != string(seed) {
		t.Errorf("stored seed = %q (%v), want %s", stored, err, seed)
	}
}
