package syncer

import (
	"context"
	"log/slog"
)

// sourceHandler is the log handler of a source's connector and transport:
// the syncer's handler with source=name first in every record. It holds
// two words and the name, where Logger.With would keep a copy of the
// handler's formatted attributes per source; the attribute is added when
// a record is logged, which a source rarely does.
type sourceHandler struct {
	slog.Handler
	source string
}

// sourceLogger returns the logger of source name over h.
func sourceLogger(h slog.Handler, name string) *slog.Logger {
	return slog.New(&sourceHandler{Handler: h, source: name})
}

// Handle passes r on with source=name before its own attributes, where
// Logger.With("source", name) would have put it.
func (h *sourceHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(slog.String("source", h.source))
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, out)
}

// WithAttrs and WithGroup leave the compact form: source=name goes
// before the attributes and the group, as with Logger.With.
func (h *sourceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.Handler.WithAttrs(append([]slog.Attr{slog.String("source", h.source)}, attrs...))
}

// WithGroup: see WithAttrs.
func (h *sourceHandler) WithGroup(name string) slog.Handler {
	return h.Handler.WithAttrs([]slog.Attr{slog.String("source", h.source)}).WithGroup(name)
}
