// Package log is the log sink type (type: log): it writes notifications to
// the evaluator's log, the sink of the offline demo. It has no keys of its
// own (docs/delivery.md, "### log").
package log

import (
	"context"
	"log/slog"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/notify"
)

// Settings are the keys of a log sink: none.
type Settings struct{}

func init() {
	notify.Register("log", Decode, func(_ *config.Sink, _ Settings, env notify.Env) (notify.Sink, error) {
		return &Sink{Logger: env.Logger}, nil
	})
}

// Decode reads the keys of a log sink: any key besides the common ones is
// an error.
func Decode(s *config.Sink) (Settings, error) {
	var st Settings
	return st, s.DecodeBlock(&st)
}

// Sink writes notifications to the log.
type Sink struct {
	Logger *slog.Logger
}

var _ notify.Sink = (*Sink)(nil)

// Deliver logs the notification at info level.
func (s *Sink) Deliver(_ context.Context, n *notify.Notification) error {
	s.Logger.Info("notification",
		"notification_id", n.ID, "dedupe_key", n.DedupeKey, "kind", n.Kind, "source", n.Source, "record_id", n.RecordID,
		"watch", n.Watch, "title", n.Title, "body", n.Body, "urgency", n.Urgency, "reason", n.Reason,
		"url", n.Payload.Record.URL, "change", n.Payload.Change.Kind, "changed_fields", n.Payload.Change.ChangedFields,
		"attempt", n.Attempt, "delivery_id", n.DeliveryID)
	return nil
}
