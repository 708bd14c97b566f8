// Package semantic is the model step of the evaluator: it asks a local
// Ollama server whether a change that passed a watch's deterministic filter
// satisfies the watch's natural-language ask, and records every call.
//
// The model is only ever asked for a judgment. Time, state, retries and
// locking stay with Postgres and the evaluator: a Judge looks up the verdict
// cache (verdicts), checks the watch's daily budget, calls the model with
// bounded concurrency and a rate limit, validates the structured answer
// against a JSON schema (retrying a malformed answer once), and writes a
// model_calls row for every request. What happens to a change whose model
// step failed (hold, notify, skip) is the evaluator's decision.
package semantic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Verdict is the model's structured answer.
type Verdict struct {
	// ShouldNotify is the judgment: does the change satisfy the ask?
	ShouldNotify bool `json:"should_notify"`
	// Urgency is low, medium or high.
	Urgency string `json:"urgency"`
	// Reason is one sentence for the notification and the decision trail.
	Reason string `json:"reason"`
	// Confidence is the model's confidence in ShouldNotify, 0..1.
	Confidence float64 `json:"confidence"`
}

// Urgencies are the values Verdict.Urgency may take.
var Urgencies = []string{"low", "medium", "high"}

// ErrMalformed marks an answer that does not satisfy the schema of its
// question (modelspec.SchemaFor).
var ErrMalformed = errors.New("malformed answer")

// ParseVerdict decodes and validates the model's answer against
// modelspec.SchemaFor(reasonMax). It returns the answer as JSON when it is JSON at
// all (for the record, even when invalid) and an error wrapping
// ErrMalformed that says what is wrong.
func ParseVerdict(content string, reasonMax int) (Verdict, json.RawMessage, error) {
	var v Verdict
	content = strings.TrimSpace(content)
	if !json.Valid([]byte(content)) {
		return v, nil, fmt.Errorf("%w: not JSON: %q", ErrMalformed, snippet(content, 120))
	}
	raw := json.RawMessage(content)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return v, raw, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	var problems []string
	for k := range fields {
		switch k {
		case "should_notify", "urgency", "reason", "confidence":
		default:
			problems = append(problems, fmt.Sprintf("unexpected key %q", k))
		}
	}
	field := func(name string, dst any, what string) {
		b, ok := fields[name]
		if !ok {
			problems = append(problems, name+" is missing")
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(dst); err != nil || bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
			problems = append(problems, fmt.Sprintf("%s must be %s, not %s", name, what, snippet(string(b), 40)))
		}
	}
	field("should_notify", &v.ShouldNotify, "a boolean")
	field("urgency", &v.Urgency, "a string")
	field("reason", &v.Reason, "a string")
	field("confidence", &v.Confidence, "a number")
	if _, ok := fields["urgency"]; ok && v.Urgency != "" && !slices.Contains(Urgencies, v.Urgency) {
		problems = append(problems, fmt.Sprintf("urgency must be low, medium or high, not %q", v.Urgency))
	}
	if _, ok := fields["reason"]; ok && strings.TrimSpace(v.Reason) == "" {
		problems = append(problems, "reason is empty")
	} else if n := utf8.RuneCountInString(v.Reason); n > reasonMax {
		problems = append(problems, fmt.Sprintf("reason has %d characters, more than %d", n, reasonMax))
	}
	if _, ok := fields["confidence"]; ok && (math.IsNaN(v.Confidence) || v.Confidence < 0 || v.Confidence > 1) {
		problems = append(problems, fmt.Sprintf("confidence must be between 0 and 1, not %g", v.Confidence))
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return Verdict{}, raw, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(problems, "; "))
	}
	v.Reason = strings.TrimSpace(v.Reason)
	return v, raw, nil
}

func snippet(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
