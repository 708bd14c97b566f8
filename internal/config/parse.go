package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"go.yaml.in/yaml/v3"
)

// ParseSource decodes and validates one source definition the way Load
// does a file of sources/: strict keys, ${ENV} references, the defaults of
// g, the connector's block checked by the linked registry. data is YAML or
// JSON (a JSON document is YAML); file names the definition in errors
// (sources/acme.yaml, or the API's name for it). Every problem is an
// *Error, joined. It is the one validation of a source for files, the
// daemons reading definitions from the database, and the API.
func ParseSource(file string, data []byte, g *Global) (*Source, error) {
	var secrets []string
	src, errs := parseSource(file, data, g, &secrets)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return src, nil
}

// parseSource is ParseSource, appending the expanded ${ENV} values to
// secrets and returning the problems apart, in line order.
func parseSource(file string, data []byte, g *Global, secrets *[]string) (*Source, []error) {
	root, err := parseYAML(file, data)
	if err != nil {
		return nil, []error{err}
	}
	src := &Source{Path: file}
	// The definition is kept as written, before ${ENV} expansion: a
	// secret is never stored in clear.
	if src.Definition, err = nodeJSON(root); err != nil {
		return nil, []error{&Error{File: file, Msg: err.Error()}}
	}
	var uses Uses
	if g != nil {
		uses = g.uses
	}
	lines, bad, ferrs := src.decode(file, root, secrets, uses)
	src.lines = lines
	sum := sha256.Sum256(data)
	src.Hash = hex.EncodeToString(sum[:8])
	// Validated even after decoding errors: every problem is listed.
	ferrs = append(ferrs, dropBad(src.validate(g), bad)...)
	if len(ferrs) > 0 {
		return nil, byLine(ferrs)
	}
	return src, nil
}

// nodeJSON returns the JSON of a YAML node: mappings become objects,
// sequences arrays, and scalars keep their YAML type (strings, numbers,
// booleans, null); timestamps and other tagged scalars stay strings as
// written.
func nodeJSON(n *yaml.Node) (json.RawMessage, error) {
	v, err := nodeValue(n)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode as JSON: %w", err)
	}
	return b, nil
}

func nodeValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return nodeValue(n.Content[0])
	case yaml.AliasNode:
		return nodeValue(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := nodeValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, nil
		}
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return i, nil
		}
	case "!!float":
		var f float64
		if err := n.Decode(&f); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f, nil
		}
	}
	return n.Value, nil
}

// DefinitionJSON reads one YAML or JSON document as JSON, expanding
// nothing: what ParseSource keeps in Source.Definition for a whole source.
func DefinitionJSON(data []byte) (json.RawMessage, error) {
	root, err := parseYAML("definition", data)
	if err != nil {
		return nil, err
	}
	return nodeJSON(root)
}
