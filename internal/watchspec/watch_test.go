package watchspec_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// validator is the api's validation path with watchspec.Check as its only
// check, over the defaults of an empty configuration directory.
func validator(t testing.TB) *definitions.Validator {
	t.Helper()
	cfg, err := config.Load(t.TempDir())
	if err != nil {
		t.Fatalf("config.Load of an empty directory: %v", err)
	}
	return &definitions.Validator{Global: &cfg.Global, Checks: []definitions.Check{watchspec.Check}}
}

const source = `{"name": "tasks", "connector": "file", "file": {"paths": ["x"]}, "watches": [%s]}`

// TestCheckRefusesWhatTheEvaluatorCannotBuild changes one key of a valid
// watch and checks the problem Check reports through the validation path
// of definitions made through the API (a JSON pointer and a message).
func TestCheckRefusesWhatTheEvaluatorCannotBuild(t *testing.T) {
	t.Parallel()
	v := validator(t)
	for _, tc := range []struct {
		name, watch, pointer, message string
	}{
		{"valid", `{"name": "urgent", "when": "record.status == 'open'", "ask": "Is it urgent?", "title": "{{.Record.Title}}"}`, "", ""},
		{"model option", `{"name": "urgent", "ask": "Is it urgent?", "model": {"options": {"temprature": 0}}}`,
			"/watches/0/model/options", `model option "temprature" is not an Ollama option (known: `},
		{"title template", `{"name": "urgent", "title": "{{.Nope}}"}`,
			"/watches/0/title", `can't evaluate field Nope`},
		{"briefing model option", `{"name": "daily", "digest": {"cron": "0 9 * * *", "summarize": {"ask": "What matters?", "model": {"options": {"tempreture": 1}}}}}`,
			"/watches/0/digest/summarize/model/options", `model option "tempreture" is not an Ollama option`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Source([]byte(strings.Replace(source, "%s", tc.watch, 1)))
			if tc.pointer == "" {
				if err != nil {
					t.Fatalf("Source: %v, want nil", err)
				}
				return
			}
			var ve *definitions.ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) != 1 {
				t.Fatalf("Source: %v, want one problem at %s", err, tc.pointer)
			}
			if p := ve.Problems[0]; p.Pointer != tc.pointer || !strings.Contains(p.Message, tc.message) {
				t.Errorf("problem %s: %s\nwant %s: ...%s...", p.Pointer, p.Message, tc.pointer, tc.message)
			}
		})
	}
}

// TestCompileMatchesAChange compiles a watch as the evaluator does and
// runs its condition.
func TestCompileMatchesAChange(t *testing.T) {
	t.Parallel()
	src, err := validator(t).Source([]byte(strings.Replace(source, "%s",
		`{"name": "open", "when": "record.status == 'open' && changed('status')", "ask": "Is it urgent?"}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchspec.Compile(src, 0, src.Watches[0], "alice", modelspec.Config{Model: "llama3.2"})
	if err != nil {
		t.Fatal(err)
	}
	if w.Source != "tasks" || w.Owner != "alice" || w.Question == nil || w.Question.Model != "llama3.2" {
		t.Fatalf("compiled: %+v", w)
	}
	for _, tc := range []struct {
		status  string
		changed []string
		want    bool
	}{{"open", []string{"status"}, true}, {"open", []string{"title"}, false}, {"done", []string{"status"}, false}} {
		env := map[string]any{
			"record": map[string]any{"status": tc.status}, "previous": nil, "source": "tasks",
			"change":  map[string]any{"id": int64(1), "kind": "updated", "version": 2, "changed_fields": []any{}},
			"changed": func(f string) bool { return tc.changed[0] == f },
		}
		if got, err := w.Match(env); err != nil || got != tc.want {
			t.Errorf("status %s, changed %v: Match = %v, %v; want %v", tc.status, tc.changed, got, err, tc.want)
		}
	}
}

// TestFilterReasonsAreBuiltOnce checks Filter's verdicts and reasons, and
// that a compiled watch's Filter allocates nothing beyond its condition's
// run: the reason quoting the condition is built by Compile, not for every
// decision of a backlog (docs/benchmarks.md, (4) on branch eval-cpu).
func TestFilterReasonsAreBuiltOnce(t *testing.T) {
	// Not parallel: AllocsPerRun counts the whole process.
	src, err := validator(t).Source([]byte(strings.Replace(source, "%s",
		`{"name": "open", "when": "record.status == 'open'"}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := watchspec.Compile(src, 0, src.Watches[0], "", modelspec.Config{})
	if err != nil {
		t.Fatal(err)
	}
	envOf := func(status string) map[string]any {
		return map[string]any{
			"record": map[string]any{"status": status}, "previous": nil, "source": "tasks",
			"change":  map[string]any{"id": int64(1), "kind": "updated", "version": 2, "changed_fields": []any{}},
			"changed": func(string) bool { return false },
		}
	}
	for _, tc := range []struct {
		status, verdict, reason string
		matched                 bool
	}{
		{"open", "notify", `when "record.status == 'open'" is true`, true},
		{"done", "skip", `when "record.status == 'open'" is false`, false},
	} {
		// A Watch not built by Compile gives the same reasons.
		for _, w := range []*watchspec.Watch{w, {Config: w.Config, Source: w.Source, When: w.When}} {
			matched, verdict, reason := w.Filter(envOf(tc.status))
			if matched != tc.matched || verdict != tc.verdict || reason != tc.reason {
				t.Errorf("status %s: Filter = %v, %q, %q; want %v, %q, %q", tc.status, matched, verdict, reason, tc.matched, tc.verdict, tc.reason)
			}
		}
		env := envOf(tc.status)
		match := testing.AllocsPerRun(100, func() { _, _ = w.Match(env) })
		filter := testing.AllocsPerRun(100, func() { _, _, _ = w.Filter(env) })
		if filter > match {
			t.Errorf("status %s: Filter allocates %.0f times, Match %.0f: the reason is built per decision", tc.status, filter, match)
		}
	}
}

// TestCompileSharesTheReasons checks that the watches of one condition
// share Filter's reasons, built once for the text rather than for every
// watch Compile builds: a directory of 100,000 watches copying a few
// conditions held two strings a watch (docs/benchmarks.md, (13) on branch
// eval-start).
func TestCompileSharesTheReasons(t *testing.T) {
	// Not parallel: AllocsPerRun counts the whole process.
	when := `record.status == 'shared-` + t.Name() + `'`
	src, err := validator(t).Source([]byte(strings.Replace(source, "%s",
		`{"name": "a", "when": "`+when+`"}, {"name": "b", "when": "`+when+`"}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := watchspec.Compile(src, 0, src.Watches[0], "", modelspec.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := watchspec.Compile(src, 1, src.Watches[1], "", modelspec.Config{})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]any{
		"record": map[string]any{"status": "open"}, "previous": nil, "source": "tasks",
		"change":  map[string]any{"id": int64(1), "kind": "updated", "version": 2, "changed_fields": []any{}},
		"changed": func(string) bool { return false },
	}
	_, _, ra := a.Filter(env)
	_, _, rb := b.Filter(env)
	if want := `when "` + when + `" is false`; ra != want || rb != want {
		t.Fatalf("reasons %q and %q, want %q", ra, rb, want)
	}
	if unsafe.StringData(ra) != unsafe.StringData(rb) {
		t.Errorf("watches a and b of one condition hold a reason each: built per watch, not shared")
	}
	// Compiling another watch of a known condition allocates what the
	// interned condition's lookup does and the Watch: no reason.
	fields := src.Fields.Exprs()
	lookup := testing.AllocsPerRun(100, func() { _, _ = normalize.CompileWhen(when, fields) })
	compile := testing.AllocsPerRun(100, func() { _, _ = watchspec.Compile(src, 1, src.Watches[1], "", modelspec.Config{}) })
	if compile > lookup+1 {
		t.Errorf("Compile of a known condition allocates %.0f times, its condition's lookup %.0f: the reasons are built per watch", compile, lookup)
	}
}

// TestRunnerAgreesWithEnv runs conditions over every variable of a
// change's environment through one Runner, change after change, and
// checks each decision against Filter over Change.Env: the reused
// environment holds exactly the change's values, whatever the change
// before it held. It also checks that the Runner allocates less than
// Change.Env and Filter do (docs/benchmarks.md, (4) on branch eval-go).
func TestRunnerAgreesWithEnv(t *testing.T) {
	// Not parallel: AllocsPerRun counts the whole process.
	whens := []string{
		`record.status == 'open' && "urgent" in record.labels`,
		`change.kind == "updated" && changed("status") && record.status == "open"`,
		`previous != nil && previous.status != record.status`,
		`previous == nil`,
		`change.id % 2 == 0 && change.version > 1`,
		`len(change.changed_fields) == 1`,
		`"status" in change.changed_fields`,
		`source == "tasks" && changed("title")`,
		`record.title startsWith "A" || get(record.extra, "n") == 5`,
		`int(record.body) > 0`,
	}
	var watches []string
	for i, w := range whens {
		watches = append(watches, fmt.Sprintf(`{"name": "w%d", "when": %q}`, i, w))
	}
	src, err := validator(t).Source([]byte(strings.Replace(source, "%s", strings.Join(watches, ", "), 1)))
	if err != nil {
		t.Fatal(err)
	}
	var ws []*watchspec.Watch
	for i := range src.Watches {
		w, err := watchspec.Compile(src, i, src.Watches[i], "", modelspec.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	rec := func(title, status, body string, labels []any, n any) map[string]any {
		return map[string]any{"id": "r", "title": title, "body": body, "url": "", "author": "", "status": status,
			"labels": labels, "created_at": nil, "updated_at": nil, "extra": map[string]any{"n": n}}
	}
	changes := []watchspec.Change{
		{ID: 1, Source: "tasks", Kind: "created", Version: 1, Record: rec("A", "open", "1", []any{"urgent"}, int64(1))},
		{ID: 2, Source: "tasks", Kind: "updated", Version: 2, ChangedFields: []string{"status", "title"},
			Record: rec("B", "open", "x", []any{"ops"}, int64(5)), Previous: rec("B", "done", "x", nil, int64(5))},
		{ID: 3, Source: "other", Kind: "updated", Version: 3, ChangedFields: []string{"title"},
			Record: rec("C", "done", "2", nil, 2.5), Previous: rec("A", "done", "2", nil, 2.5)},
		{ID: 4, Source: "tasks", Kind: "deleted", Version: 4, Record: rec("", "open", "", []any{}, int64(0))},
		{ID: 5, Source: "tasks", Kind: "updated", Version: 5, ChangedFields: []string{"status"},
			Record: rec("D", "open", "3", []any{"urgent", "ops"}, int64(4)), Previous: rec("D", "open", "3", nil, int64(4))},
	}
	type result struct {
		matched         bool
		verdict, reason string
	}
	r := watchspec.NewRunner()
	errs := 0
	// Forwards and backwards: each change after one with more, fewer or
	// no changed fields, another source and kind, a previous or none.
	for pass, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {1, 1, 3, 0, 2}} {
		for _, ci := range order {
			c := changes[ci]
			for _, w := range ws {
				var want, got result
				want.matched, want.verdict, want.reason = w.Filter(c.Env())
				got.matched, got.verdict, got.reason = r.Filter(w, r.Env(&c))
				if got != want {
					t.Errorf("pass %d, change %d, when %s: Runner gives %+v, Change.Env %+v", pass, c.ID, w.Config.When, got, want)
				}
				if want.verdict == "error" {
					errs++
				}
			}
		}
	}
	if errs == 0 {
		t.Errorf("no condition failed to run: the errors' path is not compared")
	}
	c := changes[1]
	fresh := testing.AllocsPerRun(100, func() {
		env := c.Env()
		for _, w := range ws[:2] {
			_, _, _ = w.Filter(env)
		}
	})
	reused := testing.AllocsPerRun(100, func() {
		env := r.Env(&c)
		for _, w := range ws[:2] {
			_, _, _ = r.Filter(w, env)
		}
	})
	t.Logf("a change's environment and two conditions: %.0f allocations with Change.Env and Filter, %.0f with a Runner", fresh, reused)
	if reused > fresh/2 {
		t.Errorf("a Runner allocates %.0f times a change, Change.Env and Filter %.0f: the environment or the VM is built per change", reused, fresh)
	}
}

// BenchmarkEnvAndFilter is one change of the benchmark's backlog
// (docs/benchmarks.md (4)) through its two watches: a fresh environment
// (Change.Env) and Filter, against a Runner's.
func BenchmarkEnvAndFilter(b *testing.B) {
	src, err := validator(b).Source([]byte(strings.Replace(source, "%s",
		`{"name": "urgent", "when": "record.status == \"open\" && \"urgent\" in record.labels"},
		 {"name": "reopened", "when": "change.kind == \"updated\" && changed(\"status\") && record.status == \"open\""}`, 1)))
	if err != nil {
		b.Fatal(err)
	}
	var ws []*watchspec.Watch
	for i := range src.Watches {
		w, err := watchspec.Compile(src, i, src.Watches[i], "", modelspec.Config{})
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
	}
	c := watchspec.Change{ID: 10_000_001, Source: "gen", Kind: "created", Version: 1,
		Record: map[string]any{"id": "r-1", "title": "Record 1", "body": "generated by the benchmark", "url": "", "author": "",
			"status": "open", "labels": []any{"ops"}, "created_at": nil, "updated_at": nil, "extra": map[string]any{"n": int64(1)}}}
	b.Run("Change.Env", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			env := c.Env()
			for _, w := range ws {
				_, _, _ = w.Filter(env)
			}
		}
	})
	b.Run("Runner", func(b *testing.B) {
		b.ReportAllocs()
		r := watchspec.NewRunner()
		for b.Loop() {
			env := r.Env(&c)
			for _, w := range ws {
				_, _, _ = r.Filter(w, env)
			}
		}
	})
}
