package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// Bounds of every YAML (or JSON) document lookout reads: lookout.yaml, a
// source file, a definition sent to the API or stored in the database.
const (
	// MaxDocumentBytes is the largest document: 1 MiB, far above any
	// real configuration file (the API's request bodies have the same
	// limit).
	MaxDocumentBytes = 1 << 20
	// MaxDocumentValues bounds the values (mappings, lists, scalars) of
	// a document once its aliases are expanded: 100,000. An alias is a
	// pointer in the parsed document, but every reader of the document
	// (the strict decoder, the stored JSON) expands it; nine levels of
	// lists of nine aliases ("billion laughs") would be 387,420,489 values.
	MaxDocumentValues = 100_000
)

// readDocument reads the file at path (named rel in errors), refusing one
// larger than MaxDocumentBytes without reading further.
func readDocument(path, rel string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxDocumentBytes {
		return nil, tooLarge(rel)
	}
	return data, nil
}

func tooLarge(file string) error {
	return &Error{File: file, Msg: fmt.Sprintf("is larger than %d bytes (1 MiB), the limit of a configuration document", MaxDocumentBytes)}
}

// parseYAML parses data into its root node, within the bounds above, and
// refuses a mapping that writes a key twice (yaml.v3 reports that only
// when decoding into Go maps and structs, not into nodes: `every: 1m`
// then `every: 2m` would silently keep the second).
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	if len(data) > MaxDocumentBytes {
		return nil, tooLarge(file)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: "file is empty"}
		}
		return nil, yamlError(file, err)
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: file, Msg: "file is empty"}
	}
	root := doc.Content[0]
	c := &docCheck{file: file, size: map[*yaml.Node]int{}, open: map[*yaml.Node]bool{}}
	c.walk(root, "")
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return root, nil
}

// docCheck walks a parsed document once, node by node without following
// aliases, counting what its aliases expand to (memoized per anchor, so
// the walk is linear in the document's size, not in its expansion).
type docCheck struct {
	file   string
	values int
	size   map[*yaml.Node]int  // expanded size of each node measured
	open   map[*yaml.Node]bool // nodes being measured (an alias to one is a cycle)
	errs   []error
	over   bool
}

func (c *docCheck) walk(n *yaml.Node, path string) {
	if c.over {
		return
	}
	switch n.Kind {
	case yaml.AliasNode:
		c.add(c.expanded(n.Alias, n, path), n, path)
		return
	case yaml.MappingNode:
		c.add(1, n, path)
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := joinPath(path, k.Value)
			if line, dup := first[k.Value]; dup && k.Kind == yaml.ScalarNode {
				c.errs = append(c.errs, &Error{File: c.file, Line: k.Line, Key: p,
					Msg: fmt.Sprintf("is written twice in one mapping (first at line %d): keep one", line)})
			} else {
				first[k.Value] = k.Line
			}
			c.walk(k, p)
			c.walk(n.Content[i+1], p)
		}
	case yaml.SequenceNode:
		c.add(1, n, path)
		for i, el := range n.Content {
			c.walk(el, fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		c.add(1, n, path)
	}
}

// add counts k more values, stopping the walk past the bound.
func (c *docCheck) add(k int, n *yaml.Node, path string) {
	c.values += k
	if c.values > MaxDocumentValues && !c.over {
		c.over = true
		msg := fmt.Sprintf("the document expands to more than %d values", MaxDocumentValues)
		if n.Kind == yaml.AliasNode {
			msg = fmt.Sprintf("alias *%s makes the document expand to more than %d values: write the values out, or use fewer aliases", n.Value, MaxDocumentValues)
		}
		c.errs = append(c.errs, &Error{File: c.file, Line: n.Line, Key: path, Msg: msg})
	}
}

// expanded is the number of values n stands for with its aliases
// expanded, capped just past the bound; an alias inside the node it
// names (a cycle) is an error at the alias.
func (c *docCheck) expanded(n, alias *yaml.Node, path string) int {
	if s, ok := c.size[n]; ok {
		return s
	}
	if c.open[n] {
		c.errs = append(c.errs, &Error{File: c.file, Line: alias.Line, Key: path, Msg: fmt.Sprintf("alias *%s refers to a value that contains it", alias.Value)})
		c.over = true
		return MaxDocumentValues + 1
	}
	c.open[n] = true
	s := 1
	for _, ch := range n.Content {
		if s > MaxDocumentValues {
			break
		}
		if ch.Kind == yaml.AliasNode {
			s += c.expanded(ch.Alias, ch, path)
		} else {
			s += c.expanded(ch, alias, path)
		}
	}
	delete(c.open, n)
	s = min(s, MaxDocumentValues+1)
	c.size[n] = s
	return s
}
