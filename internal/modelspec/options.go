package modelspec

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// OptionType is the type of an Ollama model option's value, as the
// server's api.Options declares it.
type OptionType string

// The types of OllamaOptions' values, named as Ollama's errors name them.
const (
	OptionInteger OptionType = "integer"
	OptionFloat   OptionType = "float32"
	OptionBoolean OptionType = "boolean"
	OptionStrings OptionType = "array of strings"
)

// OllamaOptions are the model options Ollama knows, by the JSON name of
// their field in the Ollama API's api.Options (the runner options
// included), with the type of their value: the one table of them, which
// NormalizeOptions checks a watch's and a digest's options against
// without linking the Ollama module. semantic's tests compare it with
// api.Options by reflection, so an Ollama upgrade that adds, removes or
// retypes an option fails a test until the table follows.
var OllamaOptions = map[string]OptionType{
	// api.Runner
	"num_ctx":    OptionInteger,
	"num_batch":  OptionInteger,
	"num_gpu":    OptionInteger,
	"main_gpu":   OptionInteger,
	"low_vram":   OptionBoolean,
	"f16_kv":     OptionBoolean,
	"logits_all": OptionBoolean,
	"vocab_only": OptionBoolean,
	"use_mmap":   OptionBoolean,
	"use_mlock":  OptionBoolean,
	"num_thread": OptionInteger,
	// api.Options
	"num_keep":          OptionInteger,
	"seed":              OptionInteger,
	"num_predict":       OptionInteger,
	"top_k":             OptionInteger,
	"top_p":             OptionFloat,
	"min_p":             OptionFloat,
	"typical_p":         OptionFloat,
	"repeat_last_n":     OptionInteger,
	"temperature":       OptionFloat,
	"repeat_penalty":    OptionFloat,
	"presence_penalty":  OptionFloat,
	"frequency_penalty": OptionFloat,
	"mirostat":          OptionInteger,
	"mirostat_tau":      OptionFloat,
	"mirostat_eta":      OptionFloat,
	"stop":              OptionStrings,
}

// NormalizeOptions round-trips opts through JSON (so YAML ints become the
// float64 the wire carries) and checks their names and the types of their
// values against OllamaOptions, in the order of their names. The error
// names the first bad option, in the words of Ollama's own check
// (api.Options.FromMap) for a value of the wrong type.
func NormalizeOptions(opts map[string]any) (map[string]any, error) {
	b, err := json.Marshal(opts)
	if err != nil {
		return nil, fmt.Errorf("model options: %w", err)
	}
	var norm map[string]any
	if err := json.Unmarshal(b, &norm); err != nil {
		return nil, fmt.Errorf("model options: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(norm)) {
		typ, ok := OllamaOptions[k]
		if !ok {
			known := slices.Sorted(maps.Keys(OllamaOptions))
			return nil, fmt.Errorf("model option %q is not an Ollama option (known: %s)", k, strings.Join(known, ", "))
		}
		if err := typ.check(norm[k]); err != nil {
			return nil, fmt.Errorf("model options: option %q %w", k, err)
		}
	}
	return norm, nil
}

// check reports whether v, decoded from JSON, is a value of type t; nil
// is (Ollama leaves the option unset).
func (t OptionType) check(v any) error {
	if v == nil {
		return nil
	}
	ok := false
	switch t {
	case OptionInteger, OptionFloat:
		_, ok = v.(float64)
	case OptionBoolean:
		_, ok = v.(bool)
	case OptionStrings:
		var list []any
		if list, ok = v.([]any); !ok {
			return fmt.Errorf("must be of type array")
		}
		for _, e := range list {
			if _, ok := e.(string); !ok {
				return fmt.Errorf("must be of an array of strings")
			}
		}
	}
	if !ok {
		return fmt.Errorf("must be of type %s", t)
	}
	return nil
}
