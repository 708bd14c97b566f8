// Package changes writes the record mirror and its append-only change log,
// and wakes consumers with NOTIFY.
//
// Apply is called inside the syncer's transaction for one page: it reads the
// stored hashes of the page's records in one query, skips records whose hash
// is unchanged, and writes the rest (records upsert, changes rows, one
// pg_notify) in one more round trip. An unchanged re-sync writes nothing.
package changes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// Change kinds.
const (
	Created = "created"
	Updated = "updated"
	Deleted = "deleted"
)

// Stats counts what a write did.
type Stats struct {
	Seen, Created, Updated, Unchanged, Deleted int
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	s.Seen += o.Seen
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

// Apply mirrors recs (hashed, with distinct ids) of source into records and
// appends a change for each created or updated record, in tx. runID is
// recorded on both. It sends one NOTIFY when it wrote a change.
func Apply(ctx context.Context, tx pgx.Tx, source string, runID int64, recs []normalize.Record, h *normalize.Hasher) (Stats, error) {
	st := Stats{Seen: len(recs)}
	if len(recs) == 0 {
		return st, nil
	}
	ids := make([]string, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
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

	n := len(changed)
	w := newColumns(n)
	for _, i := range changed {
		r := &recs[i]
		s, existed := have[r.ID]
		version, kind := 1, Created
		if existed {
			version = s.version + 1
			if !s.deleted {
				kind = Updated
			}
		}
		fields := r.Fields()
		var prevJSON *string
		var changedFields []string
		if prev, ok := previous[r.ID]; ok {
			changedFields = h.ChangedFields(prev, fields)
			p := string(normalize.Canonical(prev))
			prevJSON = &p
		} else {
			changedFields = h.ChangedFields(nil, fields)
		}
		var oldHash *string
		if existed {
			oldHash = &s.hash
		}
		w.addRecord(r, version)
		w.addChange(r.ID, kind, version, oldHash, r.Hash, changedFields, string(normalize.Canonical(fields)), prevJSON)
		if kind == Created {
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

// columns accumulates the batch as column arrays for unnest.
type columns struct {
	// records
	ids, hashes, titles, bodies, urls, authors, statuses, labels, extras, raws []string
	created, updated                                                           []*time.Time
	versions                                                                   []int32
	// changes
	cIDs, cKinds, cNewHashes, cFields, cRecords []string
	cOldHashes, cPrevious                       []*string
	cVersions                                   []int32
}

func newColumns(n int) *columns {
	mk := func() []string { return make([]string, 0, n) }
	return &columns{
		ids: mk(), hashes: mk(), titles: mk(), bodies: mk(), urls: mk(), authors: mk(), statuses: mk(), labels: mk(), extras: mk(), raws: mk(),
		created: make([]*time.Time, 0, n), updated: make([]*time.Time, 0, n), versions: make([]int32, 0, n),
		cIDs: mk(), cKinds: mk(), cNewHashes: mk(), cFields: mk(), cRecords: mk(),
		cOldHashes: make([]*string, 0, n), cPrevious: make([]*string, 0, n), cVersions: make([]int32, 0, n),
	}
}

func (c *columns) addRecord(r *normalize.Record, version int) {
	labels := r.Labels
	if labels == nil {
		labels = []string{}
	}
	extra := r.Extra
	if extra == nil {
		extra = map[string]any{}
	}
	raw := string(r.Raw)
	if raw == "" || !json.Valid(r.Raw) {
		raw = "null"
	}
	c.ids = append(c.ids, r.ID)
	c.hashes = append(c.hashes, r.Hash)
	c.titles = append(c.titles, r.Title)
	c.bodies = append(c.bodies, r.Body)
	c.urls = append(c.urls, r.URL)
	c.authors = append(c.authors, r.Author)
	c.statuses = append(c.statuses, r.Status)
	c.labels = append(c.labels, string(normalize.Canonical(labels)))
	c.extras = append(c.extras, string(normalize.Canonical(extra)))
	c.raws = append(c.raws, raw)
	c.created = append(c.created, r.CreatedAt)
	c.updated = append(c.updated, r.UpdatedAt)
	c.versions = append(c.versions, int32(version))
}

func (c *columns) addChange(id, kind string, version int, oldHash *string, newHash string, fields []string, record string, previous *string) {
	if fields == nil {
		fields = []string{}
	}
	c.cIDs = append(c.cIDs, id)
	c.cKinds = append(c.cKinds, kind)
	c.cVersions = append(c.cVersions, int32(version))
	c.cOldHashes = append(c.cOldHashes, oldHash)
	c.cNewHashes = append(c.cNewHashes, newHash)
	c.cFields = append(c.cFields, string(normalize.Canonical(fields)))
	c.cRecords = append(c.cRecords, record)
	c.cPrevious = append(c.cPrevious, previous)
}

const upsertRecords = `
INSERT INTO records AS r (source, record_id, version, content_hash, title, body, url, author, status,
                          labels, external_created_at, external_updated_at, extra, raw, last_run_id,
                          synced_at, deleted_at)
SELECT $1, u.id, u.version, u.hash, NULLIF(u.title, ''), NULLIF(u.body, ''), NULLIF(u.url, ''),
       NULLIF(u.author, ''), NULLIF(u.status, ''),
       ARRAY(SELECT jsonb_array_elements_text(u.labels::jsonb)), u.created, u.updated,
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

const insertChanges = `
INSERT INTO changes (source, record_id, kind, version, old_hash, new_hash, changed_fields, record, previous, run_id)
SELECT $1, c.id, c.kind, c.version, c.old_hash, NULLIF(c.new_hash, ''),
       ARRAY(SELECT jsonb_array_elements_text(c.fields::jsonb)), c.record::jsonb, c.previous::jsonb, $2
FROM unnest($3::text[], $4::text[], $5::int[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])
     AS c(id, kind, version, old_hash, new_hash, fields, record, previous)`

// NotifySQL wakes the evaluators listening on '<schema>.changes'.
const NotifySQL = `SELECT pg_notify(current_schema() || '.changes', $1)`

func (c *columns) write(ctx context.Context, tx pgx.Tx, source string, runID int64) error {
	b := &pgx.Batch{}
	if len(c.ids) > 0 {
		b.Queue(upsertRecords, source, runID, c.ids, c.versions, c.hashes, c.titles, c.bodies, c.urls,
			c.authors, c.statuses, c.labels, c.created, c.updated, c.extras, c.raws)
	}
	b.Queue(insertChanges, source, runID, c.cIDs, c.cKinds, c.cVersions, c.cOldHashes, c.cNewHashes,
		c.cFields, c.cRecords, c.cPrevious)
	b.Queue(NotifySQL, source)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write %d changes of %s: %w", len(c.cIDs), source, err)
	}
	return nil
}
