// Package modelspec is what lookout asks a model, without the model: the
// model settings (Config, lookout.yaml's ollama block), a watch's ask
// resolved over them (Question: the system message with its answer
// schema, the options, the prompt version; Input: a change as the model
// sees it), a digest's summarize block resolved over them (BriefQuestion,
// BriefItem; a briefing's BriefRequest and BriefResult), and the check of
// model options against Ollama's (OllamaOptions, NormalizeOptions). It
// links no Ollama module and touches no database: watchspec and notify
// check questions with it wherever a watch is validated (the api
// included), and semantic, the model path, sends them.
package modelspec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// TemplateVersion names the prompt template below. Change it whenever the
// template's wording changes: it is part of every prompt version, so the
// verdict cache misses and report_model_drift shows the new version.
const TemplateVersion = "lookout-verdict/1"

// MaxFieldChars bounds each string field of the record shown to the model;
// longer values are cut and marked.
const MaxFieldChars = 4000

// systemTemplate is the system message: the task, the answer format, and
// the watch's question. %s are the schema and the question block.
const systemTemplate = `You are the judgment step of a monitoring system. A deterministic filter has already selected the change below as a candidate; decide whether it satisfies the user's condition.

Answer with one JSON object and nothing else, matching this JSON schema:
%s

- should_notify: true only when the change satisfies the condition.
- urgency: low, medium or high, for the user reading the notification.
- reason: one short sentence saying why, for the user.
- confidence: how sure you are of should_notify, from 0 to 1.

%s`

// Question is a watch's ask with its resolved model settings.
type Question struct {
	// Ask is the condition in natural language.
	Ask string
	// Examples and CounterExamples steer the model.
	Examples, CounterExamples []string
	// Model is the Ollama model name.
	Model string
	// Timeout bounds one call.
	Timeout time.Duration
	// Options are the model options sent with every call, JSON-normalised.
	Options map[string]any
	// ReasonMax bounds the reason the schema allows.
	ReasonMax int
	// Version is the prompt version: a hash of the template, the system
	// message (which holds the schema, the ask and the examples) and the
	// options.
	Version string

	system string
	schema json.RawMessage
}

// NewQuestion resolves the model settings of watch w over the defaults of
// o. The error names the first bad option.
func NewQuestion(o Config, w *config.Watch) (*Question, error) {
	q := &Question{
		Ask:             strings.TrimSpace(w.Ask),
		Examples:        w.Examples,
		CounterExamples: w.CounterExamples,
		ReasonMax:       o.ReasonMaxChars,
	}
	var err error
	if q.Model, q.Timeout, q.Options, err = o.resolve(w.Model); err != nil {
		return nil, err
	}
	q.schema = SchemaFor(q.ReasonMax)
	q.system = fmt.Sprintf(systemTemplate, q.schema, q.questionBlock())
	sum := sha256.New()
	fmt.Fprintf(sum, "%s\x00%s\x00%s", TemplateVersion, q.system, normalize.Canonical(q.Options))
	q.Version = "pv-" + hex.EncodeToString(sum.Sum(nil))[:16]
	return q, nil
}

func (q *Question) questionBlock() string {
	var b strings.Builder
	fmt.Fprintf(&b, "The user's condition:\n%s\n", q.Ask)
	if len(q.Examples) > 0 {
		b.WriteString("\nExamples of changes that satisfy the condition:\n")
		for _, ex := range q.Examples {
			fmt.Fprintf(&b, "- %s\n", strings.TrimSpace(ex))
		}
	}
	if len(q.CounterExamples) > 0 {
		b.WriteString("\nCounter-examples, changes that do not satisfy it:\n")
		for _, ex := range q.CounterExamples {
			fmt.Fprintf(&b, "- %s\n", strings.TrimSpace(ex))
		}
	}
	return b.String()
}

// System returns the system message.
func (q *Question) System() string { return q.system }

// Schema returns the JSON schema sent as the request's format.
func (q *Question) Schema() json.RawMessage { return q.schema }

// Input is a change as the model sees it.
type Input struct {
	// Source is the source name.
	Source string
	// Kind is created, updated or deleted.
	Kind string
	// ChangedFields lists the changed fields (extra.<key> for extra keys).
	ChangedFields []string
	// Record is the canonical record after the change; Previous before it
	// (nil for a created record).
	Record, Previous map[string]any
	// Omit lists fields left out of what the model sees: the source's
	// volatile paths (top-level names or extra.<key>), which by definition
	// carry no meaning.
	Omit []string
}

// UserMessage renders the change and returns it with its input hash, the
// SHA-256 of exactly that text. Nothing that varies without the content
// varying (change id, timestamps of the sync, volatile fields) is in it, so
// the same change content always has the same hash.
func (in Input) UserMessage() (string, string) {
	rec := trimFields(omit(in.Record, in.Omit))
	var b strings.Builder
	fmt.Fprintf(&b, "Source: %s\nChange: the record was %s.\n", in.Source, in.Kind)
	changed := slices.DeleteFunc(slices.Clone(in.ChangedFields), func(f string) bool { return slices.Contains(in.Omit, f) })
	if len(changed) > 0 {
		fmt.Fprintf(&b, "Changed fields: %s\n", strings.Join(changed, ", "))
	}
	fmt.Fprintf(&b, "\nRecord after the change:\n%s\n", normalize.Canonical(rec))
	if in.Previous != nil && len(changed) > 0 {
		prev := map[string]any{}
		for _, f := range changed {
			if key, ok := strings.CutPrefix(f, "extra."); ok {
				extra, _ := in.Previous["extra"].(map[string]any)
				prev[f] = extra[key]
			} else {
				prev[f] = in.Previous[f]
			}
		}
		fmt.Fprintf(&b, "\nPrevious values of the changed fields:\n%s\n", normalize.Canonical(trimFields(prev)))
	}
	text := b.String()
	sum := sha256.Sum256([]byte(text))
	return text, hex.EncodeToString(sum[:])
}

func omit(rec map[string]any, paths []string) map[string]any {
	if len(paths) == 0 || rec == nil {
		return rec
	}
	out := maps.Clone(rec)
	for _, p := range paths {
		if key, ok := strings.CutPrefix(p, "extra."); ok {
			if extra, ok := out["extra"].(map[string]any); ok {
				extra = maps.Clone(extra)
				delete(extra, key)
				out["extra"] = extra
			}
			continue
		}
		delete(out, p)
	}
	return out
}

// trimFields cuts long strings (recursively) to MaxFieldChars.
func trimFields(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = trimValue(v)
	}
	return out
}

func trimValue(v any) any {
	switch x := v.(type) {
	case string:
		r := []rune(x)
		if len(r) > MaxFieldChars {
			return string(r[:MaxFieldChars]) + fmt.Sprintf(" …[%d more characters]", len(r)-MaxFieldChars)
		}
		return x
	case map[string]any:
		return trimFields(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = trimValue(e)
		}
		return out
	}
	return v
}

// ConfidenceSteps are the confidence values the schema offers the model.
// A grammar cannot bound a free JSON number, so the schema lists the values
// (Ollama turns the schema into a grammar that the output must follow);
// semantic.ParseVerdict accepts any number in [0, 1], for servers that do not
// enforce the format.
var ConfidenceSteps = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}

// SchemaFor is the JSON schema sent as the request's format, with reason
// at most reasonMax characters (a bound the grammar enforces, which keeps a
// small model from rambling until num_predict cuts the JSON short).
// semantic.ParseVerdict checks the answer against it.
func SchemaFor(reasonMax int) json.RawMessage {
	steps, _ := json.Marshal(ConfidenceSteps)
	return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
		`"should_notify":{"type":"boolean"},`+
		`"urgency":{"type":"string","enum":["low","medium","high"]},`+
		`"reason":{"type":"string","minLength":1,"maxLength":%d},`+
		`"confidence":{"type":"number","enum":%s}},`+
		`"required":["should_notify","urgency","reason","confidence"],"additionalProperties":false}`, reasonMax, steps))
}
