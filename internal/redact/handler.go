package redact

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
)

// Handler is a slog.Handler that redacts secrets in the message and in
// every string attribute (errors and fmt.Stringers are turned into their
// redacted text, groups are walked) before passing the record on. It
// never panics, whatever the values (see attr).
type Handler struct {
	next slog.Handler
	r    *Redactor
}

var _ slog.Handler = (*Handler)(nil)

// NewHandler wraps next. With a nil r it returns next itself.
func NewHandler(next slog.Handler, r *Redactor) slog.Handler {
	if r == nil {
		return next
	}
	return &Handler{next: next, r: r}
}

// Enabled reports whether the wrapped handler handles level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle redacts rec and passes it on.
func (h *Handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		if a = h.attr(a); !empty(a) {
			out.AddAttrs(a)
		}
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs redacts attrs and returns a handler that adds them.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, 0, len(attrs))
	for _, a := range attrs {
		if a = h.attr(a); !empty(a) {
			red = append(red, a)
		}
	}
	return &Handler{next: h.next.WithAttrs(red), r: h.r}
}

// WithGroup returns a handler that opens group.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), r: h.r}
}

// attr returns a redacted: its value resolved (a LogValuer that panics
// becomes the error slog.Value.Resolve reports), strings, errors,
// Stringers, *string and byte slices redacted, groups walked. It never panics: a
// nil pointer, map, slice or func in an any is logged as nil (so a
// handler after this one never calls a method on it), and an Error or
// String method that panics is logged as the panic, redacted.
func (h *Handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, 0, len(g))
		for _, ga := range g {
			// Empty attributes are left out, as handlers must ignore
			// them: a group holding only empty ones makes Go 1.26's JSON
			// handler write invalid JSON (a missing comma after it).
			if ga = h.attr(ga); !empty(ga) {
				red = append(red, ga)
			}
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(red...)}
	case slog.KindAny:
		x := v.Any()
		if isNil(x) {
			return slog.Attr{Key: a.Key, Value: slog.AnyValue(nil)}
		}
		switch x := x.(type) {
		case error:
			return slog.String(a.Key, h.r.String(text(x, "Error", x.Error)))
		case fmt.Stringer:
			return slog.String(a.Key, h.r.String(text(x, "String", x.String)))
		case *string:
			return slog.String(a.Key, h.r.String(*x))
		case []byte:
			return slog.String(a.Key, h.r.String(string(x)))
		case []string:
			red := make([]string, len(x))
			for i, s := range x {
				red[i] = h.r.String(s)
			}
			return slog.Any(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// empty reports whether a is the zero Attr, which handlers ignore.
func empty(a slog.Attr) bool {
	return a.Key == "" && a.Value.Kind() == slog.KindAny && a.Value.Any() == nil
}

// isNil reports whether x is nil or holds a nil pointer, map, slice,
// channel, func or interface.
func isNil(x any) bool {
	if x == nil {
		return true
	}
	switch rv := reflect.ValueOf(x); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// text calls x's method fn (Error or String); a panic in it is returned
// as text, as fmt prints it.
func text(x any, method string, fn func() string) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprintf("%%!v(PANIC=%s method: %v)", method, r)
		}
	}()
	return fn()
}
