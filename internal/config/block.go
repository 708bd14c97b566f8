package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// ConnectorRegistry is the connector registry as config sees it. Each
// connector owns the schema of its block; config only keeps the block raw
// (Source.Block) and asks the registry to check it.
//
// The connectors package installs its registry with UseConnectors when it
// is linked, so Load checks connector names and blocks in every binary that
// runs connectors (the syncer and its config check). A binary without
// connectors (the evaluator) loads the same directory with the blocks kept
// raw and unchecked: it never reads them.
type ConnectorRegistry interface {
	// Names lists the registered connector types, sorted.
	Names() []string
	// Check decodes the block of src (a registered type) strictly, applies
	// its defaults and validates it. Problems are *Error values naming the
	// file, the line and the key, joined.
	Check(src *Source) error
}

// HostLimiter is implemented by a ConnectorRegistry whose connectors
// declare the documented request budget of the hosts they call
// (Global.HostLimit consults it after hosts: and before
// defaults.host_rate_limit).
type HostLimiter interface {
	HostLimit(host string) (RateLimit, bool)
}

var connectorRegistry ConnectorRegistry

// UseConnectors installs the connector registry Load consults. The
// connectors package calls it from init; it panics on nil or when called
// twice.
func UseConnectors(r ConnectorRegistry) {
	if r == nil {
		panic("config: UseConnectors with a nil registry")
	}
	if connectorRegistry != nil {
		panic("config: UseConnectors called twice")
	}
	connectorRegistry = r
}

// connectorNames lists the registered connector types, or nil when no
// registry is linked.
func connectorNames() []string {
	if connectorRegistry == nil {
		return nil
	}
	return connectorRegistry.Names()
}

// DecodeBlock decodes the source's connector block into v, a pointer to
// the connector's settings struct, as strictly as the rest of the file: an
// unknown key or a value of the wrong type is an *Error naming the file,
// the line and the key path (http.url); ${ENV} references were expanded at
// load. A source without a block leaves v as it is.
func (s *Source) DecodeBlock(v any) error {
	if s.released {
		return s.Errorf(s.Connector, "block was released after the connector was built (Release): parse the source again to build another")
	}
	if s.Block == nil {
		return nil
	}
	var errs []error
	checkKeys(s.Path, s.Block, reflect.TypeOf(v).Elem(), s.Connector, map[string]int{}, &errs)
	d := newDecoder(s.Path, s.typed)
	d.decode(s.Block, reflect.ValueOf(v).Elem(), s.Connector)
	return errors.Join(byLine(append(errs, d.errs...))...)
}

// Release drops what only building the source's connector needs, the
// connector block (parsed YAML, with its positions) and the definition's
// JSON, once a daemon built the connector and runs it: 100,000 sources
// then hold no parsed YAML. A released source's DecodeBlock is an error,
// so that nothing decodes an empty block in its place. The key lines
// go too when they are not the file's (ForgetLines: Line is 0 either
// way).
func (s *Source) Release() {
	s.Block, s.Definition, s.released = nil, nil, true
	if s.noLines {
		s.lines = nil
	}
}

// splitBlocks takes the connector blocks out of the root mapping of a
// source file: the block of the source's own connector becomes s.Block,
// the blocks of other registered connectors are noted in s.others (an
// error at validation), and the remaining keys are returned for strict
// decoding, with the block names a source may use besides its fields (for
// the message about an unknown key). Lines of every key inside the blocks
// are recorded, so that connectors locate their errors with s.Line.
func (s *Source) splitBlocks(root *yaml.Node, lines map[string]int) (rest []*yaml.Node, known []string) {
	if root.Kind != yaml.MappingNode {
		return root.Content, nil
	}
	var connector string
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k, v := root.Content[i], root.Content[i+1]; k.Value == "connector" && v.Kind == yaml.ScalarNode {
			connector = v.Value
		}
	}
	fields := yamlFields(reflect.TypeOf(Source{}))
	names := connectorNames()
	known = names
	if connectorRegistry == nil && connector != "" {
		known = []string{connector}
	}
	rest = make([]*yaml.Node, 0, len(root.Content))
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		_, isField := fields[k.Value]
		own := k.Value == connector && connector != ""
		if isField || !(own || slices.Contains(names, k.Value)) {
			rest = append(rest, k, v)
			continue
		}
		lines[k.Value] = k.Line
		recordLines(v, k.Value, lines)
		switch {
		case own && v.Tag == "!!null":
			// "http:" with nothing under it is no block.
		case own:
			s.Block = v
		default:
			s.others = append(s.others, k.Value)
		}
	}
	slices.Sort(s.others)
	return rest, known
}

// recordLines records the line of every key path under node.
func recordLines(node *yaml.Node, path string, lines map[string]int) {
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	switch node.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			p := joinPath(path, node.Content[i].Value)
			lines[p] = node.Content[i].Line
			recordLines(node.Content[i+1], p, lines)
		}
	case yaml.SequenceNode:
		for i, el := range node.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = el.Line
			recordLines(el, p, lines)
		}
	}
}
