package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler is a slog.Handler that redacts secrets in the message and in
// every string attribute (errors and fmt.Stringers are turned into their
// redacted text, groups are walked) before passing the record on.
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
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs redacts attrs and returns a handler that adds them.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return &Handler{next: h.next.WithAttrs(red), r: h.r}
}

// WithGroup returns a handler that opens group.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), r: h.r}
}

func (h *Handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, ga := range g {
			red[i] = h.attr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(red...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, h.r.String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, h.r.String(x.String()))
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
