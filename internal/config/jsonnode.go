package config

import (
	"bytes"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// jsonNode parses a definition sent as a JSON object into the node tree
// yaml.v3 gives for it (the same kinds, tags, styles, values, lines and
// columns), in a fraction of yaml.v3's time: the API's creates validate
// every definition they store (docs/benchmarks.md (7)). It handles only
// the plain case (printable ASCII, spaces and newlines between tokens,
// \u escapes of printable ASCII only, no numbers, keys on the line of
// their colon) and answers ok false for anything else, which parseYAML then
// parses with yaml.v3: nothing it accepts reads differently from YAML.
func jsonNode(data []byte) (root *yaml.Node, ok bool) {
	for _, c := range data {
		if (c < 0x20 && c != '\n') || c > 0x7e {
			return nil, false
		}
	}
	p := &jsonParser{data: data, line: 1}
	p.space()
	if p.i >= len(p.data) || p.data[p.i] != '{' {
		return nil, false
	}
	root, ok = p.value(0)
	if !ok {
		return nil, false
	}
	p.space()
	if p.i != len(p.data) {
		return nil, false
	}
	return root, true
}

// jsonParser reads JSON from data at i, tracking yaml.v3's marks (1-based
// line and column; one byte is one column in ASCII).
type jsonParser struct {
	data      []byte
	i         int
	line      int
	lineStart int
}

// maxJSONDepth bounds the nesting jsonNode follows (deeper: yaml.v3).
const maxJSONDepth = 64

func (p *jsonParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ':
		case '\n':
			p.line++
			p.lineStart = p.i + 1
		default:
			return
		}
		p.i++
	}
}

func (p *jsonParser) node(kind yaml.Kind, style yaml.Style, tag, value string) *yaml.Node {
	return &yaml.Node{Kind: kind, Style: style, Tag: tag, Value: value, Line: p.line, Column: p.i - p.lineStart + 1}
}

func (p *jsonParser) value(depth int) (*yaml.Node, bool) {
	if depth > maxJSONDepth || p.i >= len(p.data) {
		return nil, false
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.mapping(depth)
	case c == '[':
		return p.sequence(depth)
	case c == '"':
		return p.str()
	}
	for _, w := range [...]struct{ word, tag string }{{"true", "!!bool"}, {"false", "!!bool"}, {"null", "!!null"}} {
		if bytes.HasPrefix(p.data[p.i:], []byte(w.word)) {
			n := p.node(yaml.ScalarNode, 0, w.tag, w.word)
			p.i += len(w.word)
			if p.i < len(p.data) && bytes.IndexByte([]byte(" \n,]}"), p.data[p.i]) < 0 {
				return nil, false
			}
			return n, true
		}
	}
	// A number (its YAML tag depends on its form) or not JSON.
	return nil, false
}

func (p *jsonParser) mapping(depth int) (*yaml.Node, bool) {
	n := p.node(yaml.MappingNode, yaml.FlowStyle, "!!map", "")
	p.i++
	p.space()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return n, true
	}
	for {
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			return nil, false
		}
		keyLine, keyStart := p.line, p.i
		k, ok := p.str()
		// A YAML implicit key ends on its line and within 1024
		// characters of its colon.
		if !ok || p.i-keyStart > 1000 {
			return nil, false
		}
		p.space()
		if p.line != keyLine || p.i >= len(p.data) || p.data[p.i] != ':' {
			return nil, false
		}
		p.i++
		p.space()
		v, ok := p.value(depth + 1)
		if !ok {
			return nil, false
		}
		n.Content = append(n.Content, k, v)
		p.space()
		if p.i >= len(p.data) {
			return nil, false
		}
		switch p.data[p.i] {
		case ',':
			p.i++
			p.space()
		case '}':
			p.i++
			return n, true
		default:
			return nil, false
		}
	}
}

func (p *jsonParser) sequence(depth int) (*yaml.Node, bool) {
	n := p.node(yaml.SequenceNode, yaml.FlowStyle, "!!seq", "")
	p.i++
	p.space()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return n, true
	}
	for {
		v, ok := p.value(depth + 1)
		if !ok {
			return nil, false
		}
		n.Content = append(n.Content, v)
		p.space()
		if p.i >= len(p.data) {
			return nil, false
		}
		switch p.data[p.i] {
		case ',':
			p.i++
			p.space()
		case ']':
			p.i++
			return n, true
		default:
			return nil, false
		}
	}
}

// str reads a double-quoted string at i.
func (p *jsonParser) str() (*yaml.Node, bool) {
	n := p.node(yaml.ScalarNode, yaml.DoubleQuotedStyle, "!!str", "")
	start := p.i + 1
	var b *strings.Builder
	for j := start; j < len(p.data); j++ {
		switch c := p.data[j]; c {
		case '"':
			if b == nil {
				n.Value = string(p.data[start:j])
			} else {
				n.Value = b.String()
			}
			p.i = j + 1
			return n, true
		case '\n':
			return nil, false
		case '\\':
			if b == nil {
				b = &strings.Builder{}
				b.Write(p.data[start:j])
			}
			j++
			if j >= len(p.data) {
				return nil, false
			}
			if p.data[j] == 'u' {
				// \u of printable ASCII only (json.Marshal writes &, <
				// and > so); yaml.v3 reads it the same.
				if j+4 >= len(p.data) {
					return nil, false
				}
				r, err := strconv.ParseUint(string(p.data[j+1:j+5]), 16, 16)
				if err != nil || r < 0x20 || r > 0x7e {
					return nil, false
				}
				b.WriteByte(byte(r))
				j += 4
				continue
			}
			e, ok := jsonEscapes[p.data[j]]
			if !ok {
				return nil, false
			}
			b.WriteByte(e)
		default:
			if b != nil {
				b.WriteByte(c)
			}
		}
	}
	return nil, false
}

// jsonEscapes are the escapes JSON and yaml.v3's double-quoted style
// share (yaml.v3 refuses JSON's \/), but \u.
var jsonEscapes = map[byte]byte{'"': '"', '\\': '\\', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}
