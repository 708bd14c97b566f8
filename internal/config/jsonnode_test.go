package config

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// jsonNodeSeeds are JSON documents as the API sends them, and the cases
// jsonNode must refuse or read exactly as yaml.v3 does.
var jsonNodeSeeds = []string{
	`{}`,
	`{"name": "shared", "connector": "http", "every": "1h", "http": {"url": "https://example.com/items"}}`,
	`{"name":"s","watches":[{"name": "w-000001", "when": "record.status == \"open\" && \"bug\" in record.labels", "notify": ["log"]}]}`,
	"{\n  \"name\": \"s\",\n  \"watches\": [\n    {\"name\": \"a\", \"paused\": true, \"x\": null, \"y\": false}\n  ]\n}\n",
	`  {"a": [], "b": {}, "c": [[], [{}]], "d": ""}  `,
	`{"esc": "a\"b\\cd\be\ff\ng\rh\ti", "k\n": "v"}`,
	`{"when": "a \u0026\u0026 b \u003c c \u003e d"}`,
	`{"slash": "a\/b"}`,
	`{"u": "\u00e9"}`,
	`{"u": "\u0007", "v": "\ud83d\ude00", "w": "\u00"}`,
	`{"n": 1, "f": 1.5, "e": 1e3}`,
	`{"a": "b" , "c" : "d"}`,
	"{\"a\"\n: \"b\"}",
	"{\"a\":\t\"b\"}",
	"{\"a\": \"b\"}\r\n",
	`{"é": "x"}`,
	`{"<<": {"a": "b"}, "&x": "*y", "#": "!tag", "%": "@", "? ": "- "}`,
	`{"a": "b",}`,
	`{"a": tru}`,
	`{"a": true}x`,
	`["a"]`,
	`"a"`,
	`{"a": "b"} {"c": "d"}`,
	`{"dup": "a", "dup": "b"}`,
	`{"a": ["x", "y", true, null, {"b": [false]}]}`,
	`{"` + strings.Repeat("k", 1100) + `": "v"}`,
	`{"a": "` + strings.Repeat("v", 2000) + `"}`,
}

// FuzzJSONNode: whatever jsonNode reads, yaml.v3 reads to the same tree
// (kinds, tags, styles, values, lines, columns).
func FuzzJSONNode(f *testing.F) {
	for _, s := range jsonNodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := jsonNode(data)
		if !ok {
			return
		}
		var doc yaml.Node
		if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
			t.Fatalf("jsonNode read %q, yaml.v3 refuses it: %v", data, err)
		}
		if d := nodeDiff(doc.Content[0], got, "$"); d != "" {
			t.Fatalf("jsonNode read %q unlike yaml.v3: %s", data, d)
		}
	})
}

// The API's documents take jsonNode's path (not yaml.v3's): the fuzz
// target's comparisons above are not vacuous.
func TestJSONNodeReadsTheAPIsDocuments(t *testing.T) {
	for _, s := range jsonNodeSeeds[:7] {
		if _, ok := jsonNode([]byte(s)); !ok {
			t.Errorf("jsonNode refused %q", s)
		}
	}
	for _, s := range []string{`{"n": 1}`, `{"u": "\u00e9"}`, "{\"a\"\n: \"b\"}", `["a"]`, `{"a": "b",}`, `{"é": "x"}`} {
		if _, ok := jsonNode([]byte(s)); ok {
			t.Errorf("jsonNode read %q, which it leaves to yaml.v3", s)
		}
	}
}

func nodeDiff(want, got *yaml.Node, path string) string {
	if want.Kind != got.Kind || want.Style != got.Style || want.Tag != got.Tag || want.Value != got.Value ||
		want.Line != got.Line || want.Column != got.Column || len(want.Content) != len(got.Content) {
		return fmt.Sprintf("%s: yaml.v3 kind %v style %v tag %q value %q at %d:%d (%d children), jsonNode kind %v style %v tag %q value %q at %d:%d (%d children)",
			path, want.Kind, want.Style, want.Tag, want.Value, want.Line, want.Column, len(want.Content),
			got.Kind, got.Style, got.Tag, got.Value, got.Line, got.Column, len(got.Content))
	}
	if want.Anchor != "" || want.Alias != nil || want.HeadComment != "" || want.LineComment != "" || want.FootComment != "" {
		return fmt.Sprintf("%s: yaml.v3 has an anchor, alias or comment", path)
	}
	for i := range want.Content {
		if d := nodeDiff(want.Content[i], got.Content[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
			return d
		}
	}
	return ""
}
