package semantic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/modelspec"
)

// briefMessages returns the chat messages of q for a digest of items and
// the input hash, the SHA-256 of the user message.
func briefMessages(q *modelspec.BriefQuestion, source, watch string, items []modelspec.BriefItem) ([]api.Message, string) {
	user, hash := q.UserMessage(source, watch, items)
	return []api.Message{{Role: "system", Content: q.System()}, {Role: "user", Content: user}}, hash
}

// BriefSchema is the JSON schema of a briefing citing ids (the request's
// format): Ollama turns it into a grammar, so record_id and the headline's
// citations can only be the digest's ids. ParseBriefing checks the same
// rules in code, and drops a sentence that cites nothing.
func BriefSchema(ids []string, maxItems int) json.RawMessage {
	enum, _ := json.Marshal(ids)
	return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
		`"headline":{"type":"object","properties":{`+
		`"text":{"type":"string","minLength":1,"maxLength":%d},`+
		`"citations":{"type":"array","minItems":1,"items":{"type":"string","enum":%s}}},`+
		`"required":["text","citations"],"additionalProperties":false},`+
		`"items":{"type":"array","maxItems":%d,"items":{"type":"object","properties":{`+
		`"record_id":{"type":"string","enum":%s},`+
		`"why_it_matters":{"type":"string","minLength":1,"maxLength":%d}},`+
		`"required":["record_id","why_it_matters"],"additionalProperties":false}}},`+
		`"required":["headline","items"],"additionalProperties":false}`, modelspec.HeadlineMaxChars, enum, maxItems, enum, modelspec.WhyMaxChars))
}

// ParseBriefing decodes and validates an answer against BriefSchema(ids,
// maxItems): a headline with its citations, at most maxItems items, each
// citing one of ids once. An answer citing an id that is not one of ids is
// rejected: the model may not invent an item. A sentence that cites
// nothing (a headline with no citation, an item with an empty record_id)
// is dropped and counted in Dropped: only grounded sentences reach the
// reader. It returns the answer as JSON when it is JSON at all (for the
// record) and an error wrapping ErrMalformed that says what is wrong.
func ParseBriefing(content string, ids []string, maxItems int) (modelspec.Briefing, json.RawMessage, error) {
	var b modelspec.Briefing
	content = strings.TrimSpace(content)
	if !json.Valid([]byte(content)) {
		return b, nil, fmt.Errorf("%w: not JSON: %q", ErrMalformed, snippet(content, 120))
	}
	raw := json.RawMessage(content)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return b, raw, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	var problems []string
	for k := range fields {
		if k != "headline" && k != "items" {
			problems = append(problems, fmt.Sprintf("unexpected key %q", k))
		}
	}
	str := func(path string, v json.RawMessage, max int) string {
		var s string
		if v == nil {
			problems = append(problems, path+" is missing")
			return ""
		}
		if err := json.Unmarshal(v, &s); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			problems = append(problems, fmt.Sprintf("%s must be a string, not %s", path, snippet(string(v), 40)))
			return ""
		}
		s = strings.TrimSpace(s)
		switch n := utf8.RuneCountInString(s); {
		case n == 0:
			problems = append(problems, path+" is empty")
		case n > max:
			problems = append(problems, fmt.Sprintf("%s has %d characters, more than %d", path, n, max))
		}
		return s
	}
	b.HeadlineCitations = []string{}
	var head map[string]json.RawMessage
	if v, ok := fields["headline"]; !ok {
		problems = append(problems, "headline is missing")
	} else if err := json.Unmarshal(v, &head); err != nil || head == nil {
		problems = append(problems, fmt.Sprintf("headline must be an object with text and citations, not %s", snippet(string(v), 40)))
	} else {
		for k := range head {
			if k != "text" && k != "citations" {
				problems = append(problems, fmt.Sprintf("headline has unexpected key %q", k))
			}
		}
		b.Headline = str("headline.text", head["text"], modelspec.HeadlineMaxChars)
		var cites []json.RawMessage
		if v, ok := head["citations"]; !ok {
			problems = append(problems, "headline.citations is missing")
		} else if err := json.Unmarshal(v, &cites); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			problems = append(problems, fmt.Sprintf("headline.citations must be a list of record ids, not %s", snippet(string(v), 40)))
		}
		for i, c := range cites {
			path := fmt.Sprintf("headline.citations[%d]", i)
			id := str(path, c, 1000)
			switch {
			case id == "":
			case !slices.Contains(ids, id):
				problems = append(problems, fmt.Sprintf("%s %q is not one of the digest's items", path, snippet(id, 60)))
			case !slices.Contains(b.HeadlineCitations, id):
				b.HeadlineCitations = append(b.HeadlineCitations, id)
			}
		}
	}
	var items []map[string]json.RawMessage
	if v, ok := fields["items"]; !ok {
		problems = append(problems, "items is missing")
	} else if err := json.Unmarshal(v, &items); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		problems = append(problems, fmt.Sprintf("items must be a list of objects, not %s", snippet(string(v), 40)))
	}
	if len(items) > maxItems {
		problems = append(problems, fmt.Sprintf("items has %d entries, more than %d", len(items), maxItems))
	}
	cited := map[string]bool{}
	for i, it := range items {
		path := fmt.Sprintf("items[%d]", i)
		for k := range it {
			if k != "record_id" && k != "why_it_matters" {
				problems = append(problems, fmt.Sprintf("%s has unexpected key %q", path, k))
			}
		}
		var id string
		if v, ok := it["record_id"]; ok && bytes.Equal(bytes.TrimSpace(v), []byte(`""`)) {
			// An item citing nothing: its sentence is dropped below.
		} else {
			id = str(path+".record_id", v, 1000)
		}
		why := str(path+".why_it_matters", it["why_it_matters"], modelspec.WhyMaxChars)
		switch {
		case id == "":
			b.Dropped++
			continue
		case !slices.Contains(ids, id):
			problems = append(problems, fmt.Sprintf("%s.record_id %q is not one of the digest's items", path, snippet(id, 60)))
		case cited[id]:
			problems = append(problems, fmt.Sprintf("%s.record_id %q is cited twice", path, snippet(id, 60)))
		}
		cited[id] = true
		b.Items = append(b.Items, modelspec.BriefingItem{RecordID: id, WhyItMatters: why})
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return modelspec.Briefing{}, raw, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(problems, "; "))
	}
	if b.Items == nil {
		b.Items = []modelspec.BriefingItem{}
	}
	if len(b.HeadlineCitations) == 0 {
		b.Headline = ""
		b.Dropped++
	}
	return b, raw, nil
}
