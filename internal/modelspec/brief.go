package modelspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
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
func NewBriefQuestion(o Config, s *config.Summarize) (*BriefQuestion, error) {
	q := &BriefQuestion{Ask: strings.TrimSpace(s.Ask), MaxItems: s.MaxItems}
	var err error
	if q.Model, q.Timeout, q.Options, err = o.resolve(s.Model); err != nil {
		return nil, err
	}
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

// UserMessage renders a digest of items of source's watch for the model
// and returns it with its input hash, the SHA-256 of exactly that text.
func (q *BriefQuestion) UserMessage(source, watch string, items []BriefItem) (string, string) {
	user := briefUserMessage(source, watch, items)
	sum := sha256.Sum256([]byte(user))
	return user, hex.EncodeToString(sum[:])
}

// InputHash is the input hash of UserMessage without keeping the text.
func (q *BriefQuestion) InputHash(source, watch string, items []BriefItem) string {
	_, hash := q.UserMessage(source, watch, items)
	return hash
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

// BriefRequest asks for the briefing of one digest.
type BriefRequest struct {
	// Source and Watch are the digest's watch (budget and model_calls).
	Source, Watch string
	// Ref names the digest in model_calls.input_ref.
	Ref string
	// Question is the watch's summarize block.
	Question *BriefQuestion
	// Items are the items shown to the model (at most Question.MaxItems).
	Items []BriefItem
	// Budget is the watch's daily budget; zero values mean no limit.
	Budget config.Budget
}

// BriefResult is what became of a BriefRequest: a Briefing, or Missing
// saying why there is none, or Busy.
type BriefResult struct {
	// Briefing is the validated briefing (from the model or the cache).
	Briefing *Briefing
	// Missing says in one line why there is no briefing; the digest goes
	// out without one.
	Missing string
	// Busy means another replica is writing this briefing now: try again
	// later (at most its claim, two model timeouts, later).
	Busy bool
	// Cached is true when the briefing (or its failure) was found in the
	// cache, without a model call.
	Cached bool
	// Model, ModelDigest, PromptVersion and InputHash identify the
	// question, the model and the input.
	Model, ModelDigest, PromptVersion, InputHash string
	// ModelCallID is the model_calls row of the answer (or of the last
	// failed call).
	ModelCallID *int64
	// Calls is the number of model requests this Brief made.
	Calls int
}
