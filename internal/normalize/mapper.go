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
// the record's Raw; pass nil to marshal item. Its steps, each a method of
// one call's state (mapping): the standard fields (fields, times), the
// extra object and the raw JSON, encoded once (encodeExtra), the text
// PostgreSQL cannot store repaired (repair), the snapshot (snapshot), then
// the hashes.
func (m *Mapper) Map(item any, raw json.RawMessage) (Record, error) {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	s := mapping{m: m, item: item, raw: raw, sc: sc}
	s.obj, _ = item.(map[string]any)
	if s.obj != nil {
		s.keys, s.values = sortedEntries(s.obj, sc.vals)
		sc.vals = s.values
		s.lay = m.layoutFor(s.keys)
	}
	if err := s.fields(); err != nil {
		return s.r, err
	}
	if err := s.encodeExtra(); err != nil {
		return s.r, err
	}
	s.repair()
	s.snapshot()
	m.hasher.hashSnapshot(&s.r)
	return s.r, nil
}

// mapping is the state of one Map call, in the order its steps fill it.
type mapping struct {
	m    *Mapper
	item any
	raw  json.RawMessage
	sc   *scratch
	// obj is the item as an object (nil otherwise), keys and values its
	// entries in canonical order, lay where the fields' keys are among
	// them.
	obj    map[string]any
	keys   []string
	values []any
	lay    *layout
	// vals are the standard fields' values before conversion (fieldNames'
	// order).
	vals [9]any
	r    Record
	// b is the scratch buffer. The canonical extra object is encoded once,
	// into b[es:ee], and the snapshot copies it; when the mapper encodes
	// the raw JSON itself (ownRaw) it is at b[rs:re], and the extra keys'
	// encodings are copied from it. valueSpans: sc.vspans locates the
	// item's values in b.
	b              []byte
	ownRaw         bool
	rs, re, es, ee int
	valueSpans     bool
	// clean: the mapper encoded the raw JSON and it holds no U+FFFD, so no
	// text in the item had invalid UTF-8 or NUL (Canonical would have
	// replaced it by U+FFFD).
	clean bool
}

// fields sets the record's standard fields from the item: each by its
// expression, or by its key of the item.
func (s *mapping) fields() error {
	m, r := s.m, &s.r
	for i := range s.vals {
		if p := m.std[i]; p != nil {
			v, err := p.Run(s.item)
			if err != nil {
				return &FieldError{RecordID: r.ID, Field: fieldNames[i], Err: err}
			}
			s.vals[i] = v
		} else if s.lay != nil && s.lay.field[i] >= 0 {
			s.vals[i] = s.values[s.lay.field[i]]
		}
		if i == 0 {
			id, err := idString(s.vals[0])
			if err != nil {
				return m.noID(s.item, err)
			}
			r.ID = id
		}
	}
	var err error
	str := func(i int) string {
		v, e := stringValue(s.vals[i])
		if e != nil && err == nil {
			err = m.fieldError(r.ID, i, e)
		}
		return v
	}
	r.Title, r.Body, r.URL, r.Author, r.Status = str(1), str(2), str(3), str(4), str(5)
	if err != nil {
		return err
	}
	if r.Labels, err = labelsValue(s.vals[6]); err != nil {
		return m.fieldError(r.ID, 6, err)
	}
	return s.times()
}

// times sets the record's created and updated times.
func (s *mapping) times() error {
	r := &s.r
	created, hasCreated, err := parseTimeValue(s.vals[7])
	if err != nil {
		return s.m.fieldError(r.ID, 7, err)
	}
	var updated time.Time
	var hasUpdated bool
	if c, ok := s.vals[7].(string); ok && c != "" && s.vals[8] == any(c) {
		updated, hasUpdated = created, hasCreated // the same text: parsed once
	} else if updated, hasUpdated, err = parseTimeValue(s.vals[8]); err != nil {
		return s.m.fieldError(r.ID, 8, err)
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
	return nil
}

// encodeExtra sets the record's extra object and encodes it into the
// scratch buffer, with the item's raw JSON when the mapper encodes it.
func (s *mapping) encodeExtra() error {
	s.b = s.sc.buf[:0]
	s.ownRaw = s.raw == nil && s.obj != nil
	switch {
	case s.m.extra != nil:
		return s.encodeMappedExtra()
	case s.obj != nil && s.ownRaw:
		s.encodeItemAndExtra()
	case s.obj != nil:
		s.encodeUnconsumed()
	default:
		s.es = len(s.b)
		s.b = append(s.b, "{}"...)
		s.ee = len(s.b)
	}
	return nil
}

// encodeMappedExtra is encodeExtra for fields.extra's expressions.
func (s *mapping) encodeMappedExtra() error {
	r := &s.r
	r.Extra = make(map[string]any, len(s.m.extra))
	for k, p := range s.m.extra {
		v, err := p.Run(s.item)
		if err != nil {
			return &FieldError{RecordID: r.ID, Field: "extra." + k, Err: err}
		}
		r.Extra[k] = jsonValue(v)
	}
	b := s.b
	if s.ownRaw {
		s.rs = len(b)
		b = AppendCanonical(b, s.obj)
		s.re = len(b)
	}
	s.es = len(b)
	b = AppendCanonical(b, r.Extra)
	s.ee = len(b)
	s.b = b
	return nil
}

// encodeItemAndExtra is encodeExtra for an object item whose raw JSON the
// mapper encodes: Canonical(item), noting where each extra key's
// "key":value is, and where each value is; then the extra object copied
// out of it.
func (s *mapping) encodeItemAndExtra() {
	r, lay, sc := &s.r, s.lay, s.sc
	r.Extra = make(map[string]any, lay.extra)
	b := s.b
	spans := sc.spans[:0]
	vspans := sc.vspans[:0]
	s.rs = len(b)
	b = append(b, '{')
	for i, k := range s.keys {
		if i > 0 {
			b = append(b, ',')
		}
		ks := len(b)
		b = appendString(b, k)
		b = append(b, ':')
		vs := len(b)
		v := s.values[i]
		b = AppendCanonical(b, v)
		vspans = append(vspans, span{vs, len(b)})
		if !lay.consumed[i] {
			r.Extra[k] = v
			spans = append(spans, span{ks, len(b)})
		}
	}
	b = append(b, '}')
	s.re = len(b)
	s.es = len(b)
	b = append(b, '{')
	for i, sp := range spans {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, b[sp.start:sp.end]...)
	}
	b = append(b, '}')
	s.ee = len(b)
	sc.spans, sc.vspans = spans, vspans
	s.valueSpans = true
	s.b = b
}

// encodeUnconsumed is encodeExtra for an object item with its raw JSON
// given: the keys no field consumed.
func (s *mapping) encodeUnconsumed() {
	r, lay := &s.r, s.lay
	r.Extra = make(map[string]any, lay.extra)
	b := s.b
	s.es = len(b)
	b = append(b, '{')
	for i, k := range s.keys {
		if lay.consumed[i] {
			continue
		}
		if len(r.Extra) > 0 {
			b = append(b, ',')
		}
		v := s.values[i]
		r.Extra[k] = v
		b = appendString(b, k)
		b = append(b, ':')
		b = AppendCanonical(b, v)
	}
	b = append(b, '}')
	s.ee = len(b)
	s.b = b
}

// repair makes the raw JSON and the record's text storable in PostgreSQL
// (no invalid UTF-8, no NUL, no lone surrogate), marking the record
// Repaired when the item's text had to change.
func (s *mapping) repair() {
	r, item := &s.r, s.item
	switch {
	case s.ownRaw:
		// Canonical replaced what PostgreSQL cannot store; if it did, the
		// replacement character is in its output (rarely otherwise).
		s.clean = !bytes.Contains(s.b[s.rs:s.re], replacementChar)
		r.Repaired = !s.clean && !storable(item)
	case s.raw == nil:
		s.raw = Canonical(item)
		r.Repaired = bytes.Contains(s.raw, replacementChar) && !storable(item)
	case !utf8.Valid(s.raw) || bytes.Contains(s.raw, []byte(`\u0000`)):
		// PostgreSQL's jsonb refuses invalid UTF-8 and \u0000; Canonical
		// replaces them.
		s.raw = Canonical(item)
		r.Repaired = !storable(item)
	case bytes.Contains(s.raw, []byte(`\ud`)) || bytes.Contains(s.raw, []byte(`\uD`)):
		// A lone surrogate escape (the decoder made it U+FFFD) is refused
		// by jsonb too; a valid pair is re-encoded as the character.
		s.raw = Canonical(item)
	}
	if s.clean && s.m.textFromItem {
		return
	}
	fix := func(t string) string {
		if c, ok := storableText(t); !ok {
			r.Repaired = true
			return c
		}
		return t
	}
	r.ID = fix(r.ID)
	r.Title, r.Body, r.URL, r.Author, r.Status = fix(r.Title), fix(r.Body), fix(r.URL), fix(r.Author), fix(r.Status)
	for i, l := range r.Labels {
		r.Labels[i] = fix(l)
	}
}

// snapshot encodes the record's snapshot after the raw JSON, when the
// mapper encoded it, and copies both out of the scratch buffer into one
// allocation. Fields whose value is a string (or a list of strings) of
// the item, unchanged, are encoded in the raw JSON already: the snapshot
// copies them.
func (s *mapping) snapshot() {
	r, lay := &s.r, s.lay
	var pre [9]span
	if s.valueSpans {
		texts := [...]string{r.ID, r.Title, r.Body, r.URL, r.Author, r.Status}
		for i, t := range texts {
			if j := lay.field[i]; s.m.std[i] == nil && j >= 0 && s.vals[i] == any(t) {
				pre[i] = s.sc.vspans[j]
			}
		}
		if j := lay.field[6]; s.m.std[6] == nil && j >= 0 && sameStrings(s.vals[6], r.Labels) {
			pre[6] = s.sc.vspans[j]
		}
	}
	b := s.b
	ss := len(b)
	var xs int
	b, xs = r.appendSnapshotExtra(b, b[s.es:s.ee], &pre)
	se := len(b)
	s.sc.buf = b
	var out []byte
	if s.ownRaw {
		out = make([]byte, s.re-s.rs+se-ss)
		n := copy(out, b[s.rs:s.re])
		copy(out[n:], b[ss:se])
		r.Raw = out[:n:n]
		out = out[n:]
	} else {
		out = make([]byte, se-ss)
		copy(out, b[ss:se])
		r.Raw = s.raw
	}
	r.Snapshot = out
	n := s.ee - s.es
	r.ExtraJSON = out[xs-ss : xs-ss+n : xs-ss+n]
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

// DecodeObject decodes a JSON object (a record snapshot) the way items are
// decoded (Decode: integers stay exact).
func DecodeObject(data []byte) (map[string]any, error) {
	v, err := Decode(data)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want an object, got %T", v)
	}
	return m, nil
}

// DecodeSnapshots decodes a change's record snapshot and its previous one
// (DecodeObject), each nil when absent; an error names which.
func DecodeSnapshots(rec, prev []byte) (record, previous map[string]any, err error) {
	if rec != nil {
		if record, err = DecodeObject(rec); err != nil {
			return nil, nil, fmt.Errorf("record snapshot: %w", err)
		}
	}
	if prev != nil {
		if previous, err = DecodeObject(prev); err != nil {
			return nil, nil, fmt.Errorf("previous snapshot: %w", err)
		}
	}
	return record, previous, nil
}

// Decode decodes one JSON value the way items are decoded everywhere:
// integers that fit an int64 as int64 (ids stay exact), other numbers as
// float64. Decoding upstream pages is the syncer's largest CPU cost: it
// decodes with jsontext's tokenizer (fastDecode), which gives the values
// of the reference path (FuzzDecodeMatchesReference) in about half its
// time and with half its allocations, and with the reference path what
// fastDecode does not take (decoded twice, then: rare input such as
// invalid UTF-8), whose value or error it returns.
func Decode(data []byte) (any, error) {
	if v, ok := fastDecode(data); ok {
		return v, nil
	}
	return referenceDecode(data)
}

// referenceDecode is Decode's reference path: goccy/go-json, a drop-in
// encoding/json, with UseNumber, then Numbers. Its errors are the ones
// Decode reports.
func referenceDecode(data []byte) (v any, err error) {
	defer func() {
		if recover() != nil {
			// goccy/go-json's stream decoder panics on some input (an index
			// out of range in its buffer, on invalid UTF-8 that
			// FuzzDecodeMatchesReference found): encoding/json, slower,
			// decodes it instead, and a page cannot stop the process.
			v, err = decodeStream(json.NewDecoder(bytes.NewReader(data)), data)
		}
	}()
	return decodeStream(gojson.NewDecoder(bytes.NewReader(data)), data)
}

// streamDecoder is what goccy/go-json's and encoding/json's decoders
// share.
type streamDecoder interface {
	UseNumber()
	Decode(v any) error
	More() bool
}

// decodeStream decodes data, the one JSON value dec reads, with UseNumber,
// then Numbers. Malformed input is rare: its error is decodeError's,
// encoding/json's precise one (a *json.SyntaxError with the offset of the
// problem).
func decodeStream(dec streamDecoder, data []byte) (any, error) {
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON value")
	}
	if err != nil {
		return nil, decodeError(data, err)
	}
	return Numbers(v), nil
}

// DecodeEach decodes each of datas, every one a JSON value, as Decode
// does, in one run of the decoder over them all (as the elements of one
// array): a decoder for each small value cost more than its decoding (the
// extras of a drain's snapshots; docs/benchmarks.md, (4) on branch
// eval-go). It fails, without saying which value is wrong, when the whole
// does not decode to len(datas) values: the caller then decodes each
// alone for the error of the one that fails.
func DecodeEach(datas [][]byte) ([]any, error) {
	n := 2
	for _, d := range datas {
		n += len(d) + 1
	}
	buf := make([]byte, 0, n)
	buf = append(buf, '[')
	for i, d := range datas {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, d...)
	}
	buf = append(buf, ']')
	v, err := Decode(buf)
	if err != nil {
		return nil, err
	}
	if vs, ok := v.([]any); ok && len(vs) == len(datas) {
		return vs, nil
	}
	return nil, fmt.Errorf("%d JSON values decoded as one array do not give %d values", len(datas), len(datas))
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
