package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

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
	src, errs := parseSource(file, data, g, &secrets, nil)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return src, nil
}

// ParseSent is ParseSource for a definition sent as JSON (through the API
// or MCP): under the key path under ("" for the whole definition,
// "watches[0]" for one watch added to a stored source) JSON's types are
// kept, so a number or a boolean where a string is expected is an error
// (`"name": 123` must be `"name": "123"`), while a YAML file may write
// `name: 2024` for the string.
func ParseSent(file string, data []byte, g *Global, under string) (*Source, error) {
	var secrets []string
	typed := func(path string) bool {
		return under == "" || path == under || strings.HasPrefix(path, under+".") || strings.HasPrefix(path, under+"[")
	}
	src, errs := parseSource(file, data, g, &secrets, typed)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return src, nil
}

// parseSource is ParseSource, appending the expanded ${ENV} values to
// secrets and returning the problems apart, in line order; typed selects
// the key paths sent as JSON (see ParseSent), nil for none.
func parseSource(file string, data []byte, g *Global, secrets *[]string, typed func(string) bool) (*Source, []error) {
	root, err := parseYAML(file, data)
	if err != nil {
		return nil, []error{err}
	}
	src := &Source{Path: file, typed: typed}
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
	case "!!int", "!!float":
		// The number as written, never through int64 or float64: an
		// all-digit id of 32 digits (a Notion database) is a YAML float,
		// and 1.2345678901234568e+31 is not the id. PostgreSQL's jsonb
		// keeps a plain decimal exactly. Other spellings (0x1F, 0o17,
		// 1_000, 0123, +1, .5, 1e3, .inf) are kept as the string written:
		// what a string field reads; a number field refuses them
		// (decoder.number), in the file and in the stored JSON alike.
		if PlainNumber(n.Value) {
			return json.Number(n.Value), nil
		}
	}
	return n.Value, nil
}

var plainNumberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)

// PlainNumber reports whether s is a number written the plain decimal
// way, which JSON, YAML and PostgreSQL's numeric read alike and keep as
// written: 42, -7, 0.25, 12345678901234567890123456789012 (not 1e3,
// 0x1F, 007, 1_000, +1, .5, -0).
func PlainNumber(s string) bool {
	return plainNumberRE.MatchString(s) && !(strings.HasPrefix(s, "-") && strings.Trim(s, "-0.") == "")
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
