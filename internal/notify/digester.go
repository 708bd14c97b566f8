package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/modelspec"
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
	// Summarizer writes the briefings of summarized digests
	// (digest.summarize); nil summarizes none. Defaults to nil
	// (SummarizerFrom builds it over the evaluator's Briefer).
	Summarizer *Summarizer
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
	backoff := service.LoopBackoff()
	for {
		if _, err := g.RunDue(ctx); err != nil && ctx.Err() == nil {
			wait := backoff.Next()
			g.logger.Error("build digests", "error", err, "retry_in", wait)
			if !service.RetrySleep(ctx, wait) {
				return nil
			}
		} else {
			backoff.Reset()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunDue folds every held match whose period ended into summaries and
// returns how many summaries it created. The summary of a summarized
// watch (digest.summarize) waits for its briefing, which the model writes
// outside any transaction, bounded by two model timeouts: the briefing,
// or the reason it is missing, is cached by the Summarizer, and the
// matches are then folded with it. A briefing another replica is writing
// is left for a later run.
func (g *Digester) RunDue(ctx context.Context) (int, error) {
	total := 0
	briefs := map[string]*preparedBrief{}
	for {
		n, more, err := g.batch(ctx, briefs)
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

// ref names the group's period in model_calls.input_ref (the same for
// every sink: the briefing cache serves the other sinks).
func (grp *digestGroup) ref() string {
	return "digest:" + grp.source + "/" + grp.watch + "/" + grp.dueAt.UTC().Format(time.RFC3339)
}

// key names the group among the briefs of one run.
func (grp *digestGroup) key() string { return grp.ref() + "/" + grp.sink }

// preparedBrief is the briefing of a group, written before the group is
// folded, and the input hash it was written for.
type preparedBrief struct {
	res   modelspec.BriefResult
	tries int
}

// briefTries bounds how often a group is briefed again because its items
// changed between the briefing and the fold.
const briefTries = 3

var urgencyRank = map[string]int{"low": 1, "medium": 2, "high": 3}

// batch folds one batch of held rows; more reports that another batch may
// have work (a full batch, or briefings written for groups left held).
func (g *Digester) batch(ctx context.Context, briefs map[string]*preparedBrief) (created int, more bool, err error) {
	var waiting []*digestGroup
	err = pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		created, waiting = 0, nil
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
			d, err := g.digestOf(grp)
			if err != nil {
				return err
			}
			if sw := g.conf.Summarizer.watch(g.composer, grp.source, grp.watch); sw != nil {
				p := briefs[grp.key()]
				switch {
				case p == nil:
					waiting = append(waiting, grp)
					continue
				case p.res.Briefing != nil && p.res.InputHash != sw.q.InputHash(grp.source, grp.watch, briefItems(d.data.Items, sw.q.MaxItems)):
					// Matches joined the period while the model wrote.
					if p.tries < briefTries {
						waiting = append(waiting, grp)
						continue
					}
					d.missing(fmt.Sprintf("the digest's items kept changing while the model wrote its briefing (%d tries)", p.tries))
				default:
					d.brief(&p.res)
				}
			}
			if err := g.fold(ctx, tx, grp, d); err != nil {
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
	// The model writes outside the transaction: no row stays locked while
	// it thinks. The groups are folded by the next batch.
	briefed := false
	for _, grp := range waiting {
		if err := g.prepare(ctx, grp, briefs); err != nil {
			if ctx.Err() != nil {
				return created, false, nil
			}
			g.logger.Error("write digest briefing", "source", grp.source, "watch", grp.watch, "sink", grp.sink, "error", err)
			continue
		}
		if briefs[grp.key()] != nil {
			briefed = true
		}
	}
	// Without progress (only groups whose briefing another replica is
	// writing), wait for the next run instead of spinning.
	return created, (more && created > 0) || briefed, nil
}

// prepare asks the summarizer for grp's briefing and keeps it in briefs;
// a briefing another replica is writing is not kept (a later run asks
// again).
func (g *Digester) prepare(ctx context.Context, grp *digestGroup, briefs map[string]*preparedBrief) error {
	sw := g.conf.Summarizer.watch(g.composer, grp.source, grp.watch)
	d, err := g.digestOf(grp)
	if err != nil {
		return err
	}
	p := briefs[grp.key()]
	res, err := g.conf.Summarizer.briefer.Brief(ctx, &modelspec.BriefRequest{
		Source: grp.source, Watch: grp.watch, Ref: grp.ref(), Question: sw.q, Items: briefItems(d.data.Items, sw.q.MaxItems), Budget: sw.budget,
	})
	if err != nil {
		return err
	}
	if res.Busy {
		g.logger.Debug("digest briefing is being written by another replica", "source", grp.source, "watch", grp.watch)
		return nil
	}
	if p == nil {
		p = &preparedBrief{}
		briefs[grp.key()] = p
	}
	p.res, p.tries = res, p.tries+1
	if res.Missing != "" {
		g.logger.Warn("digest goes out without a summary", "source", grp.source, "watch", grp.watch,
			"reason", res.Missing, "model_calls", res.Calls)
	}
	return nil
}

// digest is a group's summary being built.
type digest struct {
	data    *DigestData
	payload *PayloadDigest
	urgency string
	ids     []int64
}

// digestOf reads the members of grp into the summary's data and payload.
func (g *Digester) digestOf(grp *digestGroup) (*digest, error) {
	d := &digest{
		data:    &DigestData{Watch: WatchData{Name: grp.watch}, Source: grp.source, Sink: grp.sink, Count: len(grp.rows), DueAt: grp.dueAt},
		payload: &PayloadDigest{Count: len(grp.rows), DueAt: grp.dueAt},
		urgency: "low",
		ids:     make([]int64, len(grp.rows)),
	}
	for i, r := range grp.rows {
		d.ids[i] = r.ID
		if urgencyRank[r.Urgency] > urgencyRank[d.urgency] {
			d.urgency = r.Urgency
		}
		if i >= MaxDigestItems {
			continue
		}
		var p Payload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return nil, fmt.Errorf("notification %d payload: %w", r.ID, err)
		}
		conf := 0.0
		if p.Confidence != nil {
			conf = *p.Confidence
		}
		d.data.Items = append(d.data.Items, DigestItem{NotificationID: r.ID, Title: r.Title, Record: p.Record, Change: p.Change,
			Verdict: Verdict{Urgency: r.Urgency, Reason: r.Reason, Confidence: conf}, CreatedAt: r.CreatedAt})
		d.payload.Items = append(d.payload.Items, PayloadDigestItem{NotificationID: r.ID, DedupeKey: p.DedupeKey, Title: r.Title,
			Record: p.Record, Change: p.Change, Urgency: r.Urgency, Reason: r.Reason, CreatedAt: r.CreatedAt})
	}
	d.data.More = len(grp.rows) - len(d.data.Items)
	return d, nil
}

// missing marks the summary as summarized without a briefing.
func (d *digest) missing(reason string) {
	d.data.SummaryMissing, d.payload.SummaryMissing = reason, reason
}

// brief puts the briefing res (or why it is missing) into the summary.
// Every cited record is one of the items (semantic.ParseBriefing checked
// it against the items the model was shown); a citation that matches no
// listed item would be dropped here, never invented. Only grounded
// sentences are in res (semantic.ParseBriefing dropped the others); the
// drop is said in a line that never quotes them.
func (d *digest) brief(res *modelspec.BriefResult) {
	if res.Briefing == nil {
		d.missing(res.Missing)
		return
	}
	newest := map[string]int{}
	for i, it := range d.data.Items {
		newest[it.Record.ID] = i // items are oldest first
	}
	bd := &BriefingData{Headline: res.Briefing.Headline}
	if n := res.Briefing.Dropped; n > 0 {
		bd.Dropped = modelspec.DroppedNote(n)
	}
	pb := &PayloadBriefing{Headline: res.Briefing.Headline, HeadlineCitations: slices.Clone(res.Briefing.HeadlineCitations),
		Items: []PayloadBriefingItem{}, DroppedSentences: res.Briefing.Dropped, Model: res.Model,
		ModelDigest: res.ModelDigest, PromptVersion: res.PromptVersion, ModelCallID: res.ModelCallID}
	if pb.HeadlineCitations == nil {
		pb.HeadlineCitations = []string{}
	}
	cited := map[string]bool{}
	for _, c := range res.Briefing.Items {
		i, ok := newest[c.RecordID]
		if !ok {
			continue
		}
		cited[c.RecordID] = true
		it := d.data.Items[i]
		bd.Items = append(bd.Items, BriefingItemData{DigestItem: it, WhyItMatters: c.WhyItMatters})
		pb.Items = append(pb.Items, PayloadBriefingItem{RecordID: c.RecordID, NotificationID: it.NotificationID, WhyItMatters: c.WhyItMatters})
	}
	for _, it := range d.data.Items {
		if !cited[it.Record.ID] {
			d.data.Uncited = append(d.data.Uncited, it)
		}
	}
	d.data.Briefing, d.payload.Briefing = bd, pb
}

// fold inserts the summary d of grp and marks its members digested.
func (g *Digester) fold(ctx context.Context, tx pgx.Tx, grp *digestGroup, d *digest) error {
	title, body, rerr := g.composer.ComposeDigest(d.data)
	if rerr != nil {
		g.logger.Warn("render digest", "source", grp.source, "watch", grp.watch, "sink", grp.sink, "error", rerr)
	}
	key := fmt.Sprintf("digest/%s/%s/%s/%s/%d", grp.source, grp.watch, grp.sink, grp.dueAt.UTC().Format(time.RFC3339), d.ids[0])
	reason := fmt.Sprintf("%d match(es) of watch %s until %s", len(grp.rows), grp.watch, grp.dueAt.UTC().Format(time.RFC3339))
	owner := grp.rows[0].Owner
	p := Payload{DedupeKey: key, Kind: KindDigest, Watch: d.data.Watch.Name, Source: grp.source, Owner: owner, Title: title, Body: body,
		Change: PayloadChange{Kind: KindDigest, ChangedFields: []string{}}, Urgency: d.urgency, Reason: reason,
		CreatedAt: time.Now().UTC(), Digest: d.payload}
	dueAt := grp.dueAt
	res, err := outbox.Enqueue(ctx, tx, []outbox.Notification{{
		DedupeKey: key, Sink: grp.sink, Source: grp.source, Watch: grp.watch, Owner: owner, Kind: outbox.KindDigest,
		Title: title, Body: body, Urgency: d.urgency, Reason: reason, Payload: p.Marshal(),
		DigestDueAt: &dueAt, DigestCount: len(grp.rows),
	}})
	if err != nil {
		return fmt.Errorf("insert digest %s: %w", key, err)
	}
	id := res[0].ID
	if err := outbox.MarkDigested(ctx, tx, d.ids, id); err != nil {
		return err
	}
	g.logger.Info("digest created", "source", grp.source, "watch", grp.watch, "sink", grp.sink,
		"notification_id", id, "dedupe_key", key, "items", len(grp.rows),
		"briefing", d.data.Briefing != nil, "summary_missing", d.data.SummaryMissing)
	return nil
}
