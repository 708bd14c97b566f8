package normalize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
)

// FieldExprs are mapping expressions over `item`, keyed by field name. An
// empty expression takes the item's key of the same name.
type FieldExprs struct {
	ID, Title, Body, URL, Author, Status, Labels, CreatedAt, UpdatedAt string
	// Extra maps extra keys to expressions. When nil, every item key that
	// no standard field consumed becomes an extra key.
	Extra map[string]string
}

// FieldError is a mapping problem in one item; Field names the normalized
// field and RecordID the item when known.
type FieldError struct {
	RecordID string
	Field    string
	Err      error
}

func (e *FieldError) Error() string {
	if e.RecordID == "" {
		return fmt.Sprintf("item field %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("record %q field %s: %v", e.RecordID, e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// KeyError is a field expression that does not compile; Key is its
// configuration key (fields.title, fields.extra.team).
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

var simpleKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ErrNoID is returned for an item whose id is missing or empty.
var ErrNoID = errors.New("item has no id")

// Mapper maps raw items to records.
type Mapper struct {
	std    [9]*Program // indexed like fieldNames
	keys   [9]string   // item keys the fields consume
	plain  [9]bool     // the expression is a plain item.key
	srcs   [9]string   // the expressions as written, "" when unmapped
	extra  map[string]*Program
	hasher *Hasher
	// textFromItem: every text field (id to labels) is the item's value
	// of a key, not an expression's result.
	textFromItem bool
	layout       atomic.Pointer[layout] // of the last key set mapped
}

// NewMapper compiles the field expressions. Every expression that does not
// compile is a *KeyError naming its field (fields.<name>), and a volatile
// path that is not a record field any other error, all joined (list them
// with Problems).
func NewMapper(f FieldExprs, volatile []string) (*Mapper, error) {
	var errs []error
	h, err := NewHasher(volatile)
	if err != nil {
		errs = append(errs, err)
	}
	m := &Mapper{hasher: h, keys: [9]string{"id", "title", "body", "url", "author", "status", "labels", "created_at", "updated_at"}}
	exprs := [9]string{f.ID, f.Title, f.Body, f.URL, f.Author, f.Status, f.Labels, f.CreatedAt, f.UpdatedAt}
	for i, src := range exprs {
		if strings.TrimSpace(src) == "" {
			continue
		}
		p, err := Compile(src, "item")
		if err != nil {
			errs = append(errs, &KeyError{Key: "fields." + fieldNames[i], Err: err})
			continue
		}
		m.std[i] = p
		m.srcs[i] = strings.TrimSpace(src)
		// A plain `item.key` mapping consumes that key: it is not repeated in extra.
		if k, ok := strings.CutPrefix(strings.TrimSpace(src), "item."); ok && simpleKey.MatchString(k) {
			m.keys[i] = k
			m.plain[i] = true
		}
	}
	m.textFromItem = true
	for i := range 7 {
		if m.std[i] != nil && !m.plain[i] {
			m.textFromItem = false
		}
	}
	if f.Extra != nil {
		m.extra = map[string]*Program{}
		for _, k := range slices.Sorted(maps.Keys(f.Extra)) {
			p, err := Compile(f.Extra[k], "item")
			if err != nil {
				errs = append(errs, &KeyError{Key: "fields.extra." + k, Err: err})
				continue
			}
			m.extra[k] = p
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// Hasher returns the mapper's hasher.
func (m *Mapper) Hasher() *Hasher { return m.hasher }

// Map maps one decoded item (see Decode) to a hashed record. raw is kept as
// the record's Raw; pass nil to marshal item.
func (m *Mapper) Map(item any, raw json.RawMessage) (Record, error) {
	var r Record
	obj, _ := item.(map[string]any)
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	// The item's keys in canonical order with their values, and where the
	// fields' keys are among them.
	var keys []string
	var values []any
	var lay *layout
	if obj != nil {
		keys, values = sortedEntries(obj, sc.vals)
		sc.vals = values
		lay = m.layoutFor(keys)
	}
	vals := [9]any{}
	for i := range vals {
		if p := m.std[i]; p != nil {
			v, err := p.Run(item)
			if err != nil {
				return r, &FieldError{RecordID: r.ID, Field: fieldNames[i], Err: err}
			}
			vals[i] = v
		} else if lay != nil && lay.field[i] >= 0 {
			vals[i] = values[lay.field[i]]
		}
		if i == 0 {
			id, err := idString(vals[0])
			if err != nil {
				return r, m.noID(item, err)
			}
			r.ID = id
		}
	}
	var err error
	str := func(i int) string {
		s, e := stringValue(vals[i])
		if e != nil && err == nil {
			err = m.fieldError(r.ID, i, e)
		}
		return s
	}
	r.Title, r.Body, r.URL, r.Author, r.Status = str(1), str(2), str(3), str(4), str(5)
	if err != nil {
		return r, err
	}
	if r.Labels, err = labelsValue(vals[6]); err != nil {
		return r, m.fieldError(r.ID, 6, err)
	}
	created, hasCreated, err := parseTimeValue(vals[7])
	if err != nil {
		return r, m.fieldError(r.ID, 7, err)
	}
	var updated time.Time
	var hasUpdated bool
	if c, ok := vals[7].(string); ok && c != "" && vals[8] == any(c) {
		updated, hasUpdated = created, hasCreated // the same text: parsed once
	} else if updated, hasUpdated, err = parseTimeValue(vals[8]); err != nil {
		return r, m.fieldError(r.ID, 8, err)
	}
	if hasCreated || hasUpdated {
		times := new([2]time.Time) // one allocation for both
		if hasCreated {
			times[0] = created
			r.CreatedAt = &times[0]
		}
		if hasUpdated {
			times[1] = updated
			r.UpdatedAt = &times[1]
		}
	}
	b := sc.buf[:0]
	// The canonical extra object is encoded once, into b[es:ee], and the
	// snapshot copies it; when the mapper encodes the raw JSON itself, the
	// extra keys' encodings are copied from it too.
	var es, ee int
	ownRaw := raw == nil && obj != nil
	var rs, re int
	valueSpans := false // sc.vspans locates the item's values in b
	switch {
	case m.extra != nil:
		r.Extra = make(map[string]any, len(m.extra))
		for k, p := range m.extra {
			v, err := p.Run(item)
			if err != nil {
				return r, &FieldError{RecordID: r.ID, Field: "extra." + k, Err: err}
			}
			r.Extra[k] = jsonValue(v)
		}
		if ownRaw {
			rs = len(b)
			b = AppendCanonical(b, obj)
			re = len(b)
		}
		es = len(b)
		b = AppendCanonical(b, r.Extra)
		ee = len(b)
	case obj != nil:
		r.Extra = make(map[string]any, lay.extra)
		if ownRaw {
			// Canonical(item), noting where each extra key's "key":value
			// is, and where each value is.
			spans := sc.spans[:0]
			vspans := sc.vspans[:0]
			rs = len(b)
			b = append(b, '{')
			for i, k := range keys {
				if i > 0 {
					b = append(b, ',')
				}
				ks := len(b)
				b = appendString(b, k)
				b = append(b, ':')
				vs := len(b)
				v := values[i]
				b = AppendCanonical(b, v)
				vspans = append(vspans, span{vs, len(b)})
				if !lay.consumed[i] {
					r.Extra[k] = v
					spans = append(spans, span{ks, len(b)})
				}
			}
			b = append(b, '}')
			re = len(b)
			es = len(b)
			b = append(b, '{')
			for i, sp := range spans {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, b[sp.start:sp.end]...)
			}
			b = append(b, '}')
			ee = len(b)
			sc.spans, sc.vspans = spans, vspans
			valueSpans = true
			break
		}
		es = len(b)
		b = append(b, '{')
		for i, k := range keys {
			if lay.consumed[i] {
				continue
			}
			if len(r.Extra) > 0 {
				b = append(b, ',')
			}
			v := values[i]
			r.Extra[k] = v
			b = appendString(b, k)
			b = append(b, ':')
			b = AppendCanonical(b, v)
		}
		b = append(b, '}')
		ee = len(b)
	default:
		es = len(b)
		b = append(b, "{}"...)
		ee = len(b)
	}
	// clean: the mapper encoded the raw JSON and it holds no U+FFFD, so no
	// text in the item had invalid UTF-8 or NUL (Canonical would have
	// replaced it by U+FFFD).
	clean := false
	switch {
	case ownRaw:
		// Canonical replaced what PostgreSQL cannot store; if it did, the
		// replacement character is in its output (rarely otherwise).
		clean = !bytes.Contains(b[rs:re], replacementChar)
		r.Repaired = !clean && !storable(item)
	case raw == nil:
		raw = Canonical(item)
		r.Repaired = bytes.Contains(raw, replacementChar) && !storable(item)
	case !utf8.Valid(raw) || bytes.Contains(raw, []byte(`\u0000`)):
		// PostgreSQL's jsonb refuses invalid UTF-8 and \u0000; Canonical
		// replaces them.
		raw = Canonical(item)
		r.Repaired = !storable(item)
	case bytes.Contains(raw, []byte(`\ud`)) || bytes.Contains(raw, []byte(`\uD`)):
		// A lone surrogate escape (the decoder made it U+FFFD) is refused
		// by jsonb too; a valid pair is re-encoded as the character.
		raw = Canonical(item)
	}
	fix := func(s string) string {
		if c, ok := storableText(s); !ok {
			r.Repaired = true
			return c
		}
		return s
	}
	if !clean || !m.textFromItem {
		r.ID = fix(r.ID)
		r.Title, r.Body, r.URL, r.Author, r.Status = fix(r.Title), fix(r.Body), fix(r.URL), fix(r.Author), fix(r.Status)
		for i, l := range r.Labels {
			r.Labels[i] = fix(l)
		}
	}

	// Fields whose value is a string (or a list of strings) of the item,
	// unchanged, are encoded in the raw JSON already: the snapshot copies
	// them.
	var pre [9]span
	if valueSpans {
		texts := [...]string{r.ID, r.Title, r.Body, r.URL, r.Author, r.Status}
		for i, t := range texts {
			if j := lay.field[i]; m.std[i] == nil && j >= 0 && vals[i] == any(t) {
				pre[i] = sc.vspans[j]
			}
		}
		if j := lay.field[6]; m.std[6] == nil && j >= 0 && sameStrings(vals[6], r.Labels) {
			pre[6] = sc.vspans[j]
		}
	}

	// The snapshot, after the raw JSON when the mapper encoded it: both
	// are copied out of the scratch buffer into one allocation.
	ss := len(b)
	var xs int
	b, xs = r.appendSnapshotExtra(b, b[es:ee], &pre)
	se := len(b)
	sc.buf = b
	var out []byte
	if ownRaw {
		out = make([]byte, re-rs+se-ss)
		n := copy(out, b[rs:re])
		copy(out[n:], b[ss:se])
		r.Raw = out[:n:n]
		out = out[n:]
	} else {
		out = make([]byte, se-ss)
		copy(out, b[ss:se])
		r.Raw = raw
	}
	r.Snapshot = out
	r.ExtraJSON = out[xs-ss : xs-ss+ee-es : xs-ss+ee-es]
	m.hasher.hashSnapshot(&r)
	return r, nil
}

// span is where a part of an encoding is in a buffer.
type span struct{ start, end int }

// sameStrings reports whether v, a decoded JSON list, holds exactly the
// strings labels (so that both encode alike).
func sameStrings(v any, labels []string) bool {
	l, ok := v.([]any)
	if !ok || len(l) != len(labels) {
		return false
	}
	for i, e := range l {
		if e != any(labels[i]) {
			return false
		}
	}
	return true
}

// scratch is Map's working memory, reused through scratchPool (Map runs on
// several goroutines at once); nothing a Record holds points into it.
type scratch struct {
	buf    []byte
	spans  []span // "key":value of the extra keys in buf
	vspans []span // the values of the item's keys in buf, in key order
	vals   []any  // the item's values in key order
}

var scratchPool = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 4096)} }}

// release returns sc to the pool unless an outsized item grew it.
func (sc *scratch) release() {
	if cap(sc.buf) > 1<<20 || cap(sc.spans) > 1<<12 || cap(sc.vspans) > 1<<12 || cap(sc.vals) > 1<<12 {
		return
	}
	clear(sc.vals) // keep no item alive from the pool
	sc.vals = sc.vals[:0]
	scratchPool.Put(sc)
}

// layout says, for one sorted key set, where the fields' keys are and
// which keys the fields consume. Items of a source share their keys, so a
// mapper keeps the layout of the last key set it saw.
type layout struct {
	keys     []string // the key set, as sortedEntries shares it (never changed)
	field    [9]int   // index in keys of field i's key, -1 when absent
	consumed []bool   // per key: a field consumes it (it is not in extra)
	extra    int      // the number of keys not consumed
}

// layoutFor returns the layout of keys, from the last one when keys is the
// same shared slice.
func (m *Mapper) layoutFor(keys []string) *layout {
	if l := m.layout.Load(); l != nil && len(l.keys) == len(keys) && (len(keys) == 0 || &l.keys[0] == &keys[0]) {
		return l
	}
	l := &layout{keys: keys, consumed: make([]bool, len(keys))}
	for i := range l.field {
		l.field[i] = -1
	}
	for j, k := range keys {
		l.consumed[j] = m.consumed(k)
		if !l.consumed[j] {
			l.extra++
		}
		for i, fk := range m.keys {
			if fk == k {
				l.field[i] = j
			}
		}
	}
	m.layout.Store(l)
	return l
}

// kindError is a value of the wrong kind for a field: "is an object, not
// a string". Map words it with where the value came from.
type kindError struct {
	v    any
	want string
}

func (e *kindError) Error() string { return fmt.Sprintf("is %s, not %s", kindOf(e.v), e.want) }

// kindOf names the JSON kind of a decoded value for a message.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int64, float64, json.Number:
		return "a number"
	case []any, []string:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// origin says where field i's value came from: its expression, or the
// item's key of the same name.
func (m *Mapper) origin(i int) string {
	if m.std[i] != nil {
		return fmt.Sprintf("fields.%s (%s)", fieldNames[i], m.srcs[i])
	}
	return fmt.Sprintf("the item's %q", m.keys[i])
}

// fieldError locates a mapping problem of field i: a value of the wrong
// kind names its expression, or, for a field taken from the item's key of
// the same name, says how to map it.
func (m *Mapper) fieldError(id string, i int, err error) error {
	var ke *kindError
	if errors.As(err, &ke) {
		hint := ""
		switch _, obj := ke.v.(map[string]any); {
		case m.std[i] != nil:
		case obj && ke.want == "a string":
			hint = fmt.Sprintf(" (map the field with fields.%s, e.g. item.%s.name)", fieldNames[i], m.keys[i])
		default:
			hint = fmt.Sprintf(" (map the field with fields.%s)", fieldNames[i])
		}
		err = fmt.Errorf("%s %w%s", m.origin(i), err, hint)
	}
	return &FieldError{RecordID: id, Field: fieldNames[i], Err: err}
}

// noID says why an item has no id, naming fields.id or the item's key.
func (m *Mapper) noID(item any, err error) error {
	var ke *kindError
	switch {
	case errors.As(err, &ke):
		return fmt.Errorf("%w: %s %v", ErrNoID, m.origin(0), ke)
	case m.std[0] != nil:
		return fmt.Errorf("%w: fields.id (%s) is %s", ErrNoID, m.srcs[0], emptyKind(err))
	}
	if _, ok := item.(map[string]any); !ok {
		return fmt.Errorf("%w: the item is %s, not an object (map the id with fields.id)", ErrNoID, kindOf(item))
	}
	if errors.Is(err, errEmptyID) {
		return fmt.Errorf("%w: the item's \"id\" is an empty string (map another key with fields.id)", ErrNoID)
	}
	return fmt.Errorf("%w: the item has no \"id\" key (map one with fields.id, e.g. fields.id: item.number)", ErrNoID)
}

func emptyKind(err error) string {
	if errors.Is(err, errEmptyID) {
		return "an empty string"
	}
	return "null"
}

// errEmptyID is an id that is an empty (or blank) string.
var errEmptyID = errors.New("empty id")

var replacementChar = []byte("\uFFFD")

// storableText returns s as PostgreSQL text can hold it, with invalid UTF-8
// and NUL replaced by U+FFFD (as Canonical does inside extra and
// snapshots), and whether s was so already.
func storableText(s string) (string, bool) {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s, true
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD"), false
}

// storable reports whether every string (and key) in the decoded JSON
// value v is valid UTF-8 without NUL.
func storable(v any) bool {
	switch x := v.(type) {
	case string:
		_, ok := storableText(x)
		return ok
	case []any:
		for _, e := range x {
			if !storable(e) {
				return false
			}
		}
	case map[string]any:
		for k, e := range x {
			if _, ok := storableText(k); !ok || !storable(e) {
				return false
			}
		}
	}
	return true
}

func (m *Mapper) consumed(key string) bool {
	for i, k := range m.keys {
		if k == key && (m.std[i] == nil || m.plain[i]) {
			return true
		}
	}
	return false
}

func idString(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", ErrNoID
	case string:
		if strings.TrimSpace(x) == "" {
			return "", errEmptyID
		}
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int:
		return strconv.Itoa(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case json.Number:
		return x.String(), nil
	}
	return "", &kindError{v: v, want: "a string or a number"}
}

func stringValue(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case int64, int, float64, bool, json.Number:
		return fmt.Sprint(x), nil
	}
	return "", &kindError{v: v, want: "a string"}
}

func labelsValue(v any) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if x == "" {
			return nil, nil
		}
		return []string{x}, nil
	case []string:
		return x, nil
	case []any:
		out := make([]string, 0, len(x))
		for _, el := range x {
			switch e := el.(type) {
			case string:
				out = append(out, e)
			case map[string]any:
				// GitHub-style label objects: {"name": "bug", ...}
				name, ok := e["name"].(string)
				if !ok {
					return nil, errors.New("label object has no string name")
				}
				out = append(out, name)
			default:
				s, err := stringValue(e)
				if err != nil {
					return nil, fmt.Errorf("label %d is %s, not a string", len(out), kindOf(e))
				}
				out = append(out, s)
			}
		}
		return out, nil
	}
	return nil, &kindError{v: v, want: "a list of strings"}
}

var timeLayouts = []string{time.RFC3339Nano, time.RFC1123Z, time.RFC1123, "2006-01-02 15:04:05Z07:00", "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02"}

func timeOf(v any) (*time.Time, error) {
	t, ok, err := parseTimeValue(v)
	if !ok || err != nil {
		return nil, err
	}
	return &t, nil
}

// parseTimeValue is timeOf without the allocation: ok is false for no time.
func parseTimeValue(v any) (t time.Time, ok bool, err error) {
	switch x := v.(type) {
	case nil:
		return t, false, nil
	case time.Time:
		return x.UTC(), true, nil
	case *time.Time:
		if x == nil {
			return t, false, nil
		}
		return x.UTC(), true, nil
	case string:
		if x == "" {
			return t, false, nil
		}
		for _, l := range timeLayouts {
			if t, err := time.Parse(l, x); err == nil {
				return t.UTC(), true, nil
			}
		}
		return t, false, fmt.Errorf("%q is not a time (want RFC 3339, e.g. 2026-01-02T15:04:05Z)", x)
	case int64:
		return time.Unix(x, 0).UTC(), true, nil
	case float64:
		sec, frac := math.Modf(x)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true, nil
	}
	return t, false, &kindError{v: v, want: "a time"}
}

// jsonValue converts expression results to JSON-compatible values.
func jsonValue(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case map[string]any:
		out := maps.Clone(x)
		for k, e := range out {
			out[k] = jsonValue(e)
		}
		return out
	}
	return v
}

// Decode decodes one JSON value the way items are decoded everywhere:
// integers as int64 (ids stay exact), other numbers as float64. It uses
// goccy/go-json, a drop-in encoding/json that decodes several times faster:
// decoding upstream pages is the syncer's largest CPU cost.
func Decode(data []byte) (any, error) {
	dec := gojson.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON value")
	}
	if err != nil {
		// Malformed input is rare: decode again with encoding/json for its
		// precise error (a *json.SyntaxError with the offset of the problem).
		return nil, decodeError(data, err)
	}
	return Numbers(v), nil
}

func decodeError(data []byte, fast error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the JSON value at offset %d", dec.InputOffset())
	}
	return fast
}

// Numbers replaces json.Number values in v by int64 or float64.
func Numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f

	case []any:
		for i, e := range x {
			switch e.(type) {
			case json.Number:
				x[i] = Numbers(e)
			case []any, map[string]any:
				Numbers(e) // in place
			}
		}
	case map[string]any:
		// Only numbers are assigned: storing every value back would cost a
		// map assignment per key.
		for k, e := range x {
			switch e.(type) {
			case json.Number:
				x[k] = Numbers(e)
			case []any, map[string]any:
				Numbers(e) // in place
			}
		}
	}
	return v
}
