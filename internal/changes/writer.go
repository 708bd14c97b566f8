// Package changes writes the record mirror and its append-only change log,
// and wakes consumers with NOTIFY.
//
// Apply is called inside the syncer's transaction for one page: it reads the
// stored hashes of the page's records in one query, skips records whose hash
// is unchanged, and writes the rest (records upsert, changes rows, one
// pg_notify) in one more round trip. An unchanged re-sync writes nothing.
// A created change stores no snapshot of the record (snapshot.go): the
// record holds it until it moves on.
package changes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/db"
	"github.com/lookout-dev/lookout/internal/normalize"
)

// Change kinds.
const (
	Created = "created"
	Updated = "updated"
	Deleted = "deleted"
)

// Stats counts what a write did. Repaired counts the seen records whose
// text was repaired (normalize.Record.Repaired).
type Stats struct {
	Seen, Created, Updated, Unchanged, Deleted, Repaired int
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	s.Seen += o.Seen
	s.Repaired += o.Repaired
	s.Created += o.Created
	s.Updated += o.Updated
	s.Unchanged += o.Unchanged
	s.Deleted += o.Deleted
}

// Changed is the number of changes written.
func (s Stats) Changed() int { return s.Created + s.Updated + s.Deleted }

type stored struct {
	hash    string
	version int
	deleted bool
}

// NoRun is the runID of writes that no run made (webhook events): the
// records' last_run_id and the changes' run_id are NULL.
const NoRun int64 = 0

func runArg(runID int64) any {
	if runID == NoRun {
		return nil
	}
	return runID
}

// lockKey is the first key of the per-source write lock; the second is
// the hash of the schema and the source.
const lockKey = 0x6368616e // "chan"

// Lock takes the transaction-scoped write lock of source's records, for
// writers that may run at once for one source: a poll (under the
// source's lease) and the webhook events of the same source. Apply
// decides created/updated/unchanged from the hashes it reads and COPYs
// new records; two writers of one source without the lock could both
// see a record as new. Call it first in the transaction, before any read
// of the source's records.
func Lock(ctx context.Context, tx pgx.Tx, source string) error {
	if _, err := tx.Exec(ctx, lockSQL, lockKey, source); err != nil {
		return fmt.Errorf("lock the records of %s: %w", source, err)
	}
	return nil
}

const lockSQL = `SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '.' || $2))`

// QueueLock queues Lock of source's records in b, for a writer that sends
// it with its first read of the source's records in one round trip: b is
// sent in the writer's transaction, the lock first, and the caller reads
// the lock's result first (pgx.BatchResults.Exec).
func QueueLock(b *pgx.Batch, source string) {
	b.Queue(lockSQL, lockKey, source)
}

// Apply mirrors recs (hashed, with distinct ids) of source into records and
// appends a change for each created or updated record, in tx. runID is
// recorded on both (NoRun: NULL). It sends one NOTIFY when it wrote a change.
func Apply(ctx context.Context, tx pgx.Tx, source string, runID int64, recs []normalize.Record, h *normalize.Hasher) (Stats, error) {
	st := Stats{Seen: len(recs)}
	if len(recs) == 0 {
		return st, nil
	}
	ids := make([]string, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
		if recs[i].Repaired {
			st.Repaired++
		}
	}
	rows, err := tx.Query(ctx, `
		SELECT record_id, content_hash, version, deleted_at IS NOT NULL
		FROM records WHERE source = $1 AND record_id = ANY($2::text[])`, source, ids)
	if err != nil {
		return st, fmt.Errorf("read stored hashes: %w", err)
	}
	have := make(map[string]stored, len(recs))
	for rows.Next() {
		var id string
		var s stored
		if err := rows.Scan(&id, &s.hash, &s.version, &s.deleted); err != nil {
			rows.Close()
			return st, fmt.Errorf("read stored hashes: %w", err)
		}
		have[id] = s
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("read stored hashes: %w", err)
	}

	var changed []int
	var updatedIDs []string
	for i := range recs {
		s, ok := have[recs[i].ID]
		switch {
		case !ok:
			changed = append(changed, i)
		case s.deleted || s.hash != recs[i].Hash:
			changed = append(changed, i)
			if !s.deleted {
				updatedIDs = append(updatedIDs, recs[i].ID)
			}
		default:
			st.Unchanged++
		}
	}
	if len(changed) == 0 {
		return st, nil
	}
	previous, err := loadFields(ctx, tx, source, updatedIDs)
	if err != nil {
		return st, err
	}

	w := newBatch(len(changed))
	w.materialize = updatedIDs
	src, run := &source, runIDOf(runID)
	for _, i := range changed {
		r := &recs[i]
		s, existed := have[r.ID]
		if w.stage(src, run, r, s, existed, previous[r.ID], h) == Created {
			st.Created++
		} else {
			st.Updated++
		}
	}
	if err := w.write(ctx, tx, source, runID); err != nil {
		return st, err
	}
	return st, nil
}

// stage adds r's record row and its change row to b. existed and s say
// what is stored of r; prev is the stored fields of a record r updates
// (nil for a record created or stored deleted). It returns the change's
// kind.
func (b *batch) stage(source *string, runID *int64, r *normalize.Record, s stored, existed bool, prev map[string]any, h *normalize.Hasher) string {
	version, kind := 1, Created
	if existed {
		version = s.version + 1
		if !s.deleted {
			kind = Updated
		}
	}
	// A created change leaves its snapshot to the record (see
	// StoresSnapshot); materialize copies it into the change when the
	// record moves on.
	var snapshot *string
	if kind != Created || StoresSnapshot(r) {
		snap := r.Snapshot
		if snap == nil {
			snap = normalize.Canonical(r.Fields())
		}
		str := string(snap)
		snapshot = &str
	}
	var prevJSON *string
	var changedFields []string
	if prev != nil {
		changedFields = h.ChangedFields(prev, r.Fields())
		p := string(normalize.Canonical(prev))
		prevJSON = &p
	} else {
		changedFields = h.CreatedFields(r)
	}
	var oldHash *string
	if existed {
		oldHash = &s.hash
	}
	b.addRecord(source, runID, r, version, existed)
	b.addChange(source, runID, &r.ID, kind, version, oldHash, nonEmpty(&r.Hash), changedFields, snapshot, prevJSON)
	return kind
}

// Fresh is a batch of records of a source that stores none of them (its
// first sync): each is created at version 1, so its rows are built without
// reading the database (PrepareFresh, on the caller's goroutine, while
// the writer's connection is busy with the batch before) and written with
// two COPYs and no read of stored hashes (WriteFresh). A record stored after
// all (an id that came twice in one run, a webhook event meanwhile) fails
// the COPY on records_pkey: WriteFresh returns ErrStored, the transaction is
// lost, and the caller writes the batch's records again with Apply.
type Fresh struct {
	source string
	runID  int64
	b      *batch
	st     Stats
}

// ErrStored is the error of WriteFresh when a record of its batches is
// stored already.
var ErrStored = errors.New("a record of the batch is stored already")

// PrepareFresh builds the rows of recs (hashed, with distinct ids) of
// source as new records and their created changes.
func PrepareFresh(source string, runID int64, recs []normalize.Record, h *normalize.Hasher) *Fresh {
	f := &Fresh{source: source, runID: runID, b: newBatch(len(recs)), st: Stats{Seen: len(recs), Created: len(recs)}}
	src, run := &source, runIDOf(runID)
	for i := range recs {
		if recs[i].Repaired {
			f.st.Repaired++
		}
		f.b.stage(src, run, &recs[i], stored{}, false, nil, h)
	}
	return f
}

// WriteFresh writes batches prepared for one source and run in tx, as
// Apply would have for a source storing none of their records: one COPY
// into records and one into changes for all of them, and one NOTIFY.
func WriteFresh(ctx context.Context, tx pgx.Tx, fs ...*Fresh) (Stats, error) {
	var st Stats
	var parts []*Fresh
	for _, f := range fs {
		if f.st.Seen > 0 {
			parts = append(parts, f)
			st.Add(f.st)
		}
	}
	if len(parts) == 0 {
		return st, nil
	}
	b := parts[0].b
	if len(parts) > 1 {
		b = &batch{}
		for _, f := range parts {
			b.newRecords = append(b.newRecords, f.b.newRecords...)
			b.changes = append(b.changes, f.b.changes...)
		}
	}
	if err := b.write(ctx, tx, parts[0].source, parts[0].runID); err != nil {
		// On Citus the COPY's violation comes back as XX000 (db.UniqueViolation).
		if c, ok := db.UniqueViolation(err); ok && c == "records_pkey" {
			return Stats{}, fmt.Errorf("%w: %w", ErrStored, err)
		}
		return Stats{}, err
	}
	return st, nil
}

// SourceEmpty reports whether source stores no record, deleted or not.
func SourceEmpty(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, source string) (bool, error) {
	var empty bool
	if err := q.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM records WHERE source = $1)`, source).Scan(&empty); err != nil {
		return false, fmt.Errorf("read whether %s stores records: %w", source, err)
	}
	return empty, nil
}

// loadFields reads the canonical fields of stored records.
func loadFields(ctx context.Context, tx pgx.Tx, source string, ids []string) (map[string]map[string]any, error) {
	out := make(map[string]map[string]any, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, `
		SELECT record_id, title, body, url, author, status, labels,
		       external_created_at, external_updated_at, extra
		FROM records WHERE source = $1 AND record_id = ANY($2::text[])`, source, ids)
	if err != nil {
		return nil, fmt.Errorf("read previous versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("read previous versions: %w", err)
		}
		out[r.ID] = r.Fields()
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read previous versions: %w", err)
	}
	return out, nil
}

func scanRecord(rows pgx.Rows) (normalize.Record, error) {
	var r normalize.Record
	var title, body, url, author, status *string
	var extra []byte
	if err := rows.Scan(&r.ID, &title, &body, &url, &author, &status, &r.Labels, &r.CreatedAt, &r.UpdatedAt, &extra); err != nil {
		return r, err
	}
	r.Title, r.Body, r.URL, r.Author, r.Status = deref(title), deref(body), deref(url), deref(author), deref(status)
	if len(extra) > 0 {
		v, err := normalize.Decode(extra)
		if err != nil {
			return r, fmt.Errorf("record %q extra: %w", r.ID, err)
		}
		r.Extra, _ = v.(map[string]any)
	}
	if r.CreatedAt != nil {
		t := r.CreatedAt.UTC()
		r.CreatedAt = &t
	}
	if r.UpdatedAt != nil {
		t := r.UpdatedAt.UTC()
		r.UpdatedAt = &t
	}
	return r, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// batch accumulates one transaction's writes. New records and every change
// row go in with COPY (the fastest path into Postgres; changes is
// append-only and a new record cannot conflict while the source's lease is
// held); records that already exist are upserted from column arrays.
type batch struct {
	// materialize lists the stored records this batch moves on: the
	// snapshot their latest change left to them is copied into it first.
	materialize []string
	newRecords  []newRecord
	changes     []changeRow

	// upserts of existing records, as columns for unnest
	ids, hashes, titles, bodies, urls, authors, statuses, labels, extras, raws []string
	created, updated                                                           []*time.Time
	versions                                                                   []int32
}

func newBatch(n int) *batch {
	return &batch{changes: make([]changeRow, 0, n)}
}

// newRecord is a row of recordColumns for COPY: its values point into
// the record (no value is boxed per row); nil pointers are NULL.
type newRecord struct {
	source, id                       *string
	version                          int32
	title, body, url, author, status *string
	labels                           []string
	extra                            []byte
	r                                *normalize.Record
	runID                            *int64
}

// changeRow is a row of changeColumns for COPY, as newRecord.
type changeRow struct {
	source, id, kind *string
	version          int32
	oldHash, newHash *string
	fields           []string
	record, previous *string
	runID            *int64
}

// recordRows is the COPY of b's new records.
func (b *batch) recordRows() *db.CopyIn {
	return db.NewCopyIn(len(b.newRecords), func(i int, c *db.CopyIn) {
		row := &b.newRecords[i]
		c.Row(len(recordColumns))
		c.TextPtr(row.source)
		c.TextPtr(row.id)
		c.Int4(row.version)
		c.Text(row.r.Hash)
		c.TextPtr(row.title)
		c.TextPtr(row.body)
		c.TextPtr(row.url)
		c.TextPtr(row.author)
		c.TextPtr(row.status)
		c.TextArray(row.labels)
		c.TstzPtr(row.r.CreatedAt)
		c.TstzPtr(row.r.UpdatedAt)
		c.JSONB(row.extra)
		c.JSONB(rawOf(row.r))
		c.Int8Ptr(row.runID)
	})
}

// changeRows is the COPY of b's changes: its columns, their statement and
// the rows. When no change has an old hash or a snapshot (a first sync's
// created changes), those columns are left out: their default is NULL.
func (b *batch) changeRows() (cols []string, stmt string, rows *db.CopyIn) {
	short := true
	for i := range b.changes {
		if c := &b.changes[i]; c.oldHash != nil || c.record != nil || c.previous != nil {
			short = false
			break
		}
	}
	cols, stmt = changeColumns, copyChanges
	if short {
		cols, stmt = createdColumns, copyCreated
	}
	return cols, stmt, db.NewCopyIn(len(b.changes), func(i int, c *db.CopyIn) {
		row := &b.changes[i]
		c.Row(len(cols))
		c.TextPtr(row.source)
		c.TextPtr(row.id)
		c.TextPtr(row.kind)
		c.Int4(row.version)
		if !short {
			c.TextPtr(row.oldHash)
		}
		c.TextPtr(row.newHash)
		c.TextArray(row.fields)
		if !short {
			c.JSONBPtr(row.record)
			c.JSONBPtr(row.previous)
		}
		c.Int8Ptr(row.runID)
	})
}

// nonEmpty points at s, or is nil (NULL) for "".
func nonEmpty(s *string) *string {
	if *s == "" {
		return nil
	}
	return s
}

// null is the raw JSON of an item without one.
var null = []byte("null")

// rawOf is the item as received: connectors hand over raw JSON they
// decoded, so it is valid.
func rawOf(r *normalize.Record) []byte {
	if len(r.Raw) == 0 {
		return null
	}
	return r.Raw
}

// runIDOf is runID as a column value: NULL for NoRun.
func runIDOf(runID int64) *int64 {
	if runID == NoRun {
		return nil
	}
	return &runID
}

// rawJSON is the item as received: connectors hand over raw JSON they
// decoded, so it is valid.
func rawJSON(r *normalize.Record) string {
	if len(r.Raw) == 0 {
		return "null"
	}
	return string(r.Raw)
}

func labelsOf(r *normalize.Record) []string {
	if r.Labels == nil {
		return []string{}
	}
	return r.Labels
}

func extraOf(r *normalize.Record) string {
	if r.ExtraJSON != nil {
		return string(r.ExtraJSON)
	}
	if r.Extra == nil {
		return "{}"
	}
	return string(normalize.Canonical(r.Extra))
}

// addRecord stages r at version; existed says whether a row is stored.
func (b *batch) addRecord(source *string, runID *int64, r *normalize.Record, version int, existed bool) {
	if !existed {
		extra := r.ExtraJSON
		if extra == nil {
			extra = []byte(extraOf(r))
		}
		b.newRecords = append(b.newRecords, newRecord{source: source, id: &r.ID, version: int32(version),
			title: nonEmpty(&r.Title), body: nonEmpty(&r.Body), url: nonEmpty(&r.URL), author: nonEmpty(&r.Author),
			status: nonEmpty(&r.Status), labels: labelsOf(r), extra: extra, r: r, runID: runID})
		return
	}
	b.ids = append(b.ids, r.ID)
	b.hashes = append(b.hashes, r.Hash)
	b.titles = append(b.titles, r.Title)
	b.bodies = append(b.bodies, r.Body)
	b.urls = append(b.urls, r.URL)
	b.authors = append(b.authors, r.Author)
	b.statuses = append(b.statuses, r.Status)
	b.labels = append(b.labels, arrayLiteral(labelsOf(r)))
	b.extras = append(b.extras, extraOf(r))
	b.raws = append(b.raws, rawJSON(r))
	b.created = append(b.created, r.CreatedAt)
	b.updated = append(b.updated, r.UpdatedAt)
	b.versions = append(b.versions, int32(version))
}

// kinds are the change kinds as column values.
var kinds = map[string]*string{Created: ptr(Created), Updated: ptr(Updated), Deleted: ptr(Deleted)}

func ptr[T any](v T) *T { return &v }

func (b *batch) addChange(source *string, runID *int64, id *string, kind string, version int, oldHash *string, newHash *string, fields []string, record, previous *string) {
	if fields == nil {
		fields = []string{}
	}
	b.changes = append(b.changes, changeRow{source: source, id: id, kind: kinds[kind], version: int32(version),
		oldHash: oldHash, newHash: newHash, fields: fields, record: record, previous: previous, runID: runID})
}

// arrayLiteral encodes a Postgres text[] literal.
func arrayLiteral(ss []string) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('"')
		for _, c := range []byte(s) {
			if c == '"' || c == '\\' {
				sb.WriteByte('\\')
			}
			sb.WriteByte(c)
		}
		sb.WriteByte('"')
	}
	sb.WriteByte('}')
	return sb.String()
}

var (
	recordColumns = []string{"source", "record_id", "version", "content_hash", "title", "body", "url", "author",
		"status", "labels", "external_created_at", "external_updated_at", "extra", "raw", "last_run_id"}
	// createdColumns are changeColumns without those a created change
	// leaves NULL (old_hash, record, previous).
	createdColumns = []string{"source", "record_id", "kind", "version", "new_hash", "changed_fields", "run_id"}
	changeColumns  = []string{"source", "record_id", "kind", "version", "old_hash", "new_hash", "changed_fields",
		"record", "previous", "run_id"}

	copyRecords = db.CopyStatement("records", recordColumns)
	copyCreated = db.CopyStatement("changes", createdColumns)
	copyChanges = db.CopyStatement("changes", changeColumns)
)

const upsertRecords = `
INSERT INTO records AS r (source, record_id, version, content_hash, title, body, url, author, status,
                          labels, external_created_at, external_updated_at, extra, raw, last_run_id,
                          synced_at, deleted_at)
SELECT $1, u.id, u.version, u.hash, NULLIF(u.title, ''), NULLIF(u.body, ''), NULLIF(u.url, ''),
       NULLIF(u.author, ''), NULLIF(u.status, ''), u.labels::text[], u.created, u.updated,
       u.extra::jsonb, u.raw::jsonb, $2, now(), NULL
FROM unnest($3::text[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
            $10::text[], $11::text[], $12::timestamptz[], $13::timestamptz[], $14::text[], $15::text[])
     AS u(id, version, hash, title, body, url, author, status, labels, created, updated, extra, raw)
ON CONFLICT (source, record_id) DO UPDATE SET
    version = excluded.version, content_hash = excluded.content_hash, title = excluded.title,
    body = excluded.body, url = excluded.url, author = excluded.author, status = excluded.status,
    labels = excluded.labels, external_created_at = excluded.external_created_at,
    external_updated_at = excluded.external_updated_at, extra = excluded.extra, raw = excluded.raw,
    last_run_id = excluded.last_run_id, synced_at = excluded.synced_at, deleted_at = NULL`

// activitySQL adds $1 changes to the hour's activity (migration 27): the
// changes' created_at is their transaction's now(); one row per hour and
// backend, so that concurrent writers never wait on each other's row.
const activitySQL = `
INSERT INTO activity_hour_totals AS t (hour, backend, changes)
VALUES (date_trunc('hour', now(), 'UTC'), pg_backend_pid(), $1)
ON CONFLICT (hour, backend) DO UPDATE SET changes = t.changes + excluded.changes`

// NotifySQL wakes the evaluators listening on '<schema>.changes'.
const NotifySQL = `SELECT pg_notify(current_schema() || '.changes', $1)`

func (b *batch) write(ctx context.Context, tx pgx.Tx, source string, runID int64) error {
	// Before the records move on and before the new changes exist (the
	// latest change of a record is the one of its stored version).
	if err := materialize(ctx, tx, source, b.materialize); err != nil {
		return err
	}
	if len(b.newRecords) > 0 {
		if _, err := db.CopyFrom(ctx, tx, "records", recordColumns, copyRecords, b.recordRows()); err != nil {
			return fmt.Errorf("copy %d new records of %s: %w", len(b.newRecords), source, err)
		}
	}
	if len(b.changes) > 0 {
		cols, stmt, rows := b.changeRows()
		if _, err := db.CopyFrom(ctx, tx, "changes", cols, stmt, rows); err != nil {
			return fmt.Errorf("copy %d changes of %s: %w", len(b.changes), source, err)
		}
	}
	q := &pgx.Batch{}
	if len(b.ids) > 0 {
		q.Queue(upsertRecords, source, runArg(runID), b.ids, b.versions, b.hashes, b.titles, b.bodies, b.urls,
			b.authors, b.statuses, b.labels, b.created, b.updated, b.extras, b.raws)
	}
	q.Queue(activitySQL, len(b.changes))
	q.Queue(NotifySQL, source)
	if err := tx.SendBatch(ctx, q).Close(); err != nil {
		return fmt.Errorf("write %d changes of %s: %w", len(b.changes), source, err)
	}
	return nil
}
