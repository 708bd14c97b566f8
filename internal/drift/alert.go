package drift

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/outbox"
)

// AlertType is the alert type of a drift alert (payload alert.type).
const AlertType = "model_drift"

// DedupeKey is the key of the drift alert of a watch and week: one
// alert per watch per week, whichever replica or pass finds it.
func DedupeKey(source, watch string, week time.Time) string {
	return "alert/" + AlertType + "/" + source + "/" + watch + "/" + week.UTC().Format(time.DateOnly)
}

// Check compares the previous and the current week of every watch with
// its baseline and writes a drift alert (outbox, kind alert) for each
// week that drifted, to Config.Notify, once per watch per week (the
// dedupe key). It returns the alert notifications written.
func (s *Service) Check(ctx context.Context) (int, error) {
	if len(s.conf.Notify) == 0 {
		return 0, nil
	}
	reports, err := Report(ctx, s.pool, s.conf.settings(), ReportQuery{Weeks: 2, Now: s.conf.Now()})
	if err != nil {
		return 0, err
	}
	var rows []outbox.Notification
	now := time.Now().UTC()
	for _, r := range reports {
		for _, w := range r.Weeks {
			if !w.Drifted {
				continue
			}
			key := DedupeKey(r.Source, r.Watch, w.Start)
			title := fmt.Sprintf("[drift] %s/%s: the model's reasons moved %.3f from the baseline week", r.Source, r.Watch, *w.Distance)
			var b strings.Builder
			fmt.Fprintf(&b, "Week of %s: cosine distance %.3f between the centroid of %d reason embeddings and the baseline week of %s (threshold %.3f).",
				w.Start.Format(time.DateOnly), *w.Distance, w.Embedded, r.BaselineWeek.Format(time.DateOnly), r.Threshold)
			if w.Spread != nil && r.BaselineSpread != nil {
				fmt.Fprintf(&b, " Spread %.3f (baseline %.3f).", *w.Spread, *r.BaselineSpread)
			}
			if w.NotifyRate != nil {
				fmt.Fprintf(&b, " Notify rate %.1f%% of %d judged.", 100**w.NotifyRate, w.Judged)
			}
			for _, c := range w.ModelChanges {
				fmt.Fprintf(&b, " Model %s changed digest %s → %s at %s.", c.Model, c.From, c.To, c.At.Format(time.RFC3339))
			}
			details := map[string]any{"week": w.Start.Format(time.DateOnly), "distance": *w.Distance, "threshold": r.Threshold,
				"baseline_week": r.BaselineWeek.Format(time.DateOnly), "embedded": w.Embedded, "model_changes": w.ModelChanges}
			since := w.Start
			p := notify.Payload{
				DedupeKey: key, Kind: notify.KindAlert, Watch: r.Watch, Source: r.Source, Title: title, Body: b.String(),
				Record:  notify.PayloadRecord{ID: "", Title: r.Source + "/" + r.Watch},
				Change:  notify.PayloadChange{ChangedFields: []string{}},
				Urgency: "medium", Reason: AlertType, CreatedAt: now,
				Alert: &notify.PayloadAlert{Type: AlertType, Subject: r.Source + "/" + r.Watch, Since: &since, Details: details},
			}
			payload := p.Marshal()
			for _, sink := range s.conf.Notify {
				rows = append(rows, outbox.Notification{DedupeKey: key, Sink: sink, Source: r.Source, Watch: r.Watch,
					Kind: outbox.KindAlert, Title: title, Body: b.String(), Urgency: "medium", Reason: AlertType,
					Payload: payload, Status: outbox.StatusPending})
			}
		}
	}
	if len(rows) == 0 {
		return 0, nil
	}
	written := 0
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res, err := outbox.EnqueueNew(ctx, tx, rows)
		if err != nil {
			return err
		}
		for i, r := range res {
			if r.Inserted {
				written++
				s.logger.Warn("model drift alert raised", "source", rows[i].Source, "watch", rows[i].Watch,
					"dedupe_key", rows[i].DedupeKey, "sink", rows[i].Sink)
			}
		}
		if written > 0 {
			return outbox.Wake(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("write drift alerts: %w", err)
	}
	return written, nil
}
