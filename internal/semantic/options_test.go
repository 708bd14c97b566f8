package semantic

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/modelspec"
)

// TestOptionsTableIsOllamas: modelspec.OllamaOptions, the table a watch's
// model options are checked against without linking Ollama, names every
// field of the Ollama API's api.Options (the runner options included)
// with the type of its value, and nothing else: an Ollama upgrade that
// adds, drops or retypes an option fails here until the table follows.
func TestOptionsTableIsOllamas(t *testing.T) {
	t.Parallel()
	want := map[string]modelspec.OptionType{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[api.Options]()) {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" || tag == "-" || f.Anonymous {
			continue
		}
		typ := f.Type
		if typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		switch {
		case typ.Kind() == reflect.Int:
			want[tag] = modelspec.OptionInteger
		case typ.Kind() == reflect.Float32:
			want[tag] = modelspec.OptionFloat
		case typ.Kind() == reflect.Bool:
			want[tag] = modelspec.OptionBoolean
		case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.String:
			want[tag] = modelspec.OptionStrings
		default:
			t.Errorf("api.Options.%s (%s, json %q) has a type modelspec.OptionType cannot name: add one", f.Name, f.Type, tag)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if got, ok := modelspec.OllamaOptions[name]; !ok {
			t.Errorf("modelspec.OllamaOptions lacks Ollama's option %q (%s)", name, want[name])
		} else if got != want[name] {
			t.Errorf("modelspec.OllamaOptions[%q] = %s, Ollama's api.Options says %s", name, got, want[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(modelspec.OllamaOptions)) {
		if _, ok := want[name]; !ok {
			t.Errorf("modelspec.OllamaOptions has %q, which is not an option of Ollama's api.Options", name)
		}
	}
}

// TestOptionsCheckAgreesWithOllama: for every option and a value of each
// JSON type, modelspec.NormalizeOptions accepts what Ollama's own check
// (api.Options.FromMap) accepts, and refuses what it refuses with its
// words.
func TestOptionsCheckAgreesWithOllama(t *testing.T) {
	t.Parallel()
	values := []any{float64(3), 0.5, true, "x", []any{"a", "b"}, []any{"a", 1}, map[string]any{"a": 1}}
	for _, name := range slices.Sorted(maps.Keys(modelspec.OllamaOptions)) {
		for _, v := range values {
			var typed api.Options
			ollamaErr := typed.FromMap(map[string]any{name: v})
			_, err := modelspec.NormalizeOptions(map[string]any{name: v})
			switch {
			case (err == nil) != (ollamaErr == nil):
				t.Errorf("option %q = %#v: modelspec says %v, Ollama says %v", name, v, err, ollamaErr)
			case err != nil && !strings.HasSuffix(err.Error(), ollamaErr.Error()):
				t.Errorf("option %q = %#v: modelspec says %q, want Ollama's %q", name, v, err, ollamaErr)
			}
		}
	}
	if _, err := modelspec.NormalizeOptions(map[string]any{"temprature": 0}); err == nil || !strings.HasPrefix(err.Error(), `model option "temprature" is not an Ollama option (known: `) {
		t.Errorf("a misspelt option: %v", err)
	}
}
