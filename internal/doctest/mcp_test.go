package doctest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// runMCP runs the <!-- mcp: ... --> blocks of docs/mcp.md, in order, over
// one `api mcp --stdio` session of alice on the fixture:
//
//   - <!-- mcp: input schema TOOL --> equals the tool's input schema;
//   - <!-- mcp: call --> ({"name", "arguments"}) is called; its arguments
//     must fit the tool's schema. Ids are the fixture's: a change_id is
//     the first change_id of the previous answer, an after_id is 0;
//   - <!-- mcp: answer --> is compared loosely with the previous call's
//     answer: every key it shows (but "...") is in the answer, at the same
//     place; values may differ. With <!-- openapi: SCHEMA --> it is also
//     validated against docs/openapi.json (the HTTP API answers the same).
func runMCP(t *testing.T, ta *tally, fx *fixture, blocks []*block) {
	var mine []*block
	for _, b := range blocks {
		if _, ok := b.marker("mcp"); ok {
			mine = append(mine, b)
		}
	}
	if len(mine) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(fx.bins.api, "--config", fx.config, "mcp", "--stdio")
	cmd.Env = fx.env
	client := mcp.NewClient(&mcp.Implementation{Name: "doctest", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("api mcp --stdio: %v", err)
	}
	defer session.Close()
	list, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	schemas := map[string]any{}
	for _, tool := range list.Tools {
		schemas[tool.Name] = normalize(t, tool.InputSchema)
	}
	var answer any
	for _, b := range mine {
		m, _ := b.marker("mcp")
		ta.run(t, b, func(t *testing.T) {
			body := b.body
			for _, s := range fx.subst {
				body = strings.ReplaceAll(body, s[0], s[1])
			}
			var doc any
			if err := json.Unmarshal([]byte(body), &doc); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			switch {
			case strings.HasPrefix(m, "input schema "):
				name := strings.TrimPrefix(m, "input schema ")
				if got, ok := schemas[name]; !ok {
					t.Errorf("the server has no tool %s", name)
				} else if !reflect.DeepEqual(doc, got) {
					b, _ := json.MarshalIndent(got, "", "  ")
					t.Errorf("the input schema of %s is not the server's:\n%s", name, b)
				}
			case m == "call":
				call := doc.(map[string]any)
				name, _ := call["name"].(string)
				args, _ := call["arguments"].(map[string]any)
				schema, ok := schemas[name]
				if !ok {
					t.Fatalf("the server has no tool %q", name)
				}
				if err := resolve(t, schema).Validate(args); err != nil {
					t.Fatalf("the arguments do not fit %s's input schema: %v", name, err)
				}
				if _, ok := args["change_id"]; ok {
					id, found := firstChangeID(answer)
					if !found {
						t.Fatalf("change_id: the previous answer has no change_id")
					}
					args["change_id"] = id
				}
				if _, ok := args["after_id"]; ok {
					args["after_id"] = 0
				}
				res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
				if err != nil {
					t.Fatalf("tools/call %s: %v", name, err)
				}
				text := ""
				for _, c := range res.Content {
					if tc, ok := c.(*mcp.TextContent); ok {
						text += tc.Text
					}
				}
				if res.IsError {
					t.Fatalf("tools/call %s: tool error: %s", name, text)
				}
				answer = nil
				if err := json.Unmarshal([]byte(text), &answer); err != nil {
					t.Fatalf("tools/call %s: the answer is not JSON: %v\n%s", name, err, text)
				}
			case m == "answer":
				if name, ok := b.marker("openapi"); ok {
					if err := openAPISchema(t, name, elided(b.body)).Validate(dropElided(doc)); err != nil {
						t.Errorf("not a %s of docs/openapi.json: %v", name, err)
					}
				}
				if err := sameShape(dropElided(doc), answer, "answer"); err != nil {
					b, _ := json.Marshal(answer)
					t.Errorf("%v\nthe server answered: %s", err, b)
				}
			default:
				t.Fatalf("<!-- mcp: %s -->: want input schema TOOL, call or answer", m)
			}
		})
	}
}

// runPayload compares the <!-- payload: webhook --> blocks loosely (as
// MCP answers are) with a body the fixture's webhook receiver got.
func runPayload(t *testing.T, ta *tally, fx *fixture, blocks []*block) {
	for _, b := range blocks {
		if !hasMarker(b, "payload") {
			continue
		}
		ta.run(t, b, func(t *testing.T) {
			var doc any
			if err := json.Unmarshal([]byte(b.body), &doc); err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			fx.mu.Lock()
			delivered := fx.delivered
			fx.mu.Unlock()
			if len(delivered) == 0 {
				t.Fatal("the fixture's webhook receiver got nothing")
			}
			var got any
			if err := json.Unmarshal(delivered[0], &got); err != nil {
				t.Fatalf("the delivered body is not JSON: %v\n%s", err, delivered[0])
			}
			// The fixture has no model: its notifications have no
			// confidence ("only when a model decided", the table says).
			delete(doc.(map[string]any), "confidence")
			if err := sameShape(dropElided(doc), got, "payload"); err != nil {
				t.Errorf("%v\nthe receiver got: %s", err, delivered[0])
			}
		})
	}
}

// normalize makes a value plain JSON (maps, slices, float64s).
func normalize(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// firstChangeID finds the first "change_id" of an answer, depth first.
func firstChangeID(v any) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		if id, ok := x["change_id"]; ok {
			return id, true
		}
		for _, k := range []string{"matches", "items", "watches"} {
			if id, ok := firstChangeID(x[k]); ok {
				return id, true
			}
		}
	case []any:
		for _, e := range x {
			if id, ok := firstChangeID(e); ok {
				return id, true
			}
		}
	}
	return nil, false
}

// sameShape checks that every key of want is in got, recursively; each
// element of an array of want has an element of got of its shape.
func sameShape(want, got any, at string) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: an object in the example, %T in the answer", at, got)
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s.%s: in the example, not in the answer", at, k)
			}
			if err := sameShape(v, gv, at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: an array in the example, %T in the answer", at, got)
		}
	items:
		for i, e := range w {
			var first error
			for _, ge := range g {
				err := sameShape(e, ge, fmt.Sprintf("%s[%d]", at, i))
				if err == nil {
					continue items
				}
				if first == nil {
					first = err
				}
			}
			if first == nil {
				first = fmt.Errorf("%s[%d]: in the example, the answer's array is empty", at, i)
			}
			return first
		}
	}
	return nil
}
