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
	return out, splitWatches(src, watches, owner, managedBy), nil
}

// splitDefinition returns the keys of a source definition without
// watches, and each watch, as canonical JSON. def is canonical
// (config.Source.Definition), so a watch is its bytes within def: not
// decoded and encoded again (the split of 100,000 watches is a part of a
// daemon's start, docs/benchmarks.md (13)).
func splitDefinition(def json.RawMessage) (json.RawMessage, []json.RawMessage, error) {
	m, watches, err := definitionWatches(def)
	if err != nil {
		return nil, nil, err
	}
	keys, err := canonical(m)
	if err != nil {
		return nil, nil, err
	}
	return keys, watches, nil
}

// definitionWatches returns the keys of a source definition other than
// watches, still encoded, and each watch, canonical as in def.
func definitionWatches(def json.RawMessage) (map[string]json.RawMessage, []json.RawMessage, error) {
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
	return m, watches, nil
}

// parsedWatches is Split's watches alone: the source's keys are neither
// made canonical nor hashed (a watch validated against its source).
func parsedWatches(src *config.Source, owner, managedBy string) ([]Watch, error) {
	_, watches, err := definitionWatches(src.Definition)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Path, err)
	}
	return splitWatches(src, watches, owner, managedBy), nil
}

func splitWatches(src *config.Source, watches []json.RawMessage, owner, managedBy string) []Watch {
	ws := make([]Watch, 0, len(watches))
	for i, w := range watches {
		if i >= len(src.Watches) {
			break
		}
		ws = append(ws, Watch{Source: src.Name, Name: src.Watches[i].Name, Owner: owner, ManagedBy: managedBy, Definition: w, Hash: hash(w)})
	}
	return ws
}

// document joins a source's keys and watches into one source definition,
// on one line (as the API's JSON is): the keys' object with a "watches"
// list of the watches appended, each compacted, not decoded and encoded
// again (the validation parses the document anyway, so the order of its
// keys does not matter; config.Source.Definition is canonical). Keys
// that name watches themselves (not a stored source's: Split takes them
// out) are replaced, as a decoded map would.
func document(keys json.RawMessage, watches ...json.RawMessage) ([]byte, error) {
	t := bytes.TrimSpace(keys)
	if len(t) < 2 || t[0] != '{' || t[len(t)-1] != '}' || bytes.Contains(t, []byte(`"watches"`)) {
		return documentDecoded(keys, watches...)
	}
	var b bytes.Buffer
	b.Grow(len(t) + 16 + 2*len(watches) + size(watches))
	if err := json.Compact(&b, t); err != nil {
		return nil, fmt.Errorf("source definition is not a JSON object: %w", err)
	}
	if len(watches) == 0 {
		return b.Bytes(), nil
	}
	b.Truncate(b.Len() - 1) // the closing brace
	if b.Len() > 1 {
		b.WriteByte(',')
	}
	b.WriteString(`"watches":[`)
	for i, w := range watches {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := json.Compact(&b, w); err != nil {
			return nil, fmt.Errorf("watch %d is not JSON: %w", i, err)
		}
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

func size(ws []json.RawMessage) int {
	n := 0
	for _, w := range ws {
		n += len(w)
	}
	return n
}

// documentDecoded is document through a decoded map.
func documentDecoded(keys json.RawMessage, watches ...json.RawMessage) ([]byte, error) {
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
