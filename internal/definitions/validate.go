package definitions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/redact"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// Check is a binary's side of the configuration check, as `check` runs
// it: syncer.Build (connectors, mappings, schedules) or watchspec.Check
// (watch expressions, model options, templates).
type Check func(*config.Config) error

// Validator validates definitions the way `check` validates the
// configuration directory: config.ParseSource with the defaults and sinks
// of Global, then every Check on the result.
type Validator struct {
	// Global is the loaded lookout.yaml: defaults, sinks, evaluator lease.
	Global *config.Global
	// Checks build what the binaries run from a source; a definition they
	// refuse is invalid. Defaults to none (ParseSource only).
	Checks []Check
	// Keys open the sealed credentials of definitions made through the
	// API (and seal new ones, in the Store). Defaults to nil: a
	// definition with a sealed credential does not parse.
	Keys *secrets.Ring
}

// Problem is one thing wrong with a definition.
type Problem struct {
	// Pointer is the JSON pointer (RFC 6901) of the offending key in the
	// definition, e.g. /watches/0/when or /http/url; "" for the whole.
	Pointer string `json:"pointer"`
	// Message says what is wrong, e.g. "must be > 0".
	Message string `json:"message"`
}

// ValidationError lists what is wrong with a definition.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		if p.Pointer == "" {
			parts[i] = p.Message
		} else {
			parts[i] = p.Pointer + ": " + p.Message
		}
	}
	return "invalid definition: " + strings.Join(parts, "; ")
}

// Source validates one source definition, YAML or JSON in the shape of a
// source file (its watches included), and returns it parsed. Problems are
// a *ValidationError whose pointers locate them in data.
func (v *Validator) Source(data []byte) (*config.Source, error) {
	src, err := v.parse("definition", data, nil)
	if err != nil {
		return nil, toValidation(err)
	}
	return src, nil
}

// Sent is Source for a definition sent as JSON through the API or MCP:
// under the key path under ("" for the whole, "watches[0]" for a watch
// joined to its stored source) a number or a boolean where a string is
// expected is a problem (config.ParseSent).
func (v *Validator) Sent(data []byte, under string) (*config.Source, error) {
	src, err := v.parse("definition", data, &under)
	if err != nil {
		return nil, toValidation(err)
	}
	return src, nil
}

// parse is config.ParseSource (config.ParseSent under *sent) and the
// checks, with errors as they come.
func (v *Validator) parse(label string, data []byte, sent *string) (*config.Source, error) {
	g := v.Global
	if g == nil {
		g = &config.Global{}
	}
	plain, opened := data, []string(nil)
	var err error
	if g.Uses() != config.UsesWatches {
		// The evaluator's side uses no credential: sealed ones stay
		// sealed, and it needs no key ring to read a definition.
		plain, opened, err = v.open(data)
	}
	if err != nil {
		return nil, &config.Error{File: label, Msg: err.Error()}
	}
	if len(opened) > 0 {
		// Logs and stored errors of this process hide them from now on.
		g.Redactor().Add(opened...)
	}
	var src *config.Source
	if sent != nil {
		src, err = config.ParseSent(label, plain, g, *sent)
	} else {
		src, err = config.ParseSource(label, plain, g)
	}
	if err != nil {
		return nil, redactErr(err, opened)
	}
	if len(opened) > 0 {
		// What is kept as the definition stays sealed.
		if src.Definition, err = config.DefinitionJSON(data); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, check := range v.Checks {
		if err := check(&config.Config{Global: *g, Sources: []*config.Source{src}}); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, redactErr(errors.Join(errs...), opened)
	}
	return src, nil
}

// open opens the sealed credentials of a definition (JSON, as stored),
// naming the source by the definition's name.
func (v *Validator) open(data []byte) ([]byte, []string, error) {
	if !bytes.Contains(data, []byte(sealedPrefix)) {
		return data, nil, nil
	}
	var head struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, nil, fmt.Errorf("a definition with sealed credentials must be JSON: %w", err)
	}
	return OpenCredentials(v.Keys, head.Name, data)
}

// redactErr hides the opened credentials in err's text, keeping its
// located errors (config.Error) for the JSON pointers.
func redactErr(err error, opened []string) error {
	if len(opened) == 0 || err == nil {
		return err
	}
	r := redact.New(opened...)
	var out []error
	for _, leaf := range leaves(err) {
		var ce *config.Error
		if errors.As(leaf, &ce) {
			c := *ce
			c.Msg = r.String(c.Msg)
			out = append(out, &c)
			continue
		}
		out = append(out, r.Error(leaf))
	}
	return errors.Join(out...)
}

// parseRow parses a stored source with watches, naming it by its file or
// name in errors, and sets its hash to the stored definition's (so that
// only a change to the source's own keys counts as a configuration change
// to the syncer).
func (v *Validator) parseRow(s *Source, watches []Watch) (*config.Source, error) {
	defs := make([]json.RawMessage, len(watches))
	for i := range watches {
		defs[i] = watches[i].Definition
	}
	doc, err := document(s.Definition, defs...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Label(), err)
	}
	src, err := v.parse(s.Label(), doc, nil)
	if err != nil {
		return nil, err
	}
	src.Hash = s.Hash
	if f := FileOf(s.ManagedBy); f != "" {
		src.Path = f
		src.ForgetLines() // the lines of the stored JSON are not the file's
	}
	return src, nil
}

// toValidation turns the located errors of config and the checks into a
// *ValidationError with JSON pointers.
func toValidation(err error) *ValidationError {
	ve := &ValidationError{}
	for _, leaf := range leaves(err) {
		var ce *config.Error
		if errors.As(leaf, &ce) {
			ve.Problems = append(ve.Problems, Problem{Pointer: Pointer(ce.Key), Message: ce.Msg})
			continue
		}
		ve.Problems = append(ve.Problems, Problem{Message: leaf.Error()})
	}
	return ve
}

func leaves(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

var indexRE = regexp.MustCompile(`\[(\d+)\]`)

// pointerEscaper escapes a JSON pointer's reference token (RFC 6901);
// a Replacer is safe to share, and building one per key was most of what
// redacting a definition allocated.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// PointerToken escapes key as one reference token of a JSON pointer
// (RFC 6901): "~" as "~0", "/" as "~1".
func PointerToken(key string) string {
	if !strings.ContainsAny(key, "~/") {
		return key
	}
	return pointerEscaper.Replace(key)
}

// Pointer turns a config key path (watches[0].when, http.url) into a
// JSON pointer (/watches/0/when, /http/url).
func Pointer(key string) string {
	if key == "" {
		return ""
	}
	key = indexRE.ReplaceAllString(key, ".$1")
	parts := strings.Split(key, ".")
	for i, p := range parts {
		parts[i] = PointerToken(p)
	}
	return "/" + strings.Join(parts, "/")
}
