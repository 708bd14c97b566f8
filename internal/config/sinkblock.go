package config

import (
	"cmp"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// SinkRegistry is the sink registry as config sees it. Each sink type owns
// the schema of its keys; config keeps them raw (see Sink) and asks the
// registry to check them.
//
// The notify package installs its registry with UseSinks when it is
// linked, so Load checks sink types and their keys in every binary that
// delivers or validates notifications (the evaluator, the api). A binary
// without notify (the syncer) loads the same lookout.yaml with the keys of
// sink types kept raw and unchecked: it never reads them.
type SinkRegistry interface {
	// Names lists the registered sink types, sorted.
	Names() []string
	// Keys lists the keys of a registered sink type (those its settings
	// declare), for the message about a key another type reads.
	Keys(kind string) []string
	// Check decodes the keys of s (a registered type) strictly, applies
	// their defaults and validates them. Problems are *Error values
	// naming the file, the line and the key, joined.
	Check(s *Sink) error
}

var sinkRegistry SinkRegistry

var sinkType = reflect.TypeOf(Sink{})

// UseSinks installs the sink registry Load consults. The notify package
// calls it from init; it panics on nil or when called twice.
func UseSinks(r SinkRegistry) {
	if r == nil {
		panic("config: UseSinks with a nil registry")
	}
	if sinkRegistry != nil {
		panic("config: UseSinks called twice")
	}
	sinkRegistry = r
}

// sinkKinds lists the registered sink types, or nil when no registry is
// linked.
func sinkKinds() []string {
	if sinkRegistry == nil {
		return nil
	}
	return sinkRegistry.Names()
}

// splitSinkBlocks keeps, for every sink of lookout.yaml's root mapping,
// the keys that are not Sink's fields as the sink's block.
func (g *Global) splitSinkBlocks(root *yaml.Node) {
	sinks := mappingValue(root, "sinks")
	if sinks == nil || sinks.Kind != yaml.MappingNode {
		return
	}
	fields := yamlFields(sinkType)
	for i := 0; i+1 < len(sinks.Content); i += 2 {
		name, node := sinks.Content[i].Value, sinks.Content[i+1]
		if node.Kind == yaml.AliasNode {
			node = node.Alias
		}
		s := g.Sinks[name]
		if s == nil || node.Kind != yaml.MappingNode {
			continue
		}
		var block *yaml.Node
		for j := 0; j+1 < len(node.Content); j += 2 {
			if _, ok := fields[node.Content[j].Value]; ok {
				continue
			}
			if block == nil {
				block = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: node.Line, Column: node.Column}
			}
			block.Content = append(block.Content, node.Content[j], node.Content[j+1])
		}
		s.block = block
	}
}

// mappingValue returns the value of key in mapping node n, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			v := n.Content[i+1]
			if v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			return v
		}
	}
	return nil
}

// DecodeBlock decodes the keys of the sink's type into v, a pointer to
// the type's settings struct, as strictly as the rest of lookout.yaml: a
// key that only another registered type reads is an *Error saying so
// ("sinks.script.secret is not used by a command sink (only by
// webhook)"), any other unknown key or a value of the wrong type is an
// *Error naming the file, the line and the key path (sinks.hook.url);
// ${ENV} references were expanded at load. A sink without such keys
// leaves v as it is.
func (s *Sink) DecodeBlock(v any) error {
	if s.block == nil {
		return nil
	}
	g := s.global
	if g == nil {
		g = &Global{}
	}
	t := reflect.TypeOf(v).Elem()
	own := yamlFields(t)
	path := "sinks." + s.name
	var errs []error
	keep := *s.block
	keep.Content = nil
	for i := 0; i+1 < len(s.block.Content); i += 2 {
		k := s.block.Content[i]
		if _, ok := own[k.Value]; !ok {
			if kinds := s.kindsReading(k.Value); len(kinds) > 0 {
				errs = append(errs, s.Errorf(k.Value, "is not used by a %s sink (only by %s)", s.Type, strings.Join(kinds, ", ")))
				continue
			}
		}
		keep.Content = append(keep.Content, k, s.block.Content[i+1])
	}
	file := cmp.Or(g.file, GlobalFile)
	checkKeys(file, &keep, t, path, map[string]int{}, &errs, slices.Collect(maps.Keys(yamlFields(sinkType)))...)
	d := newDecoder(file, nil)
	d.decode(&keep, reflect.ValueOf(v).Elem(), path)
	return errors.Join(byLine(append(errs, d.errs...))...)
}

// kindsReading lists the registered sink types other than s's that
// declare key, sorted.
func (s *Sink) kindsReading(key string) []string {
	var out []string
	for _, k := range sinkKinds() {
		if k != s.Type && slices.Contains(sinkRegistry.Keys(k), key) {
			out = append(out, k)
		}
	}
	return out
}

// BlockKeys lists the keys of a settings struct (the yaml names of its
// exported fields), sorted: what a registry's Keys returns.
func BlockKeys(settings reflect.Type) []string {
	for settings.Kind() == reflect.Pointer {
		settings = settings.Elem()
	}
	keys := slices.Collect(maps.Keys(yamlFields(settings)))
	slices.Sort(keys)
	return keys
}
