package semantic

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/modelspec"
)

func TestParseBriefing(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "b", "c"}
	good := `{"headline": {"text": " Two things. ", "citations": ["b", "a", "b"]}, "items": [{"record_id": "b", "why_it_matters": "It is due today."}, {"record_id": "a", "why_it_matters": "Asked by your manager."}]}`
	br, raw, err := ParseBriefing(good, ids, 2)
	if err != nil || br.Headline != "Two things." || !slices.Equal(br.HeadlineCitations, []string{"b", "a"}) || len(br.Items) != 2 ||
		br.Items[0].RecordID != "b" || br.Dropped != 0 || !br.Grounded() || raw == nil {
		t.Fatalf("ParseBriefing(good) = %+v, %s, %v", br, raw, err)
	}
	if br, _, err := ParseBriefing(`{"headline": {"text": "Nothing needs you.", "citations": ["a", "b", "c"]}, "items": []}`, ids, 2); err != nil ||
		br.Items == nil || br.Headline == "" || !br.Grounded() {
		t.Errorf("no items cited = %+v, %v", br, err)
	}
	// Sentences citing nothing are dropped, never shown.
	uncited := `{"headline": {"text": "The production database is down.", "citations": []}, "items": [{"record_id": "a", "why_it_matters": "Asked by your manager."}, {"record_id": "", "why_it_matters": "Everything is on fire."}]}`
	if br, _, err := ParseBriefing(uncited, ids, 2); err != nil || br.Headline != "" || len(br.HeadlineCitations) != 0 ||
		len(br.Items) != 1 || br.Items[0].RecordID != "a" || br.Dropped != 2 || !br.Grounded() {
		t.Errorf("uncited sentences = %+v, %v; want the headline and the second item dropped", br, err)
	}
	if br, _, err := ParseBriefing(`{"headline": {"text": "All is well.", "citations": []}, "items": []}`, ids, 2); err != nil ||
		br.Grounded() || br.Dropped != 1 {
		t.Errorf("nothing grounded = %+v (grounded %v), %v", br, br.Grounded(), err)
	}
	if modelspec.DroppedNote(1) != "1 sentence of the model's briefing was dropped: not grounded in the items" ||
		modelspec.DroppedNote(2) != "2 sentences of the model's briefing were dropped: not grounded in the items" {
		t.Errorf("modelspec.DroppedNote = %q, %q", modelspec.DroppedNote(1), modelspec.DroppedNote(2))
	}
	h := `{"text": "h", "citations": ["a"]}`
	tests := []struct{ name, content, want string }{
		{"not JSON", `{"headline": "cut`, `not JSON`},
		{"not an object", `[1]`, `not a JSON object`},
		{"invented id", `{"headline": ` + h + `, "items": [{"record_id": "z", "why_it_matters": "w"}]}`, `items[0].record_id "z" is not one of the digest's items`},
		{"invented headline citation", `{"headline": {"text": "h", "citations": ["a", "z"]}, "items": []}`, `headline.citations[1] "z" is not one of the digest's items`},
		{"headline a string", `{"headline": "h", "items": []}`, `headline must be an object with text and citations`},
		{"headline without citations", `{"headline": {"text": "h"}, "items": []}`, `headline.citations is missing`},
		{"citations not a list", `{"headline": {"text": "h", "citations": "a"}, "items": []}`, `headline.citations must be a list of record ids`},
		{"extra headline key", `{"headline": {"text": "h", "citations": ["a"], "tone": "calm"}, "items": []}`, `headline has unexpected key "tone"`},
		{"cited twice", `{"headline": ` + h + `, "items": [{"record_id": "a", "why_it_matters": "w"}, {"record_id": "a", "why_it_matters": "w"}]}`, `items[1].record_id "a" is cited twice`},
		{"too many", `{"headline": ` + h + `, "items": [{"record_id": "a", "why_it_matters": "w"}, {"record_id": "b", "why_it_matters": "w"}, {"record_id": "c", "why_it_matters": "w"}]}`, `items has 3 entries, more than 2`},
		{"no headline", `{"items": []}`, `headline is missing`},
		{"empty why", `{"headline": ` + h + `, "items": [{"record_id": "a", "why_it_matters": " "}]}`, `items[0].why_it_matters is empty`},
		{"extra key", `{"headline": ` + h + `, "items": [], "mood": "ok"}`, `unexpected key "mood"`},
		{"extra item key", `{"headline": ` + h + `, "items": [{"record_id": "a", "why_it_matters": "w", "score": 1}]}`, `items[0] has unexpected key "score"`},
		{"items not a list", `{"headline": ` + h + `, "items": "a"}`, `items must be a list of objects`},
		{"long headline", `{"headline": {"text": "` + strings.Repeat("x", modelspec.HeadlineMaxChars+1) + `", "citations": ["a"]}, "items": []}`, `headline.text has 201 characters, more than 200`},
	}
	for _, tt := range tests {
		_, _, err := ParseBriefing(tt.content, ids, 2)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestBriefQuestion(t *testing.T) {
	t.Parallel()
	conf := modelspec.Config{Model: "llama3.2", Options: map[string]any{"temperature": 0, "seed": 42}}
	q, err := modelspec.NewBriefQuestion(conf, &config.Summarize{Ask: "What needs me?", MaxItems: 5})
	if err != nil {
		t.Fatal(err)
	}
	q2, _ := modelspec.NewBriefQuestion(conf, &config.Summarize{Ask: "What needs me now?", MaxItems: 5})
	if !strings.HasPrefix(q.Version, "pb-") || q.Version == q2.Version || !strings.Contains(q.System(), "What needs me?") {
		t.Errorf("versions %s %s; a new ask must be a new prompt version", q.Version, q2.Version)
	}
	if _, err := modelspec.NewBriefQuestion(conf, &config.Summarize{Ask: "x", MaxItems: 5, Model: &config.WatchModel{Options: map[string]any{"temprature": 1}}}); err == nil {
		t.Errorf("a misspelt option is accepted")
	}
	// The input is what the model is shown: the same items make the same
	// hash whatever their notifications, a changed item a new one.
	items := []modelspec.BriefItem{{RecordID: "a", Title: "Deploy failed", Kind: "created", Version: 1, Body: strings.Repeat("b", modelspec.BriefBodyChars+50)}}
	msgs, hash := briefMessages(q, "src", "w", items)
	if hash != q.InputHash("src", "w", items) || !strings.Contains(msgs[1].Content, `"id":"a"`) || strings.Contains(msgs[1].Content, strings.Repeat("b", modelspec.BriefBodyChars+1)) {
		t.Errorf("user message:\n%s", msgs[1].Content)
	}
	items[0].Title = "Deploy failed again"
	if q.InputHash("src", "w", items) == hash {
		t.Errorf("a changed item kept the input hash")
	}
	var schema map[string]any
	if err := json.Unmarshal(BriefSchema([]string{"a", "b"}, 5), &schema); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
}
