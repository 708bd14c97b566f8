package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
)

// Notification is a claimed outbox row.
type Notification struct {
	ID        int64
	DedupeKey string
	Sink      string
	Source    string
	RecordID  string
	Watch     string
	Title     string
	Body      string
	Urgency   string
	Reason    string
	// Payload is the stored payload with NotificationID filled in.
	Payload Payload
	// Attempt is 1 on the first delivery attempt.
	Attempt int
}

// Sink delivers notifications to one channel.
//
// Deliver is called with a context bounded by the sink's timeout. It returns
// nil when the channel accepted the notification. A *PermanentError means
// retrying cannot help (a 4xx answer, a rejected address): the row becomes
// dead at once. A *RetryAfterError asks for no retry before its time. Any
// other error is retried with exponential backoff until the sink's
// max_attempts, then the row is dead. Deliver may see the same notification
// more than once (a crash after sending, before recording): every channel
// receives the dedupe key to recognise repeats.
type Sink interface {
	Deliver(ctx context.Context, n *Notification) error
}

// PermanentError is a delivery failure that retrying cannot fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryAfterError is a failure whose receiver named when to retry.
type RetryAfterError struct {
	At  time.Time
	Err error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.At.UTC().Format(time.RFC3339))
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// SinkFactory builds a sink from its configuration.
type SinkFactory func(cfg *config.Sink, logger *slog.Logger) (Sink, error)

// sinkFactories maps sink types to factories.
var sinkFactories = map[string]SinkFactory{
	"log": func(_ *config.Sink, logger *slog.Logger) (Sink, error) { return &LogSink{Logger: logger}, nil },
}

// BuildSinks builds every sink of the global configuration.
func BuildSinks(g *config.Global, logger *slog.Logger) (map[string]Sink, error) {
	out := map[string]Sink{}
	var errs []error
	for name, sc := range g.Sinks {
		f := sinkFactories[sc.Type]
		if f == nil {
			errs = append(errs, g.Errorf("sinks."+name+".type", "%q is not supported by this build", sc.Type))
			continue
		}
		s, err := f(sc, logger.With("sink", name))
		if err != nil {
			errs = append(errs, g.Errorf("sinks."+name, "%v", err))
			continue
		}
		out[name] = s
	}
	return out, errors.Join(errs...)
}

// LogSink writes notifications to the log: the sink of the offline demo.
type LogSink struct {
	Logger *slog.Logger
}

// Deliver logs the notification at info level.
func (s *LogSink) Deliver(_ context.Context, n *Notification) error {
	s.Logger.Info("notification",
		"notification_id", n.ID, "dedupe_key", n.DedupeKey, "source", n.Source, "record_id", n.RecordID,
		"watch", n.Watch, "title", n.Title, "urgency", n.Urgency, "reason", n.Reason,
		"url", n.Payload.Record.URL, "change", n.Payload.Change.Kind, "changed_fields", n.Payload.Change.ChangedFields,
		"attempt", n.Attempt)
	return nil
}

func decodePayload(id int64, raw []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("notification %d payload: %w", id, err)
	}
	p.NotificationID = id
	return p, nil
}
