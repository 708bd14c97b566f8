package semantic

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// BriefTemplateVersion names the briefing prompt template. Change it
// whenever the template's wording changes: it is part of every briefing's
// prompt version, so the briefing cache misses.
const BriefTemplateVersion = "lookout-briefing/2"

// Bounds of a briefing's text, enforced by the schema and by ParseBriefing.
const (
	// HeadlineMaxChars bounds the headline.
	HeadlineMaxChars = 200
	// WhyMaxChars bounds each item's why_it_matters.
	WhyMaxChars = 300
	// BriefBodyChars bounds the body of each item shown to the model.
	BriefBodyChars = 600
)

// briefSystemTemplate is the system message of a briefing: the task, the
// reader's ask, the rules. The schema is in the request's format (it
// lists the digest's record ids, so it is per digest).
const briefSystemTemplate = `You write a short briefing for one person from the items of a digest that a monitoring system collected for them. Deterministic filters already selected these items; your job is to say which of them matter to this person and why.

What matters to the person:
%s

Answer with one JSON object and nothing else:
- headline: the gist of the digest for this person, with text, one sentence (at most %d characters), and citations, the "id"s of the listed items it sums up (at least one).
- items: at most %d items that matter, most important first. Each has record_id, the "id" of the item exactly as listed, and why_it_matters, one sentence for the person about that item (at most %d characters). Cite each item at most once. Leave out items that do not matter; never cite an id that is not listed.
Say only what the cited items say: a sentence that cites no listed item is not shown to the person.`

// BriefQuestion is a digest's summarize block with its resolved model
// settings.
type BriefQuestion struct {
	// Ask says what matters to the reader.
	Ask string
	// MaxItems bounds the items shown to the model and cited.
	MaxItems int
	// Model is the Ollama model name.
	Model string
	// Timeout bounds one call.
	Timeout time.Duration
	// Options are the model options sent with every call, JSON-normalised.
	Options map[string]any
	// Version is the prompt version: "pb-" and a hash of the template, the
	// system message (ask and bounds) and the options.
	Version string

	system string
}

// NewBriefQuestion resolves the model settings of s over the defaults of
// o. The error names the first bad option.
func NewBriefQuestion(o modelspec.Config, s *config.Summarize) (*BriefQuestion, error) {
	q := &BriefQuestion{Ask: strings.TrimSpace(s.Ask), MaxItems: s.MaxItems, Model: o.Model, Timeout: o.Timeout}
	opts := maps.Clone(o.Options)
	if opts == nil {
		opts = map[string]any{}
	}
	if m := s.Model; m != nil {
		q.Model = cmp.Or(m.Name, q.Model)
		q.Timeout = cmp.Or(m.Timeout, q.Timeout)
		maps.Copy(opts, m.Options)
	}
	norm, err := modelspec.NormalizeOptions(opts)
	if err != nil {
		return nil, err
	}
	q.Options = norm
	q.system = fmt.Sprintf(briefSystemTemplate, q.Ask, HeadlineMaxChars, q.MaxItems, WhyMaxChars)
	sum := sha256.New()
	fmt.Fprintf(sum, "%s\x00%s\x00%s", BriefTemplateVersion, q.system, normalize.Canonical(q.Options))
	q.Version = "pb-" + hex.EncodeToString(sum.Sum(nil))[:16]
	return q, nil
}

// System returns the system message.
func (q *BriefQuestion) System() string { return q.system }

// BriefItem is one digest item as the model is shown it. Nothing in it
// varies without the item varying (no notification id, no sink), so the
// same matches sent to two sinks make the same input.
type BriefItem struct {
	// RecordID is the record's id in its source: what a briefing cites.
	RecordID string
	// Title, URL, Author, Labels and Body are the record's fields (Body
	// is cut to BriefBodyChars).
	Title, URL, Author string
	Labels             []string
	Body               string
	// Kind and Version are the change (created, updated, deleted; the
	// record's version).
	Kind    string
	Version int
	// Urgency and Reason are the match's (the watch's urgency, or the
	// model's verdict when the watch asks).
	Urgency, Reason string
}

// Messages returns the chat messages for a digest of items and the input
// hash, the SHA-256 of the user message.
func (q *BriefQuestion) Messages(source, watch string, items []BriefItem) ([]api.Message, string) {
	user := briefUserMessage(source, watch, items)
	sum := sha256.Sum256([]byte(user))
	return []api.Message{{Role: "system", Content: q.system}, {Role: "user", Content: user}}, hex.EncodeToString(sum[:])
}

// InputHash is the input hash of Messages without building them.
func (q *BriefQuestion) InputHash(source, watch string, items []BriefItem) string {
	sum := sha256.Sum256([]byte(briefUserMessage(source, watch, items)))
	return hex.EncodeToString(sum[:])
}

func briefUserMessage(source, watch string, items []BriefItem) string {
	list := make([]any, len(items))
	for i, it := range items {
		m := map[string]any{"id": it.RecordID, "change": fmt.Sprintf("%s v%d", it.Kind, it.Version)}
		set := func(k, v string) {
			if v != "" {
				m[k] = v
			}
		}
		set("title", it.Title)
		set("url", it.URL)
		set("author", it.Author)
		set("urgency", it.Urgency)
		set("matched_because", it.Reason)
		if len(it.Labels) > 0 {
			m["labels"] = it.Labels
		}
		if r := []rune(it.Body); len(r) > BriefBodyChars {
			m["body"] = string(r[:BriefBodyChars]) + " …"
		} else {
			set("body", it.Body)
		}
		list[i] = m
	}
	return fmt.Sprintf("Digest of watch %q on source %q: %d item(s).\n\nItems:\n%s\n",
		watch, source, len(items), normalize.Canonical(list))
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
		`"required":["headline","items"],"additionalProperties":false}`, HeadlineMaxChars, enum, maxItems, enum, WhyMaxChars))
}

// Briefing is the model's validated answer, reduced to its grounded
// sentences: each one it holds cites at least one of the digest's items.
type Briefing struct {
	// Headline is one sentence, the gist of the digest; empty when the
	// model's headline cited no item (it was dropped).
	Headline string `json:"headline"`
	// HeadlineCitations are the records the headline cites, each one of
	// the digest's items.
	HeadlineCitations []string `json:"headline_citations"`
	// Items are the items that matter, most important first.
	Items []BriefingItem `json:"items"`
	// Dropped counts the model's sentences left out because they cite no
	// item. Their text is kept nowhere but the model call's record.
	Dropped int `json:"dropped"`
}

// Grounded reports whether b has a sentence to show: a headline or an
// item. A briefing without one is not shown at all.
func (b *Briefing) Grounded() bool { return b.Headline != "" || len(b.Items) > 0 }

// DroppedNote is the line that tells the reader n sentences of the
// model's briefing were left out (never what they said).
func DroppedNote(n int) string {
	if n == 1 {
		return "1 sentence of the model's briefing was dropped: not grounded in the items"
	}
	return fmt.Sprintf("%d sentences of the model's briefing were dropped: not grounded in the items", n)
}

// BriefingItem is one cited item of a briefing.
type BriefingItem struct {
	// RecordID is the cited record; always one of the digest's items.
	RecordID string `json:"record_id"`
	// WhyItMatters is one sentence for the reader.
	WhyItMatters string `json:"why_it_matters"`
}

// ParseBriefing decodes and validates an answer against BriefSchema(ids,
// maxItems): a headline with its citations, at most maxItems items, each
// citing one of ids once. An answer citing an id that is not one of ids is
// rejected: the model may not invent an item. A sentence that cites
// nothing (a headline with no citation, an item with an empty record_id)
// is dropped and counted in Dropped: only grounded sentences reach the
// reader. It returns the answer as JSON when it is JSON at all (for the
// record) and an error wrapping ErrMalformed that says what is wrong.
func ParseBriefing(content string, ids []string, maxItems int) (Briefing, json.RawMessage, error) {
	var b Briefing
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
		b.Headline = str("headline.text", head["text"], HeadlineMaxChars)
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
		why := str(path+".why_it_matters", it["why_it_matters"], WhyMaxChars)
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
		b.Items = append(b.Items, BriefingItem{RecordID: id, WhyItMatters: why})
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return Briefing{}, raw, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(problems, "; "))
	}
	if b.Items == nil {
		b.Items = []BriefingItem{}
	}
	if len(b.HeadlineCitations) == 0 {
		b.Headline = ""
		b.Dropped++
	}
	return b, raw, nil
}
