package changes

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lookout-dev/lookout/internal/normalize"
)

// A created change does not copy its record's snapshot (changes.record is
// NULL): while the record is at the change's version, records holds that
// version, and record_snapshot_of(its columns) in SQL (migration 34;
// record_snapshot(records) of migration 11 before) rebuilds the snapshot
// from its columns as the same jsonb value. When the record moves
// on (an update, a deletion), materialize copies the snapshot into the
// change first, in the same transaction, so a change always describes its
// own version: the evaluator, explain and replay read
// coalesce(changes.record, record_snapshot_of(records at changes.version)),
// which the view changes_with_record spells out.

// SnapshotOfR is the SQL of the snapshot of the record row r (a record
// aliased r in the statement): record_snapshot_of of its columns, which
// runs on every shard of a Citus cluster, where record_snapshot(r) of the
// row type finds no function for a shard's row type.
const SnapshotOfR = `record_snapshot_of(r.record_id, r.title, r.body, r.url, r.author, r.status, r.labels,
	r.external_created_at, r.external_updated_at, r.extra)`

// SnapshotColumnsOfR is the SQL of the columns of the record row r that
// SnapshotOfR builds its snapshot of, in the order of RecordColumns.Targets.
// A statement that reads many snapshots (the evaluator's claim) reads
// these and builds each snapshot in Go (RecordColumns.Snapshot): PostgreSQL
// building the jsonb value and sending it as text, for the client to parse
// it again, was about a tenth of PostgreSQL's CPU in a drain of created
// changes (docs/benchmarks.md, (4) on branch eval-pg).
const SnapshotColumnsOfR = `r.record_id, r.title, r.body, r.url, r.author, r.status, r.labels,
	r.external_created_at, r.external_updated_at, r.extra`

// RecordColumns holds a record's columns as SnapshotColumnsOfR reads them;
// all are NULL when the statement found no record row.
type RecordColumns struct {
	ID, Title, Body, URL, Author, Status pgtype.Text
	Labels                               []string
	CreatedAt, UpdatedAt                 pgtype.Timestamptz
	Extra                                []byte
}

// Targets returns the scan targets of SnapshotColumnsOfR's columns.
func (c *RecordColumns) Targets() []any {
	return []any{&c.ID, &c.Title, &c.Body, &c.URL, &c.Author, &c.Status, &c.Labels, &c.CreatedAt, &c.UpdatedAt, &c.Extra}
}

// Snapshot returns the snapshot record_snapshot_of(the columns) gives,
// decoded as normalize.DecodeObject decodes it: the same keys and values
// (a NULL text as "", NULL labels, times and extra as nil, a time as
// RFC 3339 in UTC with its fraction's trailing zeros dropped). It returns
// nil when the columns are of no record (ID NULL). Snapshots builds many.
func (c *RecordColumns) Snapshot() (map[string]any, error) {
	var s Snapshots
	snap := s.Add(c)
	if err := s.Finish(); err != nil {
		return nil, err
	}
	return snap, nil
}

// Snapshots builds the snapshots of many records' columns
// (RecordColumns.Snapshot), their extras decoded together at the end
// (normalize.DecodeEach): a decoder for each record's extra was a tenth of
// the evaluator's CPU in a drain (docs/benchmarks.md, (4) on branch
// eval-go). The zero Snapshots is ready to use.
type Snapshots struct {
	pending []pendingExtra
}

// pendingExtra is the extra of a snapshot Add returned, decoded by Finish.
type pendingExtra struct {
	snap  map[string]any
	id    string
	extra []byte
}

// Add returns the snapshot of c, as Snapshot does but for its extra, which
// Finish sets; nil when the columns are of no record (ID NULL). The
// snapshot keeps c's extra until Finish: c may be reused after Add.
func (s *Snapshots) Add(c *RecordColumns) map[string]any {
	if !c.ID.Valid {
		return nil
	}
	var labels any
	if c.Labels != nil {
		l := make([]any, len(c.Labels))
		for i, s := range c.Labels {
			l[i] = s
		}
		labels = l
	}
	snap := map[string]any{
		"id":         c.ID.String,
		"title":      c.Title.String,
		"body":       c.Body.String,
		"url":        c.URL.String,
		"author":     c.Author.String,
		"status":     c.Status.String,
		"labels":     labels,
		"created_at": snapshotTime(c.CreatedAt),
		"updated_at": snapshotTime(c.UpdatedAt),
		"extra":      nil,
	}
	if c.Extra != nil {
		s.pending = append(s.pending, pendingExtra{snap: snap, id: c.ID.String, extra: c.Extra})
	}
	return snap
}

// Finish decodes the extras of the snapshots Add returned into them. An
// error names the record whose extra does not decode.
func (s *Snapshots) Finish() error {
	defer func() { s.pending = s.pending[:0] }()
	if len(s.pending) == 0 {
		return nil
	}
	extras := make([][]byte, len(s.pending))
	for i := range s.pending {
		extras[i] = s.pending[i].extra
	}
	vs, err := normalize.DecodeEach(extras)
	if err != nil {
		// One of them is wrong: decode each for its error.
		for _, p := range s.pending {
			if _, err := normalize.Decode(p.extra); err != nil {
				return fmt.Errorf("record %s: extra: %w", p.id, err)
			}
		}
		return fmt.Errorf("extras of %d records: %w", len(s.pending), err)
	}
	for i, p := range s.pending {
		p.snap["extra"] = vs[i]
	}
	return nil
}

// snapshotTime is record_snapshot_of's text of a time: RFC 3339 in UTC,
// the fraction without trailing zeros (PostgreSQL keeps microseconds), nil
// for NULL or an infinite time (to_char gives NULL for those). The writer
// stores the snapshot in the change when a time has no such text
// (StoresSnapshot).
func snapshotTime(t pgtype.Timestamptz) any {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return nil
	}
	return t.Time.UTC().Format(time.RFC3339Nano)
}

// StoresSnapshot reports whether a created change of r must store the
// snapshot itself because its record's columns cannot give it back
// exactly: a time with a fraction finer than PostgreSQL's microseconds, or
// outside the years 1 to 9999 that RFC 3339 writes with four digits.
func StoresSnapshot(r *normalize.Record) bool {
	return inexactTime(r.CreatedAt) || inexactTime(r.UpdatedAt)
}

func inexactTime(t *time.Time) bool {
	if t == nil {
		return false
	}
	u := t.UTC()
	return u.Nanosecond()%1000 != 0 || u.Year() < 1 || u.Year() > 9999
}

// materializeSQL copies the snapshot of records $2 of source $1 into their
// latest change when that change left it to the record (record IS NULL at
// the record's version). The record's latest changes come from
// changes_record_idx read backwards (two of them, in case a version was
// recorded twice), so the cost does not grow with the record's history. The
// rows are locked in id order, the order in which the evaluator's
// statements lock changes, so the two never deadlock.
//
// Every table is named with the source ($1), so that on Citus the
// statement, and its lock, go to the one shard of the source.
const materializeSQL = `
WITH target AS (
    SELECT c.id, ` + SnapshotOfR + ` AS snapshot
    FROM records r
    CROSS JOIN LATERAL (
        SELECT p.id FROM changes p
        WHERE p.source = $1 AND p.source = r.source AND p.record_id = r.record_id
        ORDER BY p.id DESC LIMIT 2) latest
    JOIN changes c ON c.id = latest.id AND c.source = $1
    WHERE r.source = $1 AND r.record_id = ANY($2::text[])
      AND c.version = r.version AND c.record IS NULL
    ORDER BY c.id
    FOR UPDATE OF c)
UPDATE changes c SET record = t.snapshot
FROM target t
WHERE c.id = t.id AND c.source = $1`

// materialize copies into their latest change the snapshots that records
// ids of source hold for it, before the records move on.
func materialize(ctx context.Context, tx pgx.Tx, source string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, materializeSQL, source, ids); err != nil {
		return fmt.Errorf("materialize the snapshots of %d records of %s: %w", len(ids), source, err)
	}
	return nil
}
