package syncer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/changes"
	"github.com/lookout-dev/lookout/internal/connectors"
	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/inbound"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/service"
)

// Defaults of EventsConfig.
const (
	EventsBatchDefault       = 100
	EventsLeaseDefault       = time.Minute
	EventsMaxAttemptsDefault = 8
	EventsCatchUpDefault     = 5 * time.Second
)

// eventsBackoff spaces the retries of an event whose mapping failed (an
// upstream error while fetching the full object).
var eventsBackoff = service.Backoff{Min: 5 * time.Second, Max: 10 * time.Minute}

// EventsConfig are the settings of the webhook events processor; zero
// values take the defaults above.
type EventsConfig struct {
	// Batch is the most events claimed (and written in one transaction
	// per source) at once. Defaults to 100.
	Batch int
	// Lease is how long a claim of events lasts before another replica
	// may take them. Defaults to 1m.
	Lease time.Duration
	// MaxAttempts is how many claims an event gets before it is marked
	// failed (the reconciliation poll repairs what it carried). Defaults
	// to 8.
	MaxAttempts int
	// CatchUp is how often the processor looks for events without a
	// notification (retries falling due, a lost NOTIFY). Defaults to 5s.
	CatchUp time.Duration
}

// Events is the syncer's service that mirrors stored webhook events
// (inbound_events) into records and changes: it LISTENs on
// <schema>.inbound (a wake-up the ingest sends), claims unprocessed
// events of the sources this replica runs (SKIP LOCKED, a lease), maps
// each through the source's connector (connectors.EventMapper, which may
// fetch the full object within the source's rate limits) and mapping,
// and writes them with the same changes writer as a poll, one
// transaction per source and batch, in which the events are marked
// processed. Any number of replicas may run it.
type Events struct {
	s        *Syncer
	conf     EventsConfig
	logger   *slog.Logger
	loop     service.Loop
	listener *db.Listener

	mu      sync.Mutex
	splitOf struct { // the last split, and the names it was made of
		first          *string
		n              int
		direct, leased []string
	}
}

// Events returns the webhook events processor of s.
func (s *Syncer) Events(conf EventsConfig) *Events {
	if conf.Batch <= 0 {
		conf.Batch = EventsBatchDefault
	}
	if conf.Lease <= 0 {
		conf.Lease = EventsLeaseDefault
	}
	if conf.MaxAttempts <= 0 {
		conf.MaxAttempts = EventsMaxAttemptsDefault
	}
	if conf.CatchUp <= 0 {
		conf.CatchUp = EventsCatchUpDefault
	}
	return &Events{s: s, conf: conf, logger: s.logger.With("component", "events")}
}

// Start LISTENs for the ingest's wake-ups and processes events in the
// background until Stop: on every wake-up, on every (re)connect, and
// every CatchUp.
func (e *Events) Start(ctx context.Context) error {
	schema, err := db.CurrentSchema(ctx, e.s.pool)
	if err != nil {
		return fmt.Errorf("start events processor: %w", err)
	}
	e.listener = db.NewListener(e.s.pool, inbound.Channel(schema), e.logger)
	if err := e.listener.Start(ctx); err != nil {
		return fmt.Errorf("start events processor: %w", err)
	}
	if err := e.loop.Start(ctx, e.run); err != nil {
		_ = e.listener.Stop()
		return err
	}
	return nil
}

// Stop ends the processor and waits for a batch in progress; it is
// idempotent and safe on a processor never started.
func (e *Events) Stop() error {
	err := e.loop.Stop()
	if e.listener != nil {
		err = errors.Join(err, e.listener.Stop())
	}
	return err
}

// Done is closed when the processor's loop ended.
func (e *Events) Done() <-chan struct{} { return e.loop.Done() }

// Listening reports whether the LISTEN connection is up (for readiness).
func (e *Events) Listening() bool { return e.listener != nil && e.listener.Connected() }

func (e *Events) run(ctx context.Context) error {
	t := time.NewTicker(e.conf.CatchUp)
	defer t.Stop()
	backoff := service.LoopBackoff()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.listener.Wake():
		case <-t.C:
		}
		if _, err := e.Drain(ctx); err != nil && ctx.Err() == nil {
			wait := backoff.Next()
			e.logger.Error("process webhook events", "error", err, "retry_in", wait)
			if !service.RetrySleep(ctx, wait) {
				return nil
			}
		} else {
			backoff.Reset()
		}
	}
}

// Drain processes the claimable events of the sources this replica runs
// until none is left, and returns how many it finished (an event given
// back for a retry is not finished).
//
// The events of a source whose connector maps no event itself (the
// payload is the item: nothing to ask upstream) are claimed by their row
// locks in the very transaction that writes their records and marks them
// processed (inbound.Lock): no lease is written and no commit made before
// the write. Events that may need an upstream request (a connector that
// is a connectors.EventMapper, such as github's) are claimed with a lease
// first, so that no transaction stays open across the request. Of a
// leased batch, the events whose payload carries their item (FetchKey
// "") are written first, each source's in its own transaction, and then
// the events that fetch, one MapEvent per object (see mapAll). When a
// direct transaction fails, its events take the leased path, which counts
// attempts and retries with backoff.
func (e *Events) Drain(ctx context.Context) (int, error) {
	total := 0
	for {
		direct, leased := e.split(e.s.claimable())
		progressed := false
		if len(direct) > 0 {
			n, err := e.directBatch(ctx, direct)
			total += n
			switch {
			case ctx.Err() != nil:
				return total, ctx.Err()
			case err != nil:
				e.logger.Warn("mirror webhook events in one transaction; retrying them with a lease", "error", e.s.conf.Redactor.Error(err))
				leased = append(append([]string(nil), leased...), direct...)
			case n > 0:
				progressed = true
			}
		}
		if len(leased) > 0 {
			evs, err := inbound.Claim(ctx, e.s.pool, e.s.conf.Owner, leased, e.conf.Batch, e.conf.Lease)
			if err != nil {
				return total, err
			}
			// The events whose payload carries their item are written
			// first, every source's, each source's in its own
			// transaction: they never wait for a fetch of the batch.
			var fetching [][]inbound.Event
			for start := 0; start < len(evs); {
				end := start + 1
				for end < len(evs) && evs[end].Source == evs[start].Source {
					end++
				}
				carried, fetch := e.splitFetching(evs[start:end])
				if len(carried) > 0 {
					total += e.processSource(ctx, carried)
				}
				if len(fetch) > 0 {
					fetching = append(fetching, fetch)
				}
				start = end
			}
			for _, fetch := range fetching {
				total += e.processSource(ctx, fetch)
			}
			progressed = progressed || len(evs) > 0
		}
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
		if !progressed {
			return total, nil
		}
	}
}

// split divides the names of the sources to claim into those whose
// events are mirrored in one transaction (their connector is no
// connectors.EventMapper) and those claimed with a lease. The result is
// kept while the syncer's list of names is the same slice.
func (e *Events) split(names []string) (direct, leased []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(names) == e.splitOf.n && (len(names) == 0 || &names[0] == e.splitOf.first) {
		return e.splitOf.direct, e.splitOf.leased
	}
	for _, n := range names {
		src := e.s.runnable(n)
		if src == nil {
			continue
		}
		if _, maps := src.conn.(connectors.EventMapper); maps {
			leased = append(leased, n)
		} else {
			direct = append(direct, n)
		}
	}
	e.splitOf.n, e.splitOf.direct, e.splitOf.leased = len(names), direct, leased
	e.splitOf.first = nil
	if len(names) > 0 {
		e.splitOf.first = &names[0]
	}
	return direct, leased
}

// splitFetching divides claimed events of one source into those whose
// payload carries their item (no upstream request) and those the
// connector completes with a fetch (connectors.EventMapper.FetchKey), in
// their order. Events of a source this replica no longer runs are all
// "carried": processSource gives them back.
func (e *Events) splitFetching(evs []inbound.Event) (carried, fetch []inbound.Event) {
	src := e.s.runnable(evs[0].Source)
	if src == nil {
		return evs, nil
	}
	em, ok := src.conn.(connectors.EventMapper)
	if !ok {
		return evs, nil
	}
	for _, ev := range evs {
		if ce, err := connectorEvent(&ev); err == nil && em.FetchKey(ce) != "" {
			fetch = append(fetch, ev)
		} else {
			carried = append(carried, ev)
		}
	}
	return carried, fetch
}

// directBatch mirrors up to a batch of events of the sources of names in
// one transaction: it locks them (the claim), maps them, writes their
// records per source (sources in name order, so that two replicas never
// wait on each other's source locks) and marks them processed. It returns
// how many events it finished.
func (e *Events) directBatch(ctx context.Context, names []string) (int, error) {
	type group struct {
		name     string
		logger   *slog.Logger
		st       changes.Stats
		finished []inbound.Result
	}
	var groups []*group
	err := pgx.BeginFunc(ctx, e.s.pool, func(tx pgx.Tx) error {
		groups = nil
		evs, err := inbound.Lock(ctx, tx, names, e.conf.Batch)
		if err != nil || len(evs) == 0 {
			return err
		}
		bySource := map[string][]inbound.Event{}
		for _, ev := range evs {
			bySource[ev.Source] = append(bySource[ev.Source], ev)
		}
		order := make([]string, 0, len(bySource))
		for n := range bySource {
			order = append(order, n)
		}
		slices.Sort(order)
		var all []inbound.Result
		for _, name := range order {
			src := e.s.runnable(name)
			if src == nil {
				continue // no longer this replica's: left pending, unlocked at the end
			}
			g := &group{name: name, logger: e.logger.With("source", name)}
			items, results, retries := e.mapAll(withRunStats(ctx, &runStats{}), src, bySource[name])
			if len(retries) > 0 {
				return fmt.Errorf("map webhook events of %s: %w", name, retries[0].err)
			}
			outcomes, err := e.write(ctx, tx, src, items, &g.st)
			if err != nil {
				return err
			}
			g.finished = append(results, outcomes...)
			all = append(all, g.finished...)
			groups = append(groups, g)
		}
		return inbound.FinishLocked(ctx, tx, all)
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, g := range groups {
		e.mirrored(g.logger, g.name, g.st, g.finished, 0)
		n += len(g.finished)
	}
	return n, nil
}

// mapped is one record an event brings.
type mapped struct {
	ev      *inbound.Event
	rec     normalize.Record
	deleted bool
}

// processSource maps and writes claimed events of one source; it
// returns how many it finished.
func (e *Events) processSource(ctx context.Context, evs []inbound.Event) int {
	name := evs[0].Source
	logger := e.logger.With("source", name)
	owner := e.s.conf.Owner
	src := e.s.runnable(name)
	if src == nil {
		ids := make([]int64, len(evs))
		for i := range evs {
			ids[i] = evs[i].ID
		}
		if _, err := inbound.Release(context.WithoutCancel(ctx), e.s.pool, owner, ids, 0, "", e.conf.MaxAttempts+len(evs)); err != nil {
			logger.Warn("give back events of a source this replica does not run", "error", err)
		}
		return 0
	}
	ctx = withRunStats(ctx, &runStats{})
	items, results, retries := e.mapAll(ctx, src, evs)

	var st changes.Stats
	var finished []inbound.Result
	err := pgx.BeginFunc(ctx, e.s.pool, func(tx pgx.Tx) error {
		st = changes.Stats{}
		outcomes, err := e.write(ctx, tx, src, items, &st)
		if err != nil {
			return err
		}
		finished = append(append(finished[:0], results...), outcomes...)
		return inbound.Finish(ctx, tx, owner, finished)
	})
	if err != nil {
		if errors.Is(err, inbound.ErrClaimLost) {
			logger.Warn("claim of webhook events lost to another replica; its writes were rolled back")
			return 0
		}
		ids := make([]int64, len(evs))
		for i := range evs {
			ids[i] = evs[i].ID
		}
		retries = []retry{{ids: ids, after: eventsBackoff.Delay(evs[0].Attempts), err: err}}
		finished = nil
	}
	for _, r := range retries {
		failed, rerr := inbound.Release(context.WithoutCancel(ctx), e.s.pool, owner, r.ids, r.after,
			e.s.conf.Redactor.String(errText(r.err)), e.conf.MaxAttempts)
		if rerr != nil {
			logger.Warn("give back webhook events for a retry", "error", rerr)
			continue
		}
		if ctx.Err() == nil {
			logger.Warn("webhook event not mirrored; retrying later", "event_ids", r.ids, "retry_in", r.after.Round(time.Second),
				"error", e.s.conf.Redactor.Error(r.err))
		}
		if len(failed) > 0 {
			logger.Error("webhook events failed after every attempt; the reconciliation poll repairs what they carried",
				"event_ids", failed, "error", e.s.conf.Redactor.Error(r.err))
			e.s.conf.Metrics.WebhookProcessed(inbound.OutcomeFailed, len(failed))
		}
	}
	e.mirrored(logger, name, st, finished, len(evs)-len(finished))
	return len(finished)
}

// mirrored counts and logs the events of source name that a committed
// transaction finished; retrying is how many of its claimed events were
// given back.
func (e *Events) mirrored(logger *slog.Logger, name string, st changes.Stats, finished []inbound.Result, retrying int) {
	if len(finished) == 0 {
		return
	}
	e.s.conf.Metrics.RecordsChanged(e.s.connectorOf(name), st.Created, st.Updated, st.Deleted)
	byOutcome := map[string]int{}
	for _, r := range finished {
		byOutcome[r.Outcome]++
	}
	for o, n := range byOutcome {
		e.s.conf.Metrics.WebhookProcessed(o, n)
	}
	logger.Debug("webhook events mirrored", "events", len(finished), "created", st.Created, "updated", st.Updated,
		"unchanged", st.Unchanged, "deleted", st.Deleted, "retrying", retrying)
}

// retry is events to give back for a retry after a delay.
type retry struct {
	ids   []int64
	after time.Duration
	err   error
}

// mapAll maps claimed events of src: the records they bring, the events
// finished without a record (ignored, or refused by the mapping:
// failed) and the events to retry (an upstream error while fetching).
// Events that fetch the same object (connectors.EventMapper.FetchKey)
// are mapped with one MapEvent call, of the latest of them: one request
// per object and batch, whose items and outcome every one of them gets
// (the writer keeps the latest event's record and marks the others
// superseded).
func (e *Events) mapAll(ctx context.Context, src *source, evs []inbound.Event) ([]mapped, []inbound.Result, []retry) {
	var results []inbound.Result
	var items []mapped
	var retries []retry
	em, _ := src.conn.(connectors.EventMapper)
	var units [][]*inbound.Event // events mapped together, in order of their first
	byKey := map[string]int{}
	decoded := make(map[int64]connectors.Event, len(evs))
	for i := range evs {
		ev := &evs[i]
		key := ""
		if ce, err := connectorEvent(ev); err == nil {
			decoded[ev.ID] = ce
			if em != nil {
				key = em.FetchKey(ce)
			}
		}
		if j, ok := byKey[key]; ok && key != "" {
			units[j] = append(units[j], ev)
			continue
		}
		if key != "" {
			byKey[key] = len(units)
		}
		units = append(units, []*inbound.Event{ev})
	}
	for _, unit := range units {
		ev := unit[len(unit)-1] // the latest: its request is the one made
		ids := make([]int64, len(unit))
		for i, u := range unit {
			ids[i] = u.ID
		}
		res, recs, err := e.mapUnit(ctx, src, ev, decoded[ev.ID])
		if reason, ok := connectors.IsIgnored(err); ok {
			for _, u := range unit {
				results = append(results, inbound.Result{ID: u.ID, Outcome: inbound.OutcomeIgnored, Detail: reason})
			}
			continue
		}
		var ie *connectors.ItemError
		if err != nil && !errors.As(err, &ie) {
			if ctx.Err() != nil {
				retries = append(retries, retry{ids: ids, err: err})
				continue
			}
			after := eventsBackoff.Delay(ev.Attempts)
			var rl *connectors.RetryLaterError
			if errors.As(err, &rl) {
				after = max(rl.RetryAt.Sub(e.s.conf.Now()), time.Second)
			}
			retries = append(retries, retry{ids: ids, after: after, err: err})
			continue
		}
		if err == nil && len(res.Items) == 0 {
			for _, u := range unit {
				results = append(results, inbound.Result{ID: u.ID, Outcome: inbound.OutcomeIgnored, Detail: "the event carries no item"})
			}
			continue
		}
		if err != nil {
			// A payload the mapping refuses is refused the same way next time.
			for _, u := range unit {
				results = append(results, inbound.Result{ID: u.ID, Outcome: inbound.OutcomeFailed, Detail: e.s.conf.Redactor.String(errText(err))})
			}
			continue
		}
		for _, u := range unit {
			for _, r := range recs {
				items = append(items, mapped{ev: u, rec: r, deleted: res.Deleted})
			}
		}
	}
	return items, results, retries
}

// mapUnit maps event ev (ce is ev decoded, or zero) into records: the
// connector's items (mapEvent), each through the source's mapping; an
// item the mapping refuses is an *connectors.ItemError. A panic in the
// connector or the mapping is one too, logged with its stack: the
// event's payload made it, and would again, so the event fails instead
// of the process (which would claim it again at its next start).
func (e *Events) mapUnit(ctx context.Context, src *source, ev *inbound.Event, ce connectors.Event) (res connectors.EventResult, recs []normalize.Record, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, recs = connectors.EventResult{}, nil
			err = &connectors.ItemError{Loc: "event " + ev.DeliveryID, Err: e.s.connectorPanic(p, "the event's mapping",
				"source", src.name, "event_id", ev.ID, "delivery_id", ev.DeliveryID)}
		}
	}()
	if res, err = e.mapEvent(ctx, src, ev, ce); err != nil {
		return res, nil, err
	}
	for _, it := range res.Items {
		r, err := src.mapper.Map(it.Value, it.Raw)
		if err != nil {
			return res, nil, &connectors.ItemError{Loc: it.Loc, Err: err}
		}
		recs = append(recs, r)
	}
	return res, recs, nil
}

// mapEvent turns a stored event into items (ce is ev decoded, or zero): through the connector when
// it is an EventMapper (github), else by the Standard Webhooks payload
// convention ({"type", "timestamp", "data"}: data is the item; a payload
// without data is the item itself).
func (e *Events) mapEvent(ctx context.Context, src *source, ev *inbound.Event, ce connectors.Event) (connectors.EventResult, error) {
	if ce.Payload == nil { // not decoded: say why
		var err error
		if ce, err = connectorEvent(ev); err != nil {
			return connectors.EventResult{}, err
		}
	}
	if em, ok := src.conn.(connectors.EventMapper); ok {
		return em.MapEvent(ctx, ce)
	}
	var item any = ce.Payload
	if data, ok := ce.Payload["data"].(map[string]any); ok {
		item = data
	}
	return connectors.EventResult{Items: []connectors.Item{{Value: item, Raw: normalize.Canonical(item), Loc: "event " + ev.DeliveryID}}}, nil
}

// connectorEvent decodes a stored event for a connector; a payload that
// is not a JSON object is an *connectors.ItemError.
func connectorEvent(ev *inbound.Event) (connectors.Event, error) {
	v, err := normalize.Decode(ev.Payload)
	if err != nil {
		return connectors.Event{}, &connectors.ItemError{Loc: "event " + ev.DeliveryID, Err: err}
	}
	payload, ok := v.(map[string]any)
	if !ok {
		return connectors.Event{}, &connectors.ItemError{Loc: "event " + ev.DeliveryID, Err: errors.New("the payload is not a JSON object")}
	}
	return connectors.Event{Type: ev.Type, Action: ev.Action, Payload: payload, Raw: ev.Payload, DeliveryID: ev.DeliveryID}, nil
}

// storedRecord is what write reads of a stored record.
type storedRecord struct {
	hash    string
	updated *time.Time
	deleted bool
}

// outcomeRank orders an event's outcomes when it brings several records:
// the event takes the most telling one.
var outcomeRank = map[string]int{inbound.OutcomeCreated: 5, inbound.OutcomeUpdated: 4, inbound.OutcomeDeleted: 3,
	inbound.OutcomeUnchanged: 2, inbound.OutcomeStale: 1}

// write writes the records of items in tx, under the source's write lock
// (a poll of the source may run at once): per record id the latest
// object (updated_at, then the later event) wins, an object older than
// the stored record is stale (events arrive out of order), and the rest
// goes through changes.Apply and changes.Delete as a poll's would. It
// returns the outcome of every event of items.
func (e *Events) write(ctx context.Context, tx pgx.Tx, src *source, items []mapped, st *changes.Stats) ([]inbound.Result, error) {
	if len(items) == 0 {
		return nil, nil
	}
	name := src.name
	ids := make([]string, 0, len(items))
	winner := map[string]int{}
	for i, m := range items {
		j, seen := winner[m.rec.ID]
		if !seen {
			ids = append(ids, m.rec.ID)
		}
		if !seen || !older(m.rec.UpdatedAt, items[j].rec.UpdatedAt) {
			winner[m.rec.ID] = i
		}
	}
	// The source's write lock and the read of its records, in one round
	// trip.
	b := &pgx.Batch{}
	changes.QueueLock(b, name)
	b.Queue(`SELECT record_id, content_hash, external_updated_at, deleted_at IS NOT NULL
		FROM records WHERE source = $1 AND record_id = ANY ($2::text[])`, name, ids)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("lock the records of %s: %w", name, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("read the stored records of %s: %w", name, err)
	}
	stored := map[string]storedRecord{}
	for rows.Next() {
		var id string
		var r storedRecord
		if err := rows.Scan(&id, &r.hash, &r.updated, &r.deleted); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the stored records of %s: %w", name, err)
		}
		stored[id] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the stored records of %s: %w", name, err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("read the stored records of %s: %w", name, err)
	}

	type result struct{ outcome, detail string }
	byEvent := map[int64]result{}
	var order []int64
	set := func(id int64, outcome, detail string) {
		old, ok := byEvent[id]
		if !ok {
			order = append(order, id)
		}
		if !ok || outcomeRank[outcome] > outcomeRank[old.outcome] {
			byEvent[id] = result{outcome, detail}
		}
	}
	var upserts []normalize.Record
	var deletes []string
	for i, m := range items {
		s, exists := stored[m.rec.ID]
		live := exists && !s.deleted
		switch {
		case winner[m.rec.ID] != i:
			w := items[winner[m.rec.ID]].ev
			set(m.ev.ID, inbound.OutcomeStale, fmt.Sprintf("superseded by delivery %s in the same batch", w.DeliveryID))
		case exists && s.updated != nil && m.rec.UpdatedAt != nil &&
			(m.rec.UpdatedAt.Before(*s.updated) || (s.deleted && !m.deleted && !m.rec.UpdatedAt.After(*s.updated))):
			set(m.ev.ID, inbound.OutcomeStale, fmt.Sprintf("record %s is newer (updated_at %s) than the event's object (%s)",
				m.rec.ID, s.updated.UTC().Format(time.RFC3339), m.rec.UpdatedAt.UTC().Format(time.RFC3339)))
		case m.deleted && !live:
			set(m.ev.ID, inbound.OutcomeUnchanged, fmt.Sprintf("record %s is already deleted, or was never mirrored", m.rec.ID))
		case m.deleted:
			deletes = append(deletes, m.rec.ID)
			set(m.ev.ID, inbound.OutcomeDeleted, "")
		case live && s.hash == m.rec.Hash:
			set(m.ev.ID, inbound.OutcomeUnchanged, "")
		case live:
			upserts = append(upserts, m.rec)
			set(m.ev.ID, inbound.OutcomeUpdated, "")
		default:
			upserts = append(upserts, m.rec)
			set(m.ev.ID, inbound.OutcomeCreated, "")
		}
	}
	if len(upserts) > 0 {
		a, err := changes.Apply(ctx, tx, name, changes.NoRun, upserts, src.mapper.Hasher())
		if err != nil {
			return nil, err
		}
		st.Add(a)
	}
	if len(deletes) > 0 {
		d, err := changes.Delete(ctx, tx, name, changes.NoRun, deletes)
		if err != nil {
			return nil, err
		}
		st.Add(d)
	}
	out := make([]inbound.Result, 0, len(order))
	for _, id := range order {
		r := byEvent[id]
		out = append(out, inbound.Result{ID: id, Outcome: r.outcome, Detail: r.detail})
	}
	return out, nil
}

// older reports whether a is strictly before b (both known).
func older(a, b *time.Time) bool {
	return a != nil && b != nil && a.Before(*b)
}
