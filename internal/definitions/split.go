package definitions

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/lookout-dev/lookout/internal/config"
)

// Split divides a parsed source's definition into the source's keys and
// its watches, each canonical JSON with its hash, under managedBy and
// owner.
func Split(src *config.Source, owner, managedBy string) (Source, []Watch, error) {
	keys, watches, err := splitDefinition(src.Definition)
	if err != nil {
		return Source{}, nil, fmt.Errorf("%s: %w", src.Path, err)
	}
	out := Source{Name: src.Name, Owner: owner, ManagedBy: managedBy, Connector: src.Connector, Definition: keys, Hash: hash(keys)}
	ws := make([]Watch, 0, len(watches))
	for i, w := range watches {
		if i >= len(src.Watches) {
			break
		}
		ws = append(ws, Watch{Source: src.Name, Name: src.Watches[i].Name, Owner: owner, ManagedBy: managedBy, Definition: w, Hash: hash(w)})
	}
	return out, ws, nil
}

// splitDefinition returns the keys of a source definition without
// watches, and each watch, as canonical JSON. def is canonical
// (config.Source.Definition), so a watch is its bytes within def: not
// decoded and encoded again (the split of 100,000 watches is a part of a
// daemon's start, docs/benchmarks.md (13)).
func splitDefinition(def json.RawMessage) (json.RawMessage, []json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(def, &m); err != nil {
		return nil, nil, fmt.Errorf("definition is not a JSON object: %w", err)
	}
	var watches []json.RawMessage
	if raw, ok := m["watches"]; ok {
		if string(raw) != "null" {
			if err := json.Unmarshal(raw, &watches); err != nil {
				return nil, nil, fmt.Errorf("watches is not a list: %w", err)
			}
		}
		delete(m, "watches")
	}
	keys, err := canonical(m)
	if err != nil {
		return nil, nil, err
	}
	return keys, watches, nil
}

// document joins a source's keys and watches into one source definition.
func document(keys json.RawMessage, watches ...json.RawMessage) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(keys, &m); err != nil {
		return nil, fmt.Errorf("source definition is not a JSON object: %w", err)
	}
	if len(watches) > 0 {
		if m == nil {
			m = map[string]json.RawMessage{}
		}
		b, err := json.Marshal(watches)
		if err != nil {
			return nil, err
		}
		m["watches"] = b
	}
	return json.Marshal(m)
}

func canonical(v any) (json.RawMessage, error) {
	if m, ok := v.(map[string]json.RawMessage); ok {
		out := make(map[string]any, len(m))
		for k, raw := range m {
			var x any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&x); err != nil {
				return nil, fmt.Errorf("decode definition: %w", err)
			}
			out[k] = x
		}
		v = out
	}
	b, err := json.Marshal(v) // map keys are sorted
	if err != nil {
		return nil, fmt.Errorf("encode definition: %w", err)
	}
	return b, nil
}

// hash is the content hash of a canonical definition.
func hash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
