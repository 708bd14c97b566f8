package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/lookout-dev/lookout/internal/control"
)

// decodeArgs decodes a tool's arguments into in, strictly: an unknown
// field, a value of the wrong type or a missing required field is a
// control.FieldError located by a JSON pointer, with the words of the
// HTTP API's problems (internal/api), so that a model corrects an MCP
// call the way it corrects an HTTP request. The arguments are checked
// against in's Go type, the same type the tool's input schema is
// inferred from.
func decodeArgs(raw json.RawMessage, in any) *control.InvalidError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return &control.InvalidError{Errors: []control.FieldError{{Detail: "the arguments are not valid JSON: " + err.Error() + "; send one JSON object"}}}
	}
	var errs []control.FieldError
	check(reflect.TypeOf(in).Elem(), v, nil, &errs)
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Pointer < errs[j].Pointer })
		return &control.InvalidError{Errors: errs}
	}
	// Numbers in free-form values (a definition) stay as written: an
	// all-digit id or a 64-bit seed is not rounded through float64.
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(in); err != nil {
		return &control.InvalidError{Errors: []control.FieldError{{Detail: "the arguments do not decode: " + err.Error()}}}
	}
	return nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// check compares v (decoded with UseNumber) with t and appends what is wrong.
func check(t reflect.Type, v any, path []string, errs *[]control.FieldError) {
	if t == rawMessageType || t.Kind() == reflect.Interface {
		return
	}
	if t.Kind() == reflect.Pointer {
		if v == nil {
			return
		}
		t = t.Elem()
	}
	wrong := func(want string) {
		*errs = append(*errs, control.FieldError{Pointer: pointer(path),
			Detail: fmt.Sprintf("wrong type: %s, got %s", want, describe(v)), Value: v})
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			wrong("object")
			return
		}
		fields := structFields(t)
		for name, sub := range obj {
			f, known := fields[name]
			if !known {
				names := make([]string, 0, len(fields))
				for n := range fields {
					names = append(names, n)
				}
				sort.Strings(names)
				detail := fmt.Sprintf("unknown field %q", name)
				if len(names) > 0 {
					detail += "; the fields allowed here are " + strings.Join(names, ", ")
				}
				*errs = append(*errs, control.FieldError{Pointer: pointer(append(path, name)), Detail: detail + ": remove it or correct its name"})
				continue
			}
			check(f.typ, sub, append(path, name), errs)
		}
		for name, f := range fields {
			if _, ok := obj[name]; !ok && f.required {
				*errs = append(*errs, control.FieldError{Pointer: pointer(append(path, name)),
					Detail: fmt.Sprintf("field %q is required here and missing", name)})
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			wrong("object")
			return
		}
		for k, sub := range obj {
			check(t.Elem(), sub, append(path, k), errs)
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			wrong("array")
			return
		}
		for i, sub := range arr {
			check(t.Elem(), sub, append(path, strconv.Itoa(i)), errs)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			wrong("string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			wrong("boolean")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(json.Number)
		if !ok {
			wrong("integer")
			return
		}
		if _, err := n.Int64(); err != nil {
			wrong("integer")
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := v.(json.Number); !ok {
			wrong("number")
		}
	}
}

type fieldInfo struct {
	typ      reflect.Type
	required bool
}

// structFields lists t's JSON fields as encoding/json names them; a field
// without omitempty or omitzero is required (as jsonschema.For infers).
func structFields(t reflect.Type) map[string]fieldInfo {
	out := map[string]fieldInfo{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for n, fi := range structFields(et) {
					out[n] = fi
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		optional := strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		out[name] = fieldInfo{typ: f.Type, required: !optional}
	}
	return out
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// pointer encodes segments as an RFC 6901 JSON pointer.
func pointer(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// schemaFor infers the JSON schema of T (jsonschema-go, as the SDK does):
// a struct allows no other properties, a field without omitempty is
// required, the jsonschema tag is the description. Fields of the control
// layer's types describe themselves with the doc tag the HTTP API's
// OpenAPI document uses; it becomes their description too, so both
// transports say the same. json.RawMessage is any JSON value.
func schemaFor[T any]() *jsonschema.Schema {
	t := reflect.TypeFor[T]()
	s, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		rawMessageType: {},
	}})
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %s: %v", t, err))
	}
	describeFields(t, s, 0)
	return s
}

// describeFields copies doc tags into the descriptions of s's properties.
func describeFields(t reflect.Type, s *jsonschema.Schema, depth int) {
	if s == nil || depth > 8 {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		describeFields(t.Elem(), s.Items, depth+1)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			p := s.Properties[name]
			if p == nil {
				continue
			}
			if doc := f.Tag.Get("doc"); doc != "" && p.Description == "" {
				p.Description = doc
			}
			describeFields(f.Type, p, depth+1)
		}
	}
}
