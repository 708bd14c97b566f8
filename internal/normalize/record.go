// Package normalize turns raw items from connectors into normalized records
// with a canonical-JSON SHA-256 content hash.
//
// A record's canonical form is a JSON object with the keys id, title, body,
// url, author, status, labels, created_at, updated_at and extra, encoded
// with sorted keys, times in RFC 3339 UTC and integers without exponent. The
// content hash covers that form minus the volatile paths a source names, so
// key order in the upstream payload never matters and a changing view
// counter need not count as a change.
package normalize

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Record is a normalized external item.
type Record struct {
	ID        string
	Title     string
	Body      string
	URL       string
	Author    string
	Status    string
	Labels    []string
	CreatedAt *time.Time
	UpdatedAt *time.Time
	// Extra holds the remaining fields, JSON-compatible values only.
	Extra map[string]any
	// Raw is the item as received, kept for audit in records.raw.
	Raw json.RawMessage
	// Hash is the content hash (hex SHA-256) set by Hasher.Hash.
	Hash string
	// Snapshot is the canonical JSON of Fields and ExtraJSON that of Extra,
	// both set by Hasher.Hash: what a change stores as the record's version,
	// and records.extra.
	Snapshot  []byte
	ExtraJSON []byte
	// Repaired is set by Mapper.Map when the item held text PostgreSQL
	// cannot store (invalid UTF-8, NUL), replaced by U+FFFD.
	Repaired bool
}

// Fields returns the canonical field map: the record as evaluator
// expressions and change snapshots see it.
func (r *Record) Fields() map[string]any {
	labels := r.Labels
	if labels == nil {
		labels = []string{}
	}
	extra := r.Extra
	if extra == nil {
		extra = map[string]any{}
	}
	return map[string]any{
		"id":         r.ID,
		"title":      r.Title,
		"body":       r.Body,
		"url":        r.URL,
		"author":     r.Author,
		"status":     r.Status,
		"labels":     labels,
		"created_at": timeValue(r.CreatedAt),
		"updated_at": timeValue(r.UpdatedAt),
		"extra":      extra,
	}
}

func timeValue(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Hasher computes content hashes, leaving out volatile paths.
type Hasher struct {
	volatile map[string]bool
}

// NewHasher returns a Hasher ignoring the given paths: top-level field names
// (updated_at) or extra keys (extra.views).
func NewHasher(volatile []string) (*Hasher, error) {
	h := &Hasher{volatile: map[string]bool{}}
	for _, p := range volatile {
		top, sub, nested := strings.Cut(p, ".")
		switch {
		case !nested && slices.Contains(fieldNames, top):
		case nested && top == "extra" && sub != "":
		default:
			return nil, &KeyError{Key: "volatile", Err: fmt.Errorf("%q is not a record field (one of %s, or extra.<key>)", p, strings.Join(fieldNames, ", "))}
		}
		h.volatile[p] = true
	}
	return h, nil
}

var fieldNames = []string{"id", "title", "body", "url", "author", "status", "labels", "created_at", "updated_at"}

// Hash sets r.Hash, r.Snapshot and r.ExtraJSON, and returns the hash.
func (h *Hasher) Hash(r *Record) string {
	r.Snapshot, r.ExtraJSON = r.appendSnapshot(make([]byte, 0, 512))
	h.hashSnapshot(r)
	return r.Hash
}

// hashSnapshot sets r.Hash from r.Snapshot, or from r's fields minus the
// volatile paths.
func (h *Hasher) hashSnapshot(r *Record) {
	if len(h.volatile) == 0 {
		r.Hash = hexSum(r.Snapshot)
		return
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	sc.buf = h.appendHashed(sc.buf[:0], r)
	r.Hash = hexSum(sc.buf)
}

// hexSum is the hex SHA-256 of b.
func hexSum(b []byte) string {
	sum := sha256.Sum256(b)
	var x [2 * sha256.Size]byte
	hex.Encode(x[:], sum[:])
	return string(x[:])
}

// appendHashed appends what the hash of r covers: the canonical JSON of
// r.Fields() without the volatile paths (top-level fields, and extra keys
// for extra.<key>), written without building the maps.
func (h *Hasher) appendHashed(b []byte, r *Record) []byte {
	b = append(b, '{')
	n := 0
	key := func(name string) bool {
		if h.volatile[name] {
			return false
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendString(b, name)
		b = append(b, ':')
		return true
	}
	str := func(name, v string) {
		if key(name) {
			b = appendString(b, v)
		}
	}
	tm := func(name string, t *time.Time) {
		if !key(name) {
			return
		}
		if t == nil {
			b = append(b, "null"...)
		} else {
			b = appendTime(b, *t)
		}
	}
	str("author", r.Author)
	str("body", r.Body)
	tm("created_at", r.CreatedAt)
	if key("extra") {
		b = append(b, '{')
		var stack [16]any
		keys, vals := sortedEntries(r.Extra, stack[:0])
		var pathBuf [64]byte
		m := 0
		for i, k := range keys {
			if h.volatile[string(append(append(pathBuf[:0], "extra."...), k...))] {
				continue
			}
			if m > 0 {
				b = append(b, ',')
			}
			m++
			b = appendString(b, k)
			b = append(b, ':')
			b = AppendCanonical(b, vals[i])
		}
		b = append(b, '}')
	}
	str("id", r.ID)
	if key("labels") {
		b = appendStrings(b, r.Labels) // nil encodes as []
	}
	str("status", r.Status)
	str("title", r.Title)
	tm("updated_at", r.UpdatedAt)
	str("url", r.URL)
	return append(b, '}')
}

// appendSnapshot appends Canonical(r.Fields()) without building the map:
// the keys in their sorted order. It returns the snapshot and the extra
// object within it.
func (r *Record) appendSnapshot(b []byte) (snapshot, extra []byte) {
	start := len(b)
	var extraJSON []byte
	if r.Extra == nil {
		extraJSON = []byte("{}")
	} else {
		extraJSON = Canonical(r.Extra)
	}
	b, xs := r.appendSnapshotExtra(b, extraJSON, nil)
	end := xs + len(extraJSON)
	return b[start:], b[xs:end:end]
}

// appendSnapshotExtra appends the snapshot of r with extraJSON, the
// canonical encoding of r.Extra, as its extra object, and returns where
// in b that object starts. pre, when set, holds where in b a field (by
// its index in fieldNames) is encoded already.
func (r *Record) appendSnapshotExtra(b, extraJSON []byte, pre *[9]span) ([]byte, int) {
	var at [9]span
	if pre != nil {
		at = *pre
	}
	field := func(i int, key, v string) {
		b = append(b, key...)
		if sp := at[i]; sp.end > sp.start {
			b = append(b, b[sp.start:sp.end]...)
		} else {
			b = appendString(b, v)
		}
	}
	tm := func(key string, t *time.Time) {
		b = append(b, key...)
		if t == nil {
			b = append(b, "null"...)
		} else {
			b = appendTime(b, *t)
		}
	}
	field(4, `{"author":`, r.Author)
	field(2, `,"body":`, r.Body)
	tm(`,"created_at":`, r.CreatedAt)
	b = append(b, `,"extra":`...)
	xs := len(b)
	b = append(b, extraJSON...)
	field(0, `,"id":`, r.ID)
	b = append(b, `,"labels":`...)
	switch sp := at[6]; {
	case sp.end > sp.start:
		b = append(b, b[sp.start:sp.end]...)
	case r.Labels == nil:
		b = append(b, "[]"...)
	default:
		b = appendStrings(b, r.Labels)
	}
	field(5, `,"status":`, r.Status)
	field(1, `,"title":`, r.Title)
	tm(`,"updated_at":`, r.UpdatedAt)
	field(3, `,"url":`, r.URL)
	b = append(b, '}')
	return b, xs
}

// ChangedFields lists the fields that differ between two canonical field
// maps: top-level names, and extra.<key> for extra keys. Volatile paths of
// h are left out. A nil old map means every non-empty field changed.
func (h *Hasher) ChangedFields(old, new map[string]any) []string {
	if old == nil {
		extra, _ := new["extra"].(map[string]any)
		out := make([]string, 0, len(fieldNames)+len(extra))
		for _, name := range fieldNames {
			if !h.volatile[name] && !isEmpty(new[name]) {
				out = append(out, name)
			}
		}
		out = h.appendExtraPaths(out, extra)
		if len(out) == 0 {
			return nil // as before: stored as NULL, not as an empty list
		}
		return out
	}
	var out []string
	for _, name := range fieldNames {
		if h.volatile[name] {
			continue
		}
		if !equalJSON(old[name], new[name]) {
			out = append(out, name)
		}
	}
	oe, _ := old["extra"].(map[string]any)
	ne, _ := new["extra"].(map[string]any)
	keys := map[string]bool{}
	for k := range oe {
		keys[k] = true
	}
	for k := range ne {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if h.volatileExtra(k) {
			continue
		}
		if !equalJSON(oe[k], ne[k]) {
			out = append(out, "extra."+k)
		}
	}
	return out
}

// appendExtraPaths appends "extra.<key>" for every key of extra, in key
// order, less the volatile ones: the extra part of a created record's
// changed fields.
func (h *Hasher) appendExtraPaths(out []string, extra map[string]any) []string {
	var stack [16]any
	keys, _ := sortedEntries(extra, stack[:0])
	for _, k := range keys {
		if !h.volatileExtra(k) {
			out = append(out, "extra."+k)
		}
	}
	return out
}

// volatileExtra reports whether extra key k is volatile; it is looked up
// as "extra.<key>" only when some path is volatile.
func (h *Hasher) volatileExtra(k string) bool {
	if len(h.volatile) == 0 {
		return false
	}
	var path [64]byte
	return h.volatile[string(append(append(path[:0], "extra."...), k...))]
}

// equalJSON compares two values as their canonical JSON, so that a snapshot
// read back from Postgres ([]any, float64) equals the freshly mapped value
// ([]string, int64).
func equalJSON(a, b any) bool {
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok && x == y {
			return true
		}
	}
	if reflect.DeepEqual(a, b) {
		return true
	}
	if isEmpty(a) && isEmpty(b) {
		return true
	}
	return string(Canonical(a)) == string(Canonical(b))
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []string:
		return len(x) == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
