package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/lookout-dev/lookout/internal/definitions"
)

// ExportFormat names the shape of an Export (docs/api.md#import-and-export).
const ExportFormat = "lookout-export/v1"

// ExportNote is the export's word on secrets, carried in every export.
const ExportNote = "Credentials (tokens, passwords, credential headers) show as [redacted]: give their values before importing into " +
	"another instance (an import into the instance they came from may keep [redacted] for a source that exists unchanged). " +
	"A watch's own webhook gets a new signing secret when it is created by an import: it is in the import's answer, shown once."

// Export is an owner's definitions made through the API, in the shape of
// source files: each of Sources is the keys of one sources/NAME.yaml with
// its watches, and Watches are the owner's watches of sources declared by
// someone else (the operator's shared sources).
type Export struct {
	Format  string            `json:"format" doc:"lookout-export/v1."`
	Note    string            `json:"note" doc:"How secrets are exported: credentials show as [redacted]; give them on import."`
	Sources []json.RawMessage `json:"sources" doc:"Your sources, each as a source file (sources/NAME.yaml): its keys and its watches."`
	Watches []ExportedWatch   `json:"watches" doc:"Your watches of sources you did not create (shared ones)."`
}

// ExportedWatch is a watch of a source the owner did not create.
type ExportedWatch struct {
	Source string          `json:"source" doc:"The watched source's name."`
	Watch  json.RawMessage `json:"watch" doc:"The watch, as an item of a source file's watches."`
}

// exportPage is how many definitions Export reads at a time.
const exportPage = 200

// Export returns p's sources and watches made through the API (an
// admin's own, not everyone's), credentials redacted.
func (s *Service) Export(ctx context.Context, p Principal) (*Export, error) {
	out := &Export{Format: ExportFormat, Note: ExportNote, Sources: []json.RawMessage{}, Watches: []ExportedWatch{}}
	mine := map[string]bool{}
	for after := ""; ; {
		srcs, err := s.store.ListSources(ctx, actor(p), definitions.ListOptions{After: after, Limit: exportPage})
		if err != nil {
			return nil, fmt.Errorf("export sources of %s: %w", p.Owner, err)
		}
		for i := range srcs {
			if srcs[i].Owner == p.Owner && srcs[i].ManagedBy == definitions.ManagedByAPI {
				mine[srcs[i].Name] = true
			}
		}
		if len(srcs) < exportPage {
			break
		}
		after = srcs[len(srcs)-1].Name
	}
	watches := map[string][]json.RawMessage{}
	for afterSrc, after := "", ""; ; {
		ws, err := s.store.ListWatches(ctx, actor(p), "", definitions.ListOptions{AfterSource: afterSrc, After: after, Limit: exportPage})
		if err != nil {
			return nil, fmt.Errorf("export watches of %s: %w", p.Owner, err)
		}
		for i := range ws {
			w := &ws[i]
			if w.Owner != p.Owner || w.ManagedBy != definitions.ManagedByAPI {
				continue
			}
			def := definitions.RedactCredentials(w.Definition)
			if mine[w.Source] {
				watches[w.Source] = append(watches[w.Source], def)
				continue
			}
			out.Watches = append(out.Watches, ExportedWatch{Source: w.Source, Watch: def})
		}
		if len(ws) < exportPage {
			break
		}
		afterSrc, after = ws[len(ws)-1].Source, ws[len(ws)-1].Name
	}
	names := make([]string, 0, len(mine))
	for n := range mine {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		src, err := s.store.GetSource(ctx, actor(p), n)
		if err != nil {
			return nil, fromStore(err, "", "source", n)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(definitions.RedactCredentials(src.Definition), &m); err != nil {
			return nil, fmt.Errorf("export source %s: %w", n, err)
		}
		if ws := watches[n]; len(ws) > 0 {
			m["watches"], _ = json.Marshal(ws)
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("export source %s: %w", n, err)
		}
		out.Sources = append(out.Sources, b)
	}
	return out, nil
}

// YAML renders the export as YAML: the same keys, each source a mapping
// that is a source file's content.
func (e *Export) YAML() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return toYAML(b)
}

// SourceFileYAML renders one source of an export as the content of its
// sources/NAME.yaml.
func SourceFileYAML(src json.RawMessage) ([]byte, error) {
	return toYAML(src)
}

func toYAML(b []byte) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(yamlNumbers(v)); err != nil {
		return nil, fmt.Errorf("encode as YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// yamlNumbers turns json.Numbers into YAML numbers (an integer as
// written, otherwise a float).
func yamlNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			x[k] = yamlNumbers(c)
		}
	case []any:
		for i, c := range x {
			x[i] = yamlNumbers(c)
		}
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
	}
	return v
}

// ImportRequest is what Import creates: an Export (its format and note
// are not needed).
type ImportRequest struct {
	Sources []json.RawMessage
	Watches []ExportedWatch
	// DryRun checks and answers what would be created, saving nothing.
	DryRun bool
}

// ImportItem is what Import did (or would do) with one definition.
type ImportItem struct {
	Kind   string `json:"kind" enum:"source,watch" doc:"source or watch."`
	Name   string `json:"name" doc:"The source's name, or source/watch."`
	Action string `json:"action" enum:"created,unchanged" doc:"created (or, in a dry run, would be created), or unchanged: it exists with the same definition."`
	// WebhookSecret is the signing secret of a created watch's own webhook.
	WebhookSecret string `json:"webhook_secret,omitempty" doc:"The new signing secret of a created watch's own webhook, shown this once (never in a dry run)."`
}

// ImportResult is Import's answer.
type ImportResult struct {
	DryRun    bool         `json:"dry_run" doc:"Nothing was saved: the items say what would have been."`
	Created   int          `json:"created" doc:"How many definitions were (or would be) created."`
	Unchanged int          `json:"unchanged" doc:"How many exist already with the same definition."`
	Items     []ImportItem `json:"items"`
}

// errDryRun rolls back a dry run's transaction.
var errDryRun = errors.New("dry run")

// Import creates p's sources and watches of req in one transaction,
// through the same checks, limits and audit as CreateSource and
// CreateWatch. A definition that exists (p's, made through the API) with
// the same definition is unchanged, so importing an export again changes
// nothing; one that exists with another definition, or a name taken by
// someone else's source, is a ConflictError naming it and nothing is
// saved. A dry run does the same and rolls back.
func (s *Service) Import(ctx context.Context, p Principal, req ImportRequest) (*ImportResult, error) {
	var out *ImportResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if out, err = s.importTx(ctx, tx, p, req); err != nil {
			return err
		}
		if req.DryRun {
			return errDryRun
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Service) importTx(ctx context.Context, tx pgx.Tx, p Principal, req ImportRequest) (*ImportResult, error) {
	if err := s.lockOwner(ctx, tx, p); err != nil {
		return nil, err
	}
	out := &ImportResult{DryRun: req.DryRun, Items: []ImportItem{}}
	add := func(it ImportItem) {
		if req.DryRun {
			it.WebhookSecret = ""
		}
		if it.Action == "created" {
			out.Created++
		} else {
			out.Unchanged++
		}
		out.Items = append(out.Items, it)
	}
	store := s.store.In(tx)
	for i, def := range req.Sources {
		prefix := fmt.Sprintf("/sources/%d", i)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(def, &m); err != nil {
			return nil, Invalid(prefix, "must be a JSON object: a source definition as in a source file (name, connector, every, the connector's block, watches)")
		}
		var name string
		if err := json.Unmarshal(m["name"], &name); err != nil || name == "" {
			return nil, Invalid(prefix+"/name", "is required: the source's name")
		}
		var watches []json.RawMessage
		if raw, ok := m["watches"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &watches); err != nil {
				return nil, Invalid(prefix+"/watches", "must be a list of watches")
			}
		}
		delete(m, "watches")
		keys, _ := json.Marshal(m)
		cur, err := store.GetSource(ctx, actor(p), name)
		switch {
		case errors.Is(err, definitions.ErrNotFound):
			if err := noRedacted(def, prefix, true); err != nil {
				return nil, err
			}
			// The source first, then each watch as create_watch makes
			// it: a watch's own webhook gets its new secret there.
			if _, err := s.createSource(ctx, tx, store, p, keys, prefix); err != nil {
				return nil, err
			}
			add(ImportItem{Kind: "source", Name: name, Action: "created"})
		case err != nil:
			return nil, fromStore(err, prefix, "source", name)
		default:
			if err := sameSource(p, cur, keys, name, prefix); err != nil {
				return nil, err
			}
			add(ImportItem{Kind: "source", Name: name, Action: "unchanged"})
		}
		for j, w := range watches {
			it, err := s.importWatch(ctx, tx, store, p, name, w, fmt.Sprintf("%s/watches/%d", prefix, j))
			if err != nil {
				return nil, err
			}
			add(*it)
		}
	}
	for i, w := range req.Watches {
		prefix := fmt.Sprintf("/watches/%d", i)
		if w.Source == "" {
			return nil, Invalid(prefix+"/source", "is required: the name of the watched source")
		}
		it, err := s.importWatch(ctx, tx, store, p, w.Source, w.Watch, prefix+"/watch")
		if err != nil {
			return nil, err
		}
		add(*it)
	}
	return out, nil
}

// sameSource refuses to import keys over cur unless cur is p's (made
// through the API) with the same definition.
func sameSource(p Principal, cur *definitions.Source, keys json.RawMessage, name, prefix string) error {
	if cur.Owner != p.Owner || cur.ManagedBy != definitions.ManagedByAPI {
		return &ConflictError{Pointer: prefix + "/name", Detail: fmt.Sprintf("source %q (%s): the name is taken by a source you did not create through the API (%s); "+
			"rename the source, or import its watches under watches", name, prefix, describeOwner(cur))}
	}
	// Credentials compare as [redacted]: an import never replaces a
	// stored credential (update_source does).
	same, err := sameDefinition(definitions.RedactCredentials(cur.Definition), definitions.RedactCredentials(keys))
	if err != nil {
		return fmt.Errorf("compare source %s: %w", name, err)
	}
	if !same {
		return &ConflictError{Pointer: prefix, Detail: fmt.Sprintf("source %q (%s) exists with a different definition: "+
			"update it (update_source) or delete it before importing, or rename the imported one", name, prefix)}
	}
	return nil
}

// importWatch creates p's watch def of source, or finds it unchanged.
func (s *Service) importWatch(ctx context.Context, tx pgx.Tx, store *definitions.Store, p Principal, source string, def json.RawMessage, pointer string) (*ImportItem, error) {
	name := watchName(def)
	if name == "" {
		return nil, Invalid(pointer+"/name", "is required: the watch's name")
	}
	full := source + "/" + name
	cur, err := store.GetWatch(ctx, actor(p), source, name)
	if err == nil {
		if cur.Owner != p.Owner || cur.ManagedBy != definitions.ManagedByAPI {
			return nil, &ConflictError{Pointer: pointer + "/name", Detail: fmt.Sprintf("watch %q (%s): the name is taken by a watch you did not create through the API", full, pointer)}
		}
		same, err := sameDefinition(definitions.RedactCredentials(cur.Definition), def)
		if err != nil {
			return nil, fmt.Errorf("compare watch %s: %w", full, err)
		}
		if !same {
			return nil, &ConflictError{Pointer: pointer, Detail: fmt.Sprintf("watch %q (%s) exists with a different definition: "+
				"update it (update_watch) or delete it before importing", full, pointer)}
		}
		return &ImportItem{Kind: "watch", Name: full, Action: "unchanged"}, nil
	}
	if !errors.Is(err, definitions.ErrNotFound) {
		return nil, fmt.Errorf("import watch %s: %w", full, err)
	}
	created, err := s.CreateWatch(ctx, tx, p, CreateWatchRequest{Source: source, Watch: def})
	if err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) {
			return nil, &ConflictError{Pointer: pointer + "/name", Detail: fmt.Sprintf("watch %q (%s): %s", full, pointer, ce.Detail)}
		}
		return nil, repoint(err, "/watch", pointer)
	}
	return &ImportItem{Kind: "watch", Name: full, Action: "created", WebhookSecret: created.Watch.WebhookSecret}, nil
}

// repoint moves the pointers of err's field errors from under from to
// under to.
func repoint(err error, from, to string) error {
	var ie *InvalidError
	if errors.As(err, &ie) {
		out := &InvalidError{Errors: make([]FieldError, len(ie.Errors))}
		for i, f := range ie.Errors {
			if rest, ok := strings.CutPrefix(f.Pointer, from); ok {
				f.Pointer = to + rest
			}
			out.Errors[i] = f
		}
		return out
	}
	var le *LimitError
	if errors.As(err, &le) {
		c := *le
		if rest, ok := strings.CutPrefix(c.Pointer, from); ok {
			c.Pointer = to + rest
		}
		return &c
	}
	return err
}

func watchName(def json.RawMessage) string {
	var w struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(def, &w)
	return w.Name
}

func describeOwner(src *definitions.Source) string {
	if src.Owner == "" {
		return "a shared source declared by the operator"
	}
	return "managed by " + src.ManagedBy
}

// sameDefinition compares two definitions as canonical JSON (keys
// sorted, numbers as written).
func sameDefinition(a, b json.RawMessage) (bool, error) {
	ca, err := canonicalJSON(a)
	if err != nil {
		return false, err
	}
	cb, err := canonicalJSON(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ca, cb), nil
}

func canonicalJSON(b json.RawMessage) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// noRedacted refuses a new source whose credentials are still
// [redacted] (an export's placeholder): the value must be given. A
// watch's webhook secret is left alone (lookout makes a new one).
func noRedacted(def json.RawMessage, prefix string, source bool) error {
	var v any
	if err := json.Unmarshal(def, &v); err != nil {
		return nil // the validation path reports it
	}
	var errs []FieldError
	var walk func(v any, pointer string)
	walk = func(v any, pointer string) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if source && pointer == prefix && k == "watches" {
					continue
				}
				walk(x[k], pointer+"/"+definitions.PointerToken(k))
			}
		case []any:
			for i, c := range x {
				walk(c, fmt.Sprintf("%s/%d", pointer, i))
			}
		case string:
			if x == definitions.Redacted {
				errs = append(errs, FieldError{Pointer: pointer, Detail: "is [redacted] (an export hides credentials): give the credential's value; it is stored encrypted"})
			}
		}
	}
	walk(v, prefix)
	if len(errs) > 0 {
		return &InvalidError{Errors: errs}
	}
	return nil
}

// ParseImportYAML reads what import takes from YAML text: an export as
// export writes it with ?format=yaml (its sources and watches), or one
// source file (sources/NAME.yaml: a mapping with name and connector).
// Errors name the line.
func ParseImportYAML(text string) (*ImportRequest, error) {
	if len(text) > OPMLMaxBytes {
		return nil, Invalid("/yaml", "is larger than %d bytes", OPMLMaxBytes)
	}
	var doc any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, Invalid("/yaml", "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, Invalid("/yaml", "must be a mapping: an export (format, sources, watches) or one source file (name, connector, ...)")
	}
	req := &ImportRequest{}
	if _, isSource := m["connector"]; isSource {
		b, err := json.Marshal(m)
		if err != nil {
			return nil, Invalid("/yaml", "cannot be read as JSON: %v", err)
		}
		req.Sources = []json.RawMessage{b}
		return req, nil
	}
	for k := range m {
		if k != "format" && k != "note" && k != "sources" && k != "watches" {
			return nil, Invalid("/yaml", "%q is not a key of an export (format, note, sources, watches) nor is this a source file (it has no connector)", k)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, Invalid("/yaml", "cannot be read as JSON: %v", err)
	}
	var exp Export
	if err := json.Unmarshal(b, &exp); err != nil {
		return nil, Invalid("/yaml", "is not an export: %v", err)
	}
	req.Sources, req.Watches = exp.Sources, exp.Watches
	return req, nil
}
