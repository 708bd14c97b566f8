// Package file is the file connector: a glob of JSON and JSONL files, each
// item an object with an id. Every run reads the complete set, so records
// whose item disappeared (a deleted file or line) are recorded as deleted.
//
//	connector: file
//	file:
//	  paths: [inbox/*.jsonl, tasks.json]
//	  items: doc.tasks        # optional: where the list is inside a .json file
package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/normalize"
)

func init() {
	connectors.Register("file", Decode, newFromSettings)
}

// Settings is the file: block of a source.
type Settings struct {
	// Paths are glob patterns, relative to the config directory unless
	// absolute. Required.
	Paths []string `yaml:"paths"`
	// Items is an expression over `doc` selecting the item list of a JSON
	// file. Defaults to the document itself when it is an array, else [doc].
	Items string `yaml:"items"`
}

// Decode reads and validates the file: block of src.
func Decode(src *config.Source) (*Settings, error) {
	var s Settings
	if err := src.DecodeBlock(&s); err != nil {
		return nil, err
	}
	var errs []error
	if len(s.Paths) == 0 {
		errs = append(errs, src.Errorf("file.paths", "is required (a list of glob patterns)"))
	}
	for i, p := range s.Paths {
		if strings.TrimSpace(p) == "" {
			errs = append(errs, src.Errorf(fmt.Sprintf("file.paths[%d]", i), "is empty"))
		}
	}
	return &s, errors.Join(errs...)
}

// Connector reads items from local files.
type Connector struct {
	dir   string
	paths []string
	items *normalize.Program
}

var _ connectors.Connector = (*Connector)(nil)

func newFromSettings(src *config.Source, c *Settings, env connectors.Env) (connectors.Connector, error) {
	for i, p := range c.Paths {
		if _, err := filepath.Match(p, ""); err != nil {
			return nil, src.Errorf(fmt.Sprintf("file.paths[%d]", i), "%q is not a valid glob: %v", p, err)
		}
	}
	var items *normalize.Program
	if c.Items != "" {
		p, err := normalize.Compile(c.Items, "doc")
		if err != nil {
			return nil, src.Errorf("file.items", "%v", err)
		}
		items = p
	}
	return New(env.Dir, c.Paths, items), nil
}

// New returns a connector reading paths (globs, relative to dir unless
// absolute). items, when not nil, selects the item list of a .json file from
// its document `doc`.
func New(dir string, paths []string, items *normalize.Program) *Connector {
	return &Connector{dir: dir, paths: paths, items: items}
}

// Snapshot reports true: every run reads the complete set of files.
func (c *Connector) Snapshot() bool { return true }

// Fetch reads every matching file. All files are parsed before the first
// page is emitted, so a malformed file fails the run before anything is
// written.
func (c *Connector) Fetch(ctx context.Context, _ json.RawMessage, emit connectors.EmitFunc) (connectors.Result, error) {
	var files []string
	for _, p := range c.paths {
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.dir, p)
		}
		m, err := filepath.Glob(p)
		if err != nil {
			return connectors.Result{}, fmt.Errorf("glob %s: %w", p, err)
		}
		if len(m) == 0 && !hasMeta(p) {
			// A named file that is missing is far more often a file being
			// rewritten or a missing mount than a deliberate deletion:
			// refuse rather than tombstone every record it held.
			return connectors.Result{}, fmt.Errorf("no file matches %s (relative to %s); nothing was changed", c.display(p), c.dir)
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	files = slices.Compact(files)
	if len(files) == 0 {
		// Likewise when no pattern matches anything at all.
		return connectors.Result{}, fmt.Errorf("no file matches %s (relative to %s); nothing was changed", strings.Join(c.paths, ", "), c.dir)
	}
	pages := make([]connectors.Page, 0, len(files))
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return connectors.Result{}, err
		}
		items, err := c.read(f)
		if err != nil {
			return connectors.Result{}, err
		}
		pages = append(pages, connectors.Page{Items: items})
	}
	for _, p := range pages {
		if err := emit(ctx, p); err != nil {
			return connectors.Result{}, err
		}
	}
	return connectors.Result{Complete: true}, nil
}

func (c *Connector) read(path string) ([]connectors.Item, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	name := c.display(path)
	if strings.HasSuffix(path, ".jsonl") || strings.HasSuffix(path, ".ndjson") {
		return readLines(name, data)
	}
	doc, err := normalize.Decode(data)
	if err != nil {
		return nil, &connectors.ItemError{Loc: fmt.Sprintf("%s:%d", name, lineOf(data, err)), Err: fmt.Errorf("malformed JSON: %w", err)}
	}
	var list any = doc
	if c.items != nil {
		list, err = c.items.Run(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: items expression: %w", name, err)
		}
	}
	var out []connectors.Item
	switch l := list.(type) {
	case []any:
		for i, v := range l {
			out = append(out, connectors.Item{Value: v, Loc: fmt.Sprintf("%s [%d]", name, i)})
		}
	case map[string]any:
		out = append(out, connectors.Item{Value: l, Loc: name})
	case nil:
	default:
		return nil, fmt.Errorf("%s: want an object or a list of objects, got %T", name, list)
	}
	return out, nil
}

// hasMeta reports whether a path is a pattern rather than a file name.
func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\\`) }

func readLines(name string, data []byte) ([]connectors.Item, error) {
	var out []connectors.Item
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		v, err := normalize.Decode(line)
		if err != nil {
			return nil, &connectors.ItemError{Loc: fmt.Sprintf("%s:%d", name, n), Err: fmt.Errorf("malformed JSON: %w", err)}
		}
		out = append(out, connectors.Item{Value: v, Raw: json.RawMessage(bytes.Clone(line)), Loc: fmt.Sprintf("%s:%d", name, n)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}

func (c *Connector) display(path string) string {
	if rel, err := filepath.Rel(c.dir, path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}

// lineOf finds the line of a JSON syntax error.
func lineOf(data []byte, err error) int {
	var se *json.SyntaxError
	off := int64(len(data))
	if errors.As(err, &se) {
		off = se.Offset
	}
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}
