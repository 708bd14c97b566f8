package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/service"
)

// DigesterConfig are the digester's typed settings.
type DigesterConfig struct {
	// PollInterval is how often it looks for digest periods that ended
	// (delivery.poll_interval). Defaults to 1s.
	PollInterval time.Duration
	// BatchSize bounds the matches folded in one transaction. Defaults to
	// 5000 (DigestBatchDefault).
	BatchSize int
	// OnDigest, when set, is called with the number of summaries created
	// (the delivery wake-up).
	OnDigest func(n int)
}

// Digester turns the matches of digest watches into summaries. A match of
// a digest watch is stored as a 'held' notifications row with
// digest_due_at, the schedule tick that ends its period. When that time
// has come, the digester locks the held rows (FOR UPDATE SKIP LOCKED, so
// any number of evaluator replicas may run it), inserts one 'pending'
// summary row per (source, watch, sink, period) — kind 'digest', dedupe
// key digest/<source>/<watch>/<sink>/<period end>/<first member id> — and
// marks the members 'digested' with digest_id pointing at the summary, all
// in one transaction. The summary is then delivered like any notification.
type Digester struct {
	pool     *pgxpool.Pool
	composer *Composer
	conf     DigesterConfig
	logger   *slog.Logger
	loop     service.Loop
}

// DigestBatchDefault is the digester's BatchSize unless a caller sets one.
const DigestBatchDefault = 5000

// DigesterConfigFrom returns the digester settings of lookout.yaml's
// delivery block, with the defaults the config loader applied. OnDigest is
// left for the caller.
func DigesterConfigFrom(g *config.Global) DigesterConfig {
	return DigesterConfig{PollInterval: g.Delivery.PollInterval, BatchSize: DigestBatchDefault}
}

// NewDigester returns a digester that renders summaries with composer.
func NewDigester(p *pgxpool.Pool, composer *Composer, conf DigesterConfig, logger *slog.Logger) *Digester {
	return &Digester{pool: p, composer: composer, conf: conf, logger: logger.With("component", "digester")}
}

// Start runs the digester in the background until Stop.
func (g *Digester) Start(ctx context.Context) error { return g.loop.Start(ctx, g.run) }

// Stop stops the digester and waits for it.
func (g *Digester) Stop() error { return g.loop.Stop() }

func (g *Digester) run(ctx context.Context) error {
	t := time.NewTicker(g.conf.PollInterval)
	defer t.Stop()
	for {
		if _, err := g.RunDue(ctx); err != nil && ctx.Err() == nil {
			g.logger.Error("build digests", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunDue folds every held match whose period ended into summaries and
// returns how many summaries it created.
func (g *Digester) RunDue(ctx context.Context) (int, error) {
	total := 0
	for {
		n, more, err := g.batch(ctx)
		total += n
		if n > 0 && g.conf.OnDigest != nil {
			g.conf.OnDigest(n)
		}
		if err != nil || !more {
			return total, err
		}
	}
}

type digestGroup struct {
	source, watch, sink string
	dueAt               time.Time
	rows                []*outbox.Held
}

var urgencyRank = map[string]int{"low": 1, "medium": 2, "high": 3}

// batch folds one batch of held rows; more reports a full batch.
func (g *Digester) batch(ctx context.Context) (created int, more bool, err error) {
	err = pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		held, err := outbox.LockDueHeld(ctx, tx, g.conf.BatchSize)
		if err != nil {
			return err
		}
		var groups []*digestGroup
		for i := range held {
			r := &held[i]
			last := len(groups) - 1
			if last < 0 || groups[last].source != r.Source || groups[last].watch != r.Watch ||
				groups[last].sink != r.Sink || !groups[last].dueAt.Equal(r.DueAt) {
				groups = append(groups, &digestGroup{source: r.Source, watch: r.Watch, sink: r.Sink, dueAt: r.DueAt})
				last++
			}
			groups[last].rows = append(groups[last].rows, r)
		}
		more = len(held) == g.conf.BatchSize
		for _, grp := range groups {
			if err := g.fold(ctx, tx, grp); err != nil {
				return err
			}
			created++
		}
		if created > 0 {
			return outbox.Wake(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	return created, more, nil
}

// fold inserts the summary of grp and marks its members digested.
func (g *Digester) fold(ctx context.Context, tx pgx.Tx, grp *digestGroup) error {
	data := &DigestData{Watch: WatchData{Name: grp.watch}, Source: grp.source, Sink: grp.sink,
		Count: len(grp.rows), DueAt: grp.dueAt}
	pd := &PayloadDigest{Count: len(grp.rows), DueAt: grp.dueAt}
	urgency := "low"
	ids := make([]int64, len(grp.rows))
	for i, r := range grp.rows {
		ids[i] = r.ID
		if urgencyRank[r.Urgency] > urgencyRank[urgency] {
			urgency = r.Urgency
		}
		if i >= MaxDigestItems {
			continue
		}
		var p Payload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return fmt.Errorf("notification %d payload: %w", r.ID, err)
		}
		conf := 0.0
		if p.Confidence != nil {
			conf = *p.Confidence
		}
		data.Items = append(data.Items, DigestItem{NotificationID: r.ID, Title: r.Title, Record: p.Record, Change: p.Change,
			Verdict: Verdict{Urgency: r.Urgency, Reason: r.Reason, Confidence: conf}, CreatedAt: r.CreatedAt})
		pd.Items = append(pd.Items, PayloadDigestItem{NotificationID: r.ID, DedupeKey: p.DedupeKey, Title: r.Title,
			Record: p.Record, Change: p.Change, Urgency: r.Urgency, Reason: r.Reason, CreatedAt: r.CreatedAt})
	}
	data.More = len(grp.rows) - len(data.Items)
	title, body, rerr := g.composer.ComposeDigest(data)
	if rerr != nil {
		g.logger.Warn("render digest", "source", grp.source, "watch", grp.watch, "sink", grp.sink, "error", rerr)
	}
	key := fmt.Sprintf("digest/%s/%s/%s/%s/%d", grp.source, grp.watch, grp.sink, grp.dueAt.UTC().Format(time.RFC3339), ids[0])
	reason := fmt.Sprintf("%d match(es) of watch %s until %s", len(grp.rows), grp.watch, grp.dueAt.UTC().Format(time.RFC3339))
	p := Payload{DedupeKey: key, Kind: KindDigest, Watch: data.Watch.Name, Source: grp.source, Title: title, Body: body,
		Change: PayloadChange{Kind: KindDigest, ChangedFields: []string{}}, Urgency: urgency, Reason: reason,
		CreatedAt: time.Now().UTC(), Digest: pd}
	dueAt := grp.dueAt
	res, err := outbox.Enqueue(ctx, tx, []outbox.Notification{{
		DedupeKey: key, Sink: grp.sink, Source: grp.source, Watch: grp.watch, Kind: outbox.KindDigest,
		Title: title, Body: body, Urgency: urgency, Reason: reason, Payload: p.Marshal(),
		DigestDueAt: &dueAt, DigestCount: len(grp.rows),
	}})
	if err != nil {
		return fmt.Errorf("insert digest %s: %w", key, err)
	}
	id := res[0].ID
	if err := outbox.MarkDigested(ctx, tx, ids, id); err != nil {
		return err
	}
	g.logger.Info("digest created", "source", grp.source, "watch", grp.watch, "sink", grp.sink,
		"notification_id", id, "dedupe_key", key, "items", len(grp.rows))
	return nil
}
