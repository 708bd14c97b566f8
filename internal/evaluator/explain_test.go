package evaluator

import (
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/explain"
	"github.com/lookout-dev/lookout/internal/replay"
	"github.com/lookout-dev/lookout/internal/semantic/ollamatest"
)

func TestExplainPrintsTheDecisionTrail(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	h.sync("tasks", rec("T-1", "URGENT: database down", "open"), rec("T-3", "Old", "done"))
	h.drain()
	id := h.lastChange("tasks", "T-1")

	trails, err := explain.Trails(h.ctx, h.pool, h.cfg, explain.Query{ChangeID: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(trails) != 1 || len(trails[0].Watches) != 2 {
		t.Fatalf("trails: %+v", trails)
	}
	urgent := trails[0].Watches[0]
	if urgent.Watch != "urgent" || urgent.Evaluation.Step != "model" || urgent.Verdict == nil || urgent.Verdict.Digest != testDigest ||
		len(urgent.Calls) != 1 || len(urgent.Notifications) != 1 || urgent.Notifications[0].Status != "pending" {
		t.Fatalf("urgent trail: %+v", urgent)
	}
	var out bytes.Buffer
	explain.WriteTrails(&out, trails)
	text := out.String()
	for _, want := range []string{
		"· tasks/T-1 · created v1 · ",
		"  title:    URGENT: database down\n",
		"  state:    done, evaluated ",
		"  watch urgent\n",
		`    filter   true: record.status == "open"` + "\n",
		"    ask      Is this task urgent for the on-call engineer?\n",
		`    model    notify · urgency high · confidence 0.90 — "The record is marked urgent."` + "\n",
		"digest aaaaaaaaaaaa prompt pv-",
		" attempt 1 · ok · ",
		" · 50+20 tokens · llama3.2 digest aaaaaaaaaaaa",
		fmt.Sprintf("    notify   #%d → log: pending, next attempt ", urgent.Notifications[0].ID),
		"  watch closed\n",
		`    filter   false: record.status == "done" → skip` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("explain output lacks %q:\n%s", want, text)
		}
	}

	// A held change, then the same content for another record answered
	// from the cache.
	h.fake.SetAnswer(func(*api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Status: http.StatusInternalServerError, Error: "out of memory"}
	})
	h.sync("tasks", rec("T-2", "x", "open"))
	h.drain()
	trails, err = explain.Trails(h.ctx, h.pool, h.cfg, explain.Query{Source: "tasks", RecordID: "T-2"})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	explain.WriteTrails(&out, trails)
	text = out.String()
	for _, want := range []string{
		"  state:    pending, held until ",
		"): urgent: chat with \"llama3.2\" at " + h.fake.URL,
		"    error    hold · urgency medium — chat with \"llama3.2\" at ",
		"out of memory; on_model_error is hold: retry after ",
		" attempt 1 · error · ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("held explain output lacks %q:\n%s", want, text)
		}
	}

	h.resetMirror("tasks")
	h.fake.SetAnswer(ollamatest.DefaultAnswer)
	h.sync("tasks", rec("T-1", "URGENT: database down", "open"))
	h.drain()
	trails, err = explain.Trails(h.ctx, h.pool, h.cfg, explain.Query{Source: "tasks", RecordID: "T-1", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	explain.WriteTrails(&out, trails)
	if want := regexp.MustCompile(`verdict of call #1 \(cached: judged for change \d+\): llama3.2`); !want.MatchString(out.String()) {
		t.Errorf("cached explain output lacks %s:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "    dedupe   duplicate · urgency high") || !strings.Contains(out.String(), " · sent for change ") {
		t.Errorf("dedupe not explained:\n%s", out.String())
	}

	if _, err := explain.Trails(h.ctx, h.pool, h.cfg, explain.Query{ChangeID: 999}); err == nil || err.Error() != "change 999 does not exist" {
		t.Errorf("missing change: %v", err)
	}
}

func TestReplayShowsHowDecisionsWouldDiffer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	h.sync("tasks", rec("T-1", "URGENT: database down", "open"), rec("T-2", "Fix a typo", "open"), rec("T-3", "Old", "done"))
	h.drain()
	evals, notes, calls := h.count(`SELECT count(*) FROM evaluations`), h.count(`SELECT count(*) FROM notifications`), h.fake.Chats()

	// The operator drafts a broader watch with a new ask.
	draft := `
name: tasks
connector: file
file:
  paths: ["data/*.json"]
watches:
  - name: urgent
    when: record.status == "open" || record.status == "done"
    ask: Would anyone on the team care about this task?
  - name: closed
    when: record.status == "done"
`
	cfg := loadConfig(t, strings.ReplaceAll(baseGlobal, "{{OLLAMA}}", h.fake.URL), map[string]string{"tasks.yaml": draft})
	ev, err := New(h.pool, testConfig(cfg, Config{Owner: "replay"}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.fake.SetAnswer(func(*api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Content: ollamatest.Verdict(true, "medium", "Someone would care.", 0.6)}
	})

	// Cache only first: the new ask has no verdicts yet.
	since := time.Now().Add(-time.Hour)
	rep, err := ev.Replay(h.ctx, replay.Query{Since: since, Watch: "urgent", NoModel: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Changes != 3 || len(rep.Rows) != 3 || rep.Unknown != 3 || rep.Differ != 0 || rep.Calls != 0 || h.fake.Chats() != calls {
		t.Fatalf("no-model replay: %+v", rep)
	}

	rep, err = ev.Replay(h.ctx, replay.Query{Since: since, Watch: "urgent"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Calls != 3 || rep.Differ != 2 || len(rep.Rows) != 3 {
		t.Fatalf("replay: %+v", rep)
	}
	want := map[string][2]string{"T-1": {"notify", "notify"}, "T-2": {"skip", "notify"}, "T-3": {"skip", "notify"}}
	for _, r := range rep.Rows {
		if w := want[r.RecordID]; r.Old != w[0] || r.New != w[1] || r.NewStep != "model" || r.Differs != (w[0] != w[1]) {
			t.Errorf("row %+v, want %v", r, w)
		}
	}
	var out bytes.Buffer
	if err := replay.Write(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		", watch urgent: 3 change(s), 3 decision(s), 2 would change, 0 new (no recorded decision)\n",
		"filter (when): none\n",
		"model step (model and cache): 3 notify; 3 call(s), 0 cached verdict(s), 0 without a verdict\n",
		"nothing was written to evaluations or notifications, nothing was delivered\n",
		"CHANGE  RECORD",
		"tasks/T-2  urgent  skip (model)   →  notify (model)  Someone would care.",
		"tasks/T-3  urgent  skip (filter)  →  notify (model)  Someone would care.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("replay output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "tasks/T-1") {
		t.Errorf("unchanged decision printed without --all:\n%s", text)
	}

	// Nothing was decided or delivered; the calls are on record as replays.
	if n := h.count(`SELECT count(*) FROM evaluations`); n != evals {
		t.Errorf("evaluations %d, was %d", n, evals)
	}
	if n := h.count(`SELECT count(*) FROM notifications`); n != notes {
		t.Errorf("notifications %d, was %d", n, notes)
	}
	if n := h.count(`SELECT count(*) FROM model_calls WHERE purpose = 'replay'`); n != 3 {
		t.Errorf("replay calls on record = %d, want 3", n)
	}
	// A second replay is answered from the cache.
	rep, err = ev.Replay(h.ctx, replay.Query{Since: since, Watch: "urgent", NoModel: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.CacheHits != 3 || rep.Unknown != 0 || rep.Differ != 2 {
		t.Errorf("cached replay: %+v", rep)
	}
	if _, err := ev.Replay(h.ctx, replay.Query{Since: since, Watch: "nope"}); err == nil || err.Error() != `watch "nope" is not configured` {
		t.Errorf("unknown watch: %v", err)
	}
}

// A replay of a new watch has no recorded decisions: its filter skips are
// counted apart, and not as decisions that would change, so that the model
// decisions stand out.
func TestReplayOfANewWatchSeparatesFilterAndModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	h.sync("tasks", rec("T-1", "URGENT: database down", "open"), rec("T-2", "Fix a typo", "open"),
		rec("T-3", "Old", "done"), rec("T-4", "Older", "done"), rec("T-5", "Oldest", "done"))
	h.drain()

	draft := tasksSource + `  - name: fresh
    when: record.status == "open"
    ask: Would anyone on the team care about this task?
`
	cfg := loadConfig(t, strings.ReplaceAll(baseGlobal, "{{OLLAMA}}", h.fake.URL), map[string]string{"tasks.yaml": draft})
	ev, err := New(h.pool, testConfig(cfg, Config{Owner: "replay"}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h.fake.SetAnswer(func(*api.ChatRequest) ollamatest.Answer {
		return ollamatest.Answer{Content: ollamatest.Verdict(true, "medium", "Someone would care.", 0.6)}
	})
	rep, err := ev.Replay(h.ctx, replay.Query{Since: time.Now().Add(-time.Hour), Watch: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differ != 0 || rep.New != 5 || rep.Filter["skip"] != 3 || rep.Model["notify"] != 2 || len(rep.Filter) != 1 || len(rep.Model) != 1 {
		t.Fatalf("replay of a new watch: differ %d new %d filter %v model %v", rep.Differ, rep.New, rep.Filter, rep.Model)
	}
	var out bytes.Buffer
	if err := replay.Write(&out, rep, false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		", watch fresh: 5 change(s), 5 decision(s), 0 would change, 5 new (no recorded decision)\n",
		"filter (when): 3 skip\n",
		"model step (model and cache): 2 notify; 2 call(s), 0 cached verdict(s), 0 without a verdict\n",
		"tasks/T-1  fresh  —    →  notify (model)  Someone would care.",
		"tasks/T-2  fresh  —    →  notify (model)  Someone would care.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("replay output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "tasks/T-3") {
		t.Errorf("a new watch's filter skip is listed without --all:\n%s", text)
	}
}

// The trail lists the watches of the definitions, not only those of the
// files it was given: a watch made through the API on a file's source is
// configured, with its when (the admin's record page and the CLI pass
// the files' configuration).
func TestExplainShowsTheWatchesOfTheDefinitions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	if _, err := definitions.Apply(h.ctx, h.pool, h.cfg, definitions.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	store := definitions.NewStore(h.pool, &definitions.Validator{Global: &h.cfg.Global})
	if _, err := store.CreateWatch(h.ctx, definitions.Actor{Owner: "alice"}, "tasks", []byte(`{"name": "alices", "when": "record.status == \"done\""}`)); err != nil {
		t.Fatal(err)
	}
	h.sync("tasks", rec("T-9", "Printer", "open"))
	h.drain()
	trails, err := explain.Trails(h.ctx, h.pool, h.cfg, explain.Query{ChangeID: h.lastChange("tasks", "T-9")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range trails[0].Watches {
		names = append(names, w.Watch)
		if w.Watch == "alices" && (!w.Configured || w.When != `record.status == "done"` || w.Evaluation != nil) {
			t.Errorf("alice's watch: %+v", w)
		}
	}
	if strings.Join(names, ",") != "alices,closed,urgent" {
		t.Errorf("watches in the trail: %v, want the definitions' alices, closed, urgent", names)
	}
	var out bytes.Buffer
	explain.WriteTrails(&out, trails)
	if !strings.Contains(out.String(), "  watch alices\n             no decision (the watch did not exist when the change was evaluated)\n") {
		t.Errorf("explain output:\n%s", out.String())
	}
}

// A replay without the model (control.DryRun without use_model, `replay
// --no-model`) reads the verdict cache only: with the model server down it
// gives the report it gives with the server up, not an error per ask.
func TestReplayWithoutModelNeedsNoModelServer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, baseGlobal, map[string]string{"tasks.yaml": tasksSource})
	h.sync("tasks", rec("T-1", "URGENT: database down", "open"), rec("T-2", "Fix a typo", "open"), rec("T-3", "Old", "done"))
	h.drain()
	since := time.Now().Add(-time.Hour)
	up, err := h.ev.Replay(h.ctx, replay.Query{Since: since, NoModel: true})
	if err != nil {
		t.Fatal(err)
	}
	if up.CacheHits == 0 || up.Unknown != 0 {
		t.Fatalf("replay with the model server up: want cached verdicts, got %+v", up)
	}

	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // nothing listens there any more
	cfg := loadConfig(t, strings.ReplaceAll(baseGlobal, "{{OLLAMA}}", downURL), map[string]string{"tasks.yaml": tasksSource})
	ev, err := New(h.pool, testConfig(cfg, Config{Owner: "replay"}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ev.Replay(h.ctx, replay.Query{Since: since, Until: up.Query.Until, NoModel: true})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(up.Rows, func(a, b replay.Row) int {
		return cmp.Or(cmp.Compare(a.ChangeID, b.ChangeID), strings.Compare(a.Watch, b.Watch))
	})
	slices.SortFunc(got.Rows, func(a, b replay.Row) int {
		return cmp.Or(cmp.Compare(a.ChangeID, b.ChangeID), strings.Compare(a.Watch, b.Watch))
	})
	if !reflect.DeepEqual(got, up) {
		t.Errorf("replay with the model server down differs:\n got %+v\nwant %+v", got, up)
	}
}
