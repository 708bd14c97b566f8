package evaluator

import (
	"context"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// Once its watches are compiled, a source of the definitions holds no
// parsed YAML, definition JSON or key lines (at 100,000 watches over
// 1,000 files they were a third of the evaluator's heap at ready), and
// its watches still run, a later change of one watch included.
func TestApplyReleasesTheParse(t *testing.T) {
	ctx := context.Background()
	src, err := config.ParseSource("sources/tasks.yaml", []byte("name: tasks\nconnector: file\nfile: {paths: [tasks.jsonl]}\nfields:\n  status: item.state\n"+
		"watches:\n  - name: open\n    when: record.status == \"open\"\n\n"), &config.Global{})
	if err != nil {
		t.Fatal(err)
	}
	src.ForgetLines() // as the follower parses the rows
	if src.Definition == nil || src.Block == nil {
		t.Fatalf("the parse holds no definition (%d bytes) or block (%v): nothing to release", len(src.Definition), src.Block)
	}
	e := newBare(t)
	d := &definitions.Delta{Full: true, To: 1, Sources: []*definitions.SourceDef{{Row: definitions.Source{Name: "tasks"}, Config: src,
		Watches: []definitions.Watch{{Source: "tasks", Name: "open"}}}}}
	if err := e.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	held := e.index.source("tasks")
	if held == nil {
		t.Fatal("source tasks not held")
	}
	if held.Definition != nil || held.Block != nil {
		t.Errorf("the evaluator holds the definition's JSON (%d bytes) and the connector block (%v) of a built source", len(held.Definition), held.Block != nil)
	}
	if held.Fields.Status != "item.state" {
		t.Errorf("the released source lost its fields: %+v", held.Fields)
	}
	ws := e.index.of("tasks")
	if len(ws) != 1 {
		t.Fatalf("watches of tasks: %d, want 1", len(ws))
	}
	env := map[string]any{"record": map[string]any{"status": "open"}, "previous": nil, "source": "tasks",
		"change":  map[string]any{"id": int64(1), "kind": "created", "version": 1, "changed_fields": []any{}},
		"changed": func(string) bool { return false }}
	if matched, verdict, _ := ws[0].Filter(env); !matched || verdict != "notify" {
		t.Errorf("Filter after the release: %v %s, want a match", matched, verdict)
	}
	// A change of one watch compiles against the held source.
	changed := &config.Watch{Name: "open", When: `record.status == "done"`, Notify: []string{"log"}, Urgency: "high", Dedupe: "version", OnModelError: "hold"}
	if err := e.Apply(ctx, &definitions.Delta{From: 1, To: 2, Watches: []*definitions.WatchDef{{Row: definitions.Watch{Source: "tasks", Name: "open"}, Config: changed, Source: held}}}); err != nil {
		t.Fatal(err)
	}
	if ws := e.index.of("tasks"); len(ws) != 1 || ws[0].Config.Urgency != "high" {
		t.Errorf("after a change of the watch: %+v", ws)
	}
	if err := e.Unbuilt(); err != nil {
		t.Errorf("Unbuilt: %v", err)
	}
}
