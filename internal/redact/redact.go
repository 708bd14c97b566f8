// Package redact hides configured secret values in text that is stored or
// logged: error messages written to the database and log records. The
// configuration loader collects the values of every ${ENV} reference it
// expands; an upstream or a sink that echoes one of them back in an error
// body then shows [REDACTED] instead.
package redact

import (
	"cmp"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Mask replaces a secret value.
const Mask = "[REDACTED]"

// MinLen is the shortest value redacted: shorter values ("1", "yes",
// "443") would hide common substrings of every message, and are not
// secrets worth the name.
const MinLen = 4

// Redactor replaces known secret values. A nil *Redactor redacts nothing.
// It is safe for concurrent use; Add grows it while it is in use (the
// credentials of sources created through the API are learnt when the
// daemons open them).
type Redactor struct {
	mu    sync.Mutex // serializes Add
	state atomic.Pointer[redactorState]
}

// redactorState is one immutable set of values and its replacer.
type redactorState struct {
	values   []string
	replacer *strings.Replacer
}

// New returns a redactor of values. Values shorter than MinLen bytes are
// ignored. Besides each value as written, its URL-query, URL-path and JSON
// string escapings are redacted, so that a secret is also hidden where an
// error quotes a URL or a JSON body.
func New(values ...string) *Redactor {
	r := NewGrowable(values...)
	if r.Len() == 0 {
		return nil
	}
	return r
}

// NewGrowable is New, but it returns a redactor even when no value is
// worth hiding yet, so that values found later can be added (Add) and
// every holder of the pointer hides them from then on.
func NewGrowable(values ...string) *Redactor {
	r := &Redactor{}
	r.state.Store(newState(nil, values))
	return r
}

// Add hides values too (values shorter than MinLen are ignored, as with
// New). It does nothing on a nil redactor.
func (r *Redactor) Add(values ...string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.state.Load()
	fresh := false
	for _, v := range values {
		if len(v) >= MinLen && !slices.Contains(cur.values, v) {
			fresh = true
			break
		}
	}
	if fresh {
		r.state.Store(newState(cur.values, values))
	}
}

func newState(known, values []string) *redactorState {
	set := map[string]bool{}
	for _, v := range known {
		set[v] = true
	}
	for _, v := range values {
		if len(v) < MinLen {
			continue
		}
		set[v] = true
		set[url.QueryEscape(v)] = true
		set[url.PathEscape(v)] = true
		if b, err := json.Marshal(v); err == nil {
			set[string(b[1:len(b)-1])] = true
		}
	}
	all := make([]string, 0, len(set))
	for v := range set {
		all = append(all, v)
	}
	// Longest first: where two values match at one place, the longer wins.
	slices.SortFunc(all, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	pairs := make([]string, 0, 2*len(all))
	for _, v := range all {
		pairs = append(pairs, v, Mask)
	}
	return &redactorState{values: all, replacer: strings.NewReplacer(pairs...)}
}

// Len is how many distinct strings (values and their escapings) r hides.
func (r *Redactor) Len() int {
	if r == nil {
		return 0
	}
	return len(r.state.Load().values)
}

// String returns s with every secret value replaced by Mask. A message
// cut short (a body snippet) may end inside a secret: a start of a value,
// MinLen bytes or longer, at the end of s or just before an ellipsis ("…")
// is replaced too.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	st := r.state.Load()
	if len(st.values) == 0 {
		return s
	}
	var b strings.Builder
	for rest := s; ; {
		i := strings.Index(rest, ellipsis)
		if i < 0 {
			b.WriteString(st.cutTail(rest))
			break
		}
		b.WriteString(st.cutTail(rest[:i]))
		b.WriteString(ellipsis)
		rest = rest[i+len(ellipsis):]
	}
	return st.replacer.Replace(b.String())
}

const ellipsis = "…"

// cutTail masks a start of a value that s ends with.
func (r *redactorState) cutTail(s string) string {
	best := 0
	for _, v := range r.values {
		for n := min(len(v)-1, len(s)); n >= MinLen && n > best; n-- {
			if strings.HasSuffix(s, v[:n]) {
				best = n
				break
			}
		}
	}
	if best == 0 {
		return s
	}
	return s[:len(s)-best] + Mask
}

// Error returns err with a redacted message; errors.Is and errors.As see
// the original chain. It returns nil for nil.
func (r *Redactor) Error(err error) error {
	if r == nil || err == nil {
		return err
	}
	if _, ok := err.(*redactedError); ok {
		return err
	}
	return &redactedError{err: err, r: r}
}

type redactedError struct {
	err error
	r   *Redactor
}

func (e *redactedError) Error() string { return e.r.String(e.err.Error()) }
func (e *redactedError) Unwrap() error { return e.err }
