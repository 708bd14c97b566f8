package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// decoder decodes YAML nodes into configuration structs key by key, so
// that one value of the wrong type is reported at its own key and does not
// hide the others: every key that decodes is set, every one that does not
// is an *Error ("rate_limit.burst must be an integer, not a list") and is
// remembered in bad, so that validation does not report it a second time.
type decoder struct {
	file string
	errs []error
	bad  map[string]bool
	// typed selects the key paths whose values were sent as JSON (a
	// definition made through the API): there a number or a boolean is
	// not a string. nil for files, where `name: 2024` is YAML for a
	// string.
	typed func(path string) bool
}

func newDecoder(file string, typed func(string) bool) *decoder {
	return &decoder{file: file, bad: map[string]bool{}, typed: typed}
}

// decode decodes node into v, an addressable value, at key path path.
// Keys that v's type does not declare are skipped (checkKeys reports them).
func (d *decoder) decode(node *yaml.Node, v reflect.Value, path string) {
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	t := v.Type()
	null := node.Kind == yaml.ScalarNode && node.Tag == "!!null"
	switch {
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && t.Elem() != timeType:
		if null {
			return
		}
		if node.Kind != yaml.MappingNode {
			d.wrong(node, t, path)
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.decode(node, v.Elem(), path)
	case t.Kind() == reflect.Struct && t != timeType:
		if null {
			return
		}
		if node.Kind != yaml.MappingNode {
			d.wrong(node, t, path)
			return
		}
		fields := yamlFieldIndex(t)
		for i := 0; i+1 < len(node.Content); i += 2 {
			key, val := node.Content[i], node.Content[i+1]
			if f, ok := fields[key.Value]; ok {
				d.decode(val, v.Field(f), joinPath(path, key.Value))
			}
		}
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && node.Kind == yaml.MappingNode:
		if v.IsNil() {
			v.Set(reflect.MakeMapWithSize(t, len(node.Content)/2))
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			key, val := node.Content[i], node.Content[i+1]
			el := reflect.New(t.Elem()).Elem()
			p := joinPath(path, key.Value)
			d.decode(val, el, p)
			if !d.bad[p] {
				v.SetMapIndex(reflect.ValueOf(key.Value).Convert(t.Key()), el)
			}
		}
	case t.Kind() == reflect.Slice && node.Kind == yaml.SequenceNode:
		s := reflect.MakeSlice(t, len(node.Content), len(node.Content))
		for i, el := range node.Content {
			d.decode(el, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	default:
		if d.scalarMismatch(node, t, path) {
			return
		}
		p := reflect.New(t)
		if err := node.Decode(p.Interface()); err != nil {
			d.wrong(node, t, path)
			return
		}
		v.Set(p.Elem())
	}
}

// scalarMismatch reports (and records) a scalar that yaml.v3 would decode
// into t but that does not mean the same in the stored JSON: a number
// spelled the YAML way (0x1F, 1_000, 007, 1e3, .inf) in a number field,
// which the definition keeps as the string written (nodeValue); a JSON
// number or boolean in a string field of a definition sent as JSON.
func (d *decoder) scalarMismatch(node *yaml.Node, t reflect.Type, path string) bool {
	if node.Kind != yaml.ScalarNode {
		return false
	}
	tag := node.ShortTag()
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if t != durationType && (tag == "!!int" || tag == "!!float") && !PlainNumber(node.Value) {
			d.errs = append(d.errs, &Error{File: d.file, Line: node.Line, Key: path,
				Msg: fmt.Sprintf("must be %s written as a plain decimal number (e.g. 100 or 0.5), not %s", goTypeName(t.String()), node.Value)})
			d.bad[path] = true
			return true
		}
	case reflect.String:
		if d.typed != nil && d.typed(path) && tag != "!!str" && tag != "!!null" {
			d.wrong(node, t, path)
			return true
		}
	}
	return false
}

// wrong reports that the value at path is not of type t.
func (d *decoder) wrong(node *yaml.Node, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer && t != timeType {
		t = t.Elem()
	}
	want := goTypeName(t.String())
	if t.Kind() == reflect.Struct && t != timeType {
		want = "a mapping"
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: node.Line, Key: path, Msg: fmt.Sprintf("must be %s, not %s", want, yamlValue(node))})
	d.bad[path] = true
}

// yamlValue describes a YAML value for a message: "a list", "a mapping",
// "fast" (a string, quoted), 30 (a number or boolean as written).
func yamlValue(node *yaml.Node) string {
	switch node.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	switch node.Tag {
	case "!!str":
		return fmt.Sprintf("%q", node.Value)
	case "!!null":
		return "empty"
	}
	return node.Value
}

// yamlFieldIndex maps the yaml names of t's exported fields to their index
// (one map per type, shared: callers only read it).
func yamlFieldIndex(t reflect.Type) map[string]int {
	if m, ok := fieldIndexes.Load(t); ok {
		return m.(map[string]int)
	}
	m, _ := fieldIndexes.LoadOrStore(t, newYAMLFieldIndex(t))
	return m.(map[string]int)
}

// fieldIndexes caches yamlFieldIndex by type: a directory of 100,000
// watches decodes the same few structs a million times.
var fieldIndexes sync.Map

func newYAMLFieldIndex(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = i
	}
	return out
}

// isBad reports whether key is, or lies under, a key path that failed to
// decode (or to expand).
func isBad(bad map[string]bool, key string) bool {
	for p := key; p != ""; {
		if bad[p] {
			return true
		}
		i := lastSep(p)
		if i < 0 {
			return false
		}
		p = p[:i]
	}
	return false
}

// dropBad leaves out the *Error values of errs about keys that failed to
// decode: "name is required" after "name must be a string, not a list"
// says nothing new.
func dropBad(errs []error, bad map[string]bool) []error {
	if len(bad) == 0 {
		return errs
	}
	out := errs[:0:0]
	for _, err := range flatten(errs) {
		var ce *Error
		if errors.As(err, &ce) && ce.Key != "" && isBad(bad, ce.Key) {
			continue
		}
		out = append(out, err)
	}
	return out
}

// flatten unwraps joined errors into their parts.
func flatten(errs []error) []error {
	var out []error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			out = append(out, flatten(j.Unwrap())...)
			continue
		}
		out = append(out, err)
	}
	return out
}

// byLine sorts the problems of one file by line, keeping the order of
// those on one line.
func byLine(errs []error) []error {
	errs = flatten(errs)
	line := func(err error) int {
		var ce *Error
		if errors.As(err, &ce) {
			return ce.Line
		}
		return 0
	}
	slices.SortStableFunc(errs, func(a, b error) int { return line(a) - line(b) })
	return errs
}
