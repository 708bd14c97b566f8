package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/iter"
	"go.yaml.in/yaml/v3"

	"github.com/lookout-dev/lookout/internal/redact"
)

// GlobalFile and SourcesDir name the parts of a configuration directory.
const (
	GlobalFile = "lookout.yaml"
	SourcesDir = "sources"
)

// Error is a configuration error located in a file.
type Error struct {
	// File is relative to the configuration directory.
	File string
	// Line is 1-based; 0 when the error concerns the whole file.
	Line int
	// Key is the dotted key path, e.g. rate_limit.per_second; may be empty.
	Key string
	// Msg says what is wrong. A Msg starting with ':' follows the key
	// without a space (watches[0].when: unknown field record.stauts).
	Msg string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return loc + ": " + e.Msg
	}
	if strings.HasPrefix(e.Msg, ":") {
		return loc + ": " + e.Key + e.Msg
	}
	return loc + ": " + e.Key + " " + e.Msg
}

// Errorf returns an *Error at the line of key in the source file. Connectors
// and the evaluator use it so that problems found while building a source
// point at the configuration that caused them.
func (s *Source) Errorf(key, format string, args ...any) error {
	return &Error{File: s.Path, Line: s.Line(key), Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Errorf returns an *Error at the line of key in lookout.yaml.
func (g *Global) Errorf(key, format string, args ...any) error {
	return &Error{File: cmp.Or(g.file, GlobalFile), Line: g.Line(key), Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Load reads and validates the configuration directory dir. All problems
// found are returned together, joined, each naming its file and line.
// Every ${ENV} reference is expanded (UsesAll).
func Load(dir string) (*Config, error) { return LoadFor(dir, UsesAll) }

// LoadFor is Load for a daemon that uses what uses says of the sources:
// the ${ENV} references of the parts it does not use are left as written
// (see Uses). The loaded Global keeps uses, so that the definitions it
// parses later (definitions.Validator) are read the same way.
func LoadFor(dir string, uses Uses) (*Config, error) {
	cfg := &Config{Dir: dir}
	cfg.Global.uses = uses
	var errs, globalErrs []error
	var globalBad map[string]bool
	var secrets []string // the values of every ${ENV} expanded

	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("read the configuration directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("the configuration directory %s is not a directory", dir)
	}
	globalPath := filepath.Join(dir, GlobalFile)
	data, err := readDocument(globalPath, GlobalFile)
	var ce *Error
	switch {
	case errors.Is(err, os.ErrNotExist):
		// lookout.yaml is optional; every global setting has a default.
	case errors.As(err, &ce):
		errs = append(errs, err)
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", globalPath, err)
	default:
		globalBad = map[string]bool{}
		root, err := parseYAML(GlobalFile, data)
		if err != nil {
			errs = append(errs, err)
			break
		}
		lines, bad, derrs := decodeStrict(GlobalFile, root, &cfg.Global, &secrets)
		cfg.Global.uses = uses // decoding lookout.yaml leaves it
		cfg.Global.lines, globalBad = lines, bad
		globalErrs = derrs
		cfg.Global.splitSinkBlocks(root)
	}
	cfg.Global.file = GlobalFile
	// Defaults are applied and checked even after decoding errors, so that
	// every problem of the file is listed; those about a key that did not
	// decode are left out.
	globalErrs = append(globalErrs, dropBad(cfg.Global.applyDefaults(), globalBad)...)
	errs = append(errs, byLine(globalErrs)...)

	// sources/ is optional too: a directory of lookout.yaml alone (a
	// Kubernetes base, a deployment whose sources are all made through
	// the API) declares no source.
	entries, err := os.ReadDir(filepath.Join(dir, SourcesDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read sources directory: %w", err)
	}
	var rels []string
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		rels = append(rels, filepath.Join(SourcesDir, e.Name()))
	}
	// The files are read and parsed on every core (a directory of
	// thousands of files is a daemon's start, docs/benchmarks.md (13)),
	// then taken in directory order: the errors, the secrets and the
	// duplicate names are those of a parse one file after the other.
	parsed := make([]parsedFile, len(rels))
	iter.ForEachIdx(parsed, func(i int, f *parsedFile) {
		data, err := readDocument(filepath.Join(dir, rels[i]), rels[i])
		if err != nil {
			f.err = err
			return
		}
		f.src, f.errs = parseSource(rels[i], data, &cfg.Global, &f.secrets, nil)
	})
	byName := map[string]string{}
	for i, rel := range rels {
		f := parsed[i]
		parsed[i] = parsedFile{} // the source is cfg's now, or dropped
		if errors.As(f.err, &ce) {
			errs = append(errs, f.err)
			continue
		}
		if f.err != nil {
			return nil, fmt.Errorf("read %s: %w", rel, f.err)
		}
		secrets = append(secrets, f.secrets...)
		src, serrs := f.src, f.errs
		if len(serrs) > 0 {
			errs = append(errs, serrs...)
			continue
		}
		if werrs := fileWebhooks(src); len(werrs) > 0 {
			errs = append(errs, werrs...)
			continue
		}
		if prev, dup := byName[src.Name]; dup {
			errs = append(errs, src.Errorf("name", "%q is already used by %s", src.Name, prev))
			continue
		}
		byName[src.Name] = rel
		cfg.Sources = append(cfg.Sources, src)
	}
	errs = append(errs, cfg.Global.validateRetention(cfg.Sources)...)
	cfg.Global.redactor = redact.NewGrowable(secrets...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(cfg.Sources, func(i, j int) bool { return cfg.Sources[i].Name < cfg.Sources[j].Name })
	return cfg, nil
}

// parsedFile is one source file as LoadFor's parallel parse left it.
type parsedFile struct {
	src     *Source
	errs    []error
	secrets []string
	err     error // reading the file
}

// decodeStrict decodes root into v key by key (see decoder), reporting
// keys v does not declare, expanding ${ENV} references in string values
// (their values are appended to secrets), and returning the line of every
// key path, the key paths that did not decode, and every problem.
func decodeStrict(file string, root *yaml.Node, v any, secrets *[]string) (lines map[string]int, bad map[string]bool, errs []error) {
	lines = map[string]int{}
	bad, errs = decodeRoot(file, root, root, v, lines, nil, secrets, nil, nil)
	return lines, bad, errs
}

// decode decodes a source file like decodeStrict, keeping the connector
// blocks raw (see splitBlocks). The ${ENV} references of the parts uses
// leaves are not expanded (see Uses).
func (s *Source) decode(file string, root *yaml.Node, secrets *[]string, uses Uses) (lines map[string]int, bad map[string]bool, errs []error) {
	lines = map[string]int{}
	rest, known := s.splitBlocks(root, lines)
	keys := *root
	keys.Content = rest
	bad, errs = decodeRoot(file, &keys, root, s, lines, known, secrets, uses.leaves, s.typed)
	return lines, bad, errs
}

// decodeRoot checks the keys of keys against v's type (known lists further
// top-level keys), expands ${ENV} references everywhere under root
// (appending their values to secrets), and decodes keys into v key by
// key. It returns the key paths that did not decode or expand, and every
// problem.
//
// leave, when not nil, names the key paths whose references are left as
// written: neither expanded nor required. typed is passed to the decoder
// (see newDecoder).
func decodeRoot(file string, keys, root *yaml.Node, v any, lines map[string]int, known []string, secrets *[]string, leave, typed func(path string) bool) (map[string]bool, []error) {
	var errs []error
	checkKeys(file, keys, reflect.TypeOf(v).Elem(), "", lines, &errs, known...)
	d := newDecoder(file, typed)
	expandEnv(file, root, "", secrets, &errs, d.bad, leave)
	if keys.Kind != yaml.MappingNode {
		errs = append(errs, &Error{File: file, Line: keys.Line, Msg: "must be a mapping of keys to values, not " + yamlValue(keys)})
		return d.bad, errs
	}
	d.decode(keys, reflect.ValueOf(v).Elem(), "")
	return d.bad, append(errs, d.errs...)
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError turns yaml.v3's "line N: msg" errors (syntax errors; type
// errors are found key by key by decoder) into file:N: msg errors.
func yamlError(file string, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var errs []error
	for _, m := range msgs {
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			var line int
			fmt.Sscanf(sm[1], "%d", &line)
			errs = append(errs, &Error{File: file, Line: line, Msg: sm[2]})
			continue
		}
		errs = append(errs, &Error{File: file, Msg: strings.TrimPrefix(m, "yaml: ")})
	}
	return errors.Join(errs...)
}

func goTypeName(t string) string {
	switch {
	case t == "time.Duration":
		return "a duration (e.g. 30s, 5m, 1h)"
	case strings.HasPrefix(t, "int"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "a boolean"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case t == "time.Time":
		return "a time (RFC 3339, e.g. 2026-12-31T00:00:00Z)"
	}
	return "a mapping"
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	timeType     = reflect.TypeOf(time.Time{})
)

// checkKeys walks node alongside type t, reporting keys that t does not
// declare and recording the line of every key path. extra are further keys
// known at node itself (the connector blocks of a source), for the message.
func checkKeys(file string, node *yaml.Node, t reflect.Type, path string, lines map[string]int, errs *[]error, extra ...string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	switch {
	case t == durationType || t == timeType:
		return
	case t.Kind() == reflect.Struct && node.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		for i := 0; i+1 < len(node.Content); i += 2 {
			key, val := node.Content[i], node.Content[i+1]
			p := joinPath(path, key.Value)
			lines[p] = key.Line
			f, ok := fields[key.Value]
			if !ok && t == sinkType {
				// A key of the sink's type: its package checks it
				// (Sink.DecodeBlock).
				recordLines(val, p, lines)
				continue
			}
			if !ok {
				known := slices.Clone(extra)
				for k := range fields {
					known = append(known, k)
				}
				slices.Sort(known)
				known = slices.Compact(known)
				*errs = append(*errs, &Error{File: file, Line: key.Line, Key: p,
					Msg: fmt.Sprintf("is not a known key (known: %s)", strings.Join(known, ", "))})
				continue
			}
			checkKeys(file, val, f, p, lines, errs)
		}
	case t.Kind() == reflect.Map && node.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			key, val := node.Content[i], node.Content[i+1]
			p := joinPath(path, key.Value)
			lines[p] = key.Line
			checkKeys(file, val, t.Elem(), p, lines, errs)
		}
	case t.Kind() == reflect.Slice && node.Kind == yaml.SequenceNode:
		for i, el := range node.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = el.Line
			checkKeys(file, el, t.Elem(), p, lines, errs)
		}
	}
}

// yamlFields maps the yaml names of t's exported fields to their types
// (one map per type, shared: callers only read it).
func yamlFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldTypes.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m, _ := fieldTypes.LoadOrStore(t, newYAMLFields(t))
	return m.(map[string]reflect.Type)
}

// fieldTypes caches yamlFields by type (see fieldIndexes).
var fieldTypes sync.Map

func newYAMLFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
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
		out[name] = f.Type
	}
	return out
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var envRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${NAME} in string scalars with the environment value,
// and appends every value it expands to secrets (for redaction). An unset
// or empty variable is an error: a silently empty token is worse.
// A path for which leave (when not nil) is true keeps its references as
// written.
func expandEnv(file string, node *yaml.Node, path string, secrets *[]string, errs *[]error, bad map[string]bool, leave func(string) bool) {
	switch node.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range node.Content {
			expandEnv(file, c, fmt.Sprintf("%s[%d]", path, i), secrets, errs, bad, leave)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			expandEnv(file, node.Content[i+1], joinPath(path, node.Content[i].Value), secrets, errs, bad, leave)
		}
	case yaml.ScalarNode:
		if !strings.Contains(node.Value, "${") || (leave != nil && leave(path)) {
			return
		}
		node.Value = envRE.ReplaceAllStringFunc(node.Value, func(ref string) string {
			name := ref[2 : len(ref)-1]
			v, ok := os.LookupEnv(name)
			switch {
			case !ok:
				*errs = append(*errs, &Error{File: file, Line: node.Line, Key: path,
					Msg: fmt.Sprintf("refers to ${%s}, which is not set in the environment", name)})
				bad[path] = true
			case v == "":
				// An empty token sent upstream is worse than no start.
				*errs = append(*errs, &Error{File: file, Line: node.Line, Key: path,
					Msg: fmt.Sprintf("refers to ${%s}, which is set but empty", name)})
				bad[path] = true
			}
			*secrets = append(*secrets, v)
			return v
		})
	}
}

// fileWebhooks refuses watches with a webhook of their own in a source
// file: that webhook's secret is generated and sealed by the API.
func fileWebhooks(src *Source) []error {
	var errs []error
	for i, w := range src.Watches {
		if w.Webhook != nil {
			errs = append(errs, src.Errorf(fmt.Sprintf("watches[%d].webhook", i),
				"is for watches created through the API (lookout generates and seals its secret); in a file, declare a webhook sink in lookout.yaml and name it in notify"))
		}
		if w.Channel != nil {
			errs = append(errs, src.Errorf(fmt.Sprintf("watches[%d].channel", i),
				"is for watches created through the API (lookout seals its URL); in a file, declare a url sink in lookout.yaml and name it in notify"))
		}
	}
	return errs
}
