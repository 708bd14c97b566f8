package definitions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/sources"
)

// Store is the Go API of the definitions for the control plane: create,
// read, change, pause and delete sources and watches, scoped by the
// actor's owner. Every write validates through the Validator, runs in one
// transaction with a new config version (from a sequence: writes of
// different definitions commit in parallel), and wakes the daemons.
type Store struct {
	pool      database
	validator *Validator
	// wake sends the followers' wake-up after commits, shared by the
	// store and its In and Deferred copies.
	wake *waker
	// sources are the sources watches were created on, shared like wake
	// (CreateWatch).
	sources *sourceCache
	// deferred: the store runs in a caller's transaction that wakes the
	// followers itself after it commits (Deferred).
	deferred bool
}

// database is what the store runs on: the pool, or a caller's transaction (In).
type database interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// In returns the store running in the caller's transaction tx: its
// changes are savepoints that commit (with their version and NOTIFY) when tx does, so that the control plane's audit row and
// idempotency key commit with the change, or nothing does.
func (s *Store) In(tx pgx.Tx) *Store {
	return &Store{pool: tx, validator: s.validator, wake: s.wake, sources: s.sources}
}

// Deferred returns the store running in the caller's transaction tx, like
// In, but whose changes do not NOTIFY in tx: the caller calls Wake after
// tx committed. A NOTIFY in tx would hold PostgreSQL's NOTIFY queue lock
// from tx's commit through its WAL flush, and every other committing
// transaction that notified would wait for it; Wake's NOTIFY is shared
// by the changes that committed before it. The changes run directly in
// tx, without a savepoint: after an error of the store the caller rolls
// tx back. Without the Wake, followers see the change on their next
// catch-up (WatcherConfig.CatchUpInterval).
func (s *Store) Deferred(tx pgx.Tx) *Store {
	return &Store{pool: tx, validator: s.validator, wake: s.wake, sources: s.sources, deferred: true}
}

// Wake wakes the daemons following the definitions (a NOTIFY on
// <schema>.config) and returns once a NOTIFY that started after the call
// was sent: a follower woken by it sees every change committed before.
// Concurrent calls share one NOTIFY. The store's own writes on the pool
// wake the followers themselves; a caller of Deferred calls it after its
// transaction committed.
func (s *Store) Wake(ctx context.Context) error { return s.wake.Wake(ctx) }

// NewStore returns a store on pool validating with v.
func NewStore(pool *pgxpool.Pool, v *Validator) *Store {
	if v == nil {
		v = &Validator{}
	}
	return &Store{pool: pool, validator: v, sources: newSourceCache(), wake: newWaker(func(ctx context.Context) error {
		if _, err := pool.Exec(ctx, queryWake); err != nil {
			return fmt.Errorf("notify config: %w", err)
		}
		return nil
	})}
}

// Validator is the store's validator.
func (s *Store) Validator() *Validator { return s.validator }

// ListOptions pages a list: names after After (for watches, the source
// and name after AfterSource/After), at most Limit (default 100).
type ListOptions struct {
	AfterSource string
	After       string
	Limit       int
}

func (o ListOptions) limit() int {
	if o.Limit <= 0 {
		return 100
	}
	return o.Limit
}

// Version returns the last config version taken (by a change that may
// not have committed yet).
func (s *Store) Version(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, queryVersion).Scan(&v); err != nil {
		return 0, fmt.Errorf("read config version: %w", err)
	}
	return v, nil
}

// change runs fn in a transaction with a new config version (passed to
// fn) and wakes the daemons when it commits. The version is taken from a
// sequence, without a lock: changes commit in parallel, not necessarily
// in the order of their versions (followers track snapshots, not
// numbers: follow.go). On the pool, the wake-up is sent after the commit
// (Wake: no NOTIFY in the transaction, whose commits would otherwise
// queue behind each other on PostgreSQL's NOTIFY queue lock); in a
// caller's transaction (In) it is a NOTIFY that commits with it; in a
// Deferred store the caller wakes the daemons after its commit.
func (s *Store) change(ctx context.Context, fn func(tx pgx.Tx, version int64) error) error {
	return s.changeTaking(ctx, func(tx pgx.Tx) (int64, error) {
		var v int64
		if err := tx.QueryRow(ctx, queryNextVersion).Scan(&v); err != nil {
			return 0, fmt.Errorf("take a config version: %w", err)
		}
		return v, fn(tx, v)
	})
}

// changeTaking is change for a fn that takes its config version itself,
// within a statement it runs anyway (nextval in its INSERT: one round
// trip fewer), and returns it (the NOTIFY's payload in a caller's
// transaction, a hint only).
func (s *Store) changeTaking(ctx context.Context, fn func(tx pgx.Tx) (int64, error)) error {
	tx, inTx := s.pool.(pgx.Tx)
	switch {
	case s.deferred:
		_, err := fn(tx)
		return err
	case inTx:
		return pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
			v, err := fn(tx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, queryNotify, strconv.FormatInt(v, 10)); err != nil {
				return fmt.Errorf("notify config: %w", err)
			}
			return nil
		})
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { _, err := fn(tx); return err }); err != nil {
		return err
	}
	// The change committed: a failed wake-up is not its failure (the
	// followers catch up on their slow timer).
	if err := s.Wake(ctx); err != nil {
		slog.Default().Warn("wake the followers of the definitions after a change", "error", err)
	}
	return nil
}

// CreateSource validates data (a source file's keys, YAML or JSON, its
// watches included) and creates the source and its watches, owned by the
// actor and managed by the API. A name in use is a *ConflictError.
func (s *Store) CreateSource(ctx context.Context, a Actor, data []byte) (*Source, []Watch, error) {
	src, err := s.validator.Sent(data, "")
	if err != nil {
		return nil, nil, err
	}
	if err := apiTaskCommands(src); err != nil {
		return nil, nil, err
	}
	row, watches, err := Split(src, a.Owner, ManagedByAPI)
	if err != nil {
		return nil, nil, err
	}
	if err := s.seal(&row); err != nil {
		return nil, nil, err
	}
	var out *Source
	var outW []Watch
	err = s.change(ctx, func(tx pgx.Tx, v int64) error {
		if existing, err := getSource(ctx, tx, row.Name, true); err == nil {
			return sourceNameConflict(a, existing)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		if out, err = insertSource(ctx, tx, &row, v); err != nil {
			return err
		}
		for i := range watches {
			w, err := insertWatch(ctx, tx, &watches[i], v)
			if err != nil {
				return err
			}
			outW = append(outW, *w)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, outW, nil
}

// UpdateSource replaces the keys of the actor's source name with data (a
// source definition without watches: they change one by one). The whole
// source, with its current watches, is validated again.
func (s *Store) UpdateSource(ctx context.Context, a Actor, name string, data []byte) (*Source, error) {
	var out *Source
	err := s.change(ctx, func(tx pgx.Tx, v int64) error {
		cur, err := s.writableSource(ctx, tx, a, name)
		if err != nil {
			return err
		}
		watches, err := watchesOf(ctx, tx, name)
		if err != nil {
			return err
		}
		// A credential sent back as shown ([redacted]) keeps the stored one.
		doc, err := toJSON(data)
		if err != nil {
			return &ValidationError{Problems: []Problem{{Message: err.Error()}}}
		}
		if doc, err = keepRedacted(doc, cur.Definition); err != nil {
			return &ValidationError{Problems: []Problem{{Message: err.Error()}}}
		}
		src, err := s.validator.Sent(doc, "")
		if err != nil {
			return err
		}
		if src.Name != name {
			return &ValidationError{Problems: []Problem{{Pointer: "/name", Message: fmt.Sprintf("is %q but the source is %q: a source cannot be renamed", src.Name, name)}}}
		}
		if err := apiTaskCommands(src); err != nil {
			return err
		}
		if len(src.Watches) > 0 {
			return &ValidationError{Problems: []Problem{{Pointer: "/watches", Message: "are changed one by one (create, update or delete a watch), not with the source"}}}
		}
		row, _, err := Split(src, cur.Owner, cur.ManagedBy)
		if err != nil {
			return err
		}
		if err := s.seal(&row); err != nil {
			return err
		}
		if _, err := s.validateWithWatches(&row, watches); err != nil {
			return err
		}
		out, err = scanSource(tx.QueryRow(ctx, queryUpdateSource, name, row.Owner, row.ManagedBy, row.Connector, row.Definition, row.Hash, v))
		return err
	})
	return out, err
}

// seal seals the credentials of a source row made through the API
// (credentials.go) and hashes it again.
func (s *Store) seal(row *Source) error {
	def, err := sealCredentials(s.validator.Keys, row.Name, row.Definition)
	if err != nil {
		return err
	}
	row.Definition, row.Hash = def, hash(def)
	return nil
}

// apiTaskCommands refuses task watches with a command executor in a
// definition made through the API: a command runs a program on the
// syncer's host, which only the operator's files may ask for.
func apiTaskCommands(src *config.Source) error {
	var problems []Problem
	for i, t := range src.Tasks {
		if len(t.Command) > 0 {
			problems = append(problems, Problem{Pointer: fmt.Sprintf("/tasks/%d/command", i),
				Message: "runs a program on the syncer's host, which only a source file of the configuration directory may do; use a webhook executor"})
		}
	}
	if len(problems) > 0 {
		return &ValidationError{Problems: problems}
	}
	return nil
}

// validateWithWatches validates a source row with watches, returning a
// *ValidationError located in the source definition.
func (s *Store) validateWithWatches(row *Source, watches []Watch) (*config.Source, error) {
	defs := make([]json.RawMessage, len(watches))
	for i := range watches {
		defs[i] = watches[i].Definition
	}
	doc, err := document(row.Definition, defs...)
	if err != nil {
		return nil, err
	}
	return s.validator.Source(doc)
}

// DeleteSource deletes the actor's source and its watches (each with its
// tombstone). Its records and history stay.
func (s *Store) DeleteSource(ctx context.Context, a Actor, name string) error {
	return s.change(ctx, func(tx pgx.Tx, v int64) error {
		cur, err := s.writableSource(ctx, tx, a, name)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, queryDeleteWatchesOf, name)
		if err != nil {
			return fmt.Errorf("delete the watches of source %s: %w", name, err)
		}
		type gone struct{ name, owner, managedBy string }
		var ws []gone
		for rows.Next() {
			var g gone
			if err := rows.Scan(&g.name, &g.owner, &g.managedBy); err != nil {
				rows.Close()
				return fmt.Errorf("delete the watches of source %s: %w", name, err)
			}
			ws = append(ws, g)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("delete the watches of source %s: %w", name, err)
		}
		for _, w := range ws {
			if _, err := tx.Exec(ctx, queryRecordDeletion, v, name, w.name, w.owner, w.managedBy); err != nil {
				return fmt.Errorf("delete watch %s/%s: %w", name, w.name, err)
			}
		}
		if _, err := tx.Exec(ctx, queryDeleteSource, name); err != nil {
			return fmt.Errorf("delete source %s: %w", name, err)
		}
		if err := sources.MarkRemoved(ctx, tx, name, "deleted by "+a.Owner); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queryRecordDeletion, v, name, "", cur.Owner, cur.ManagedBy); err != nil {
			return fmt.Errorf("delete source %s: %w", name, err)
		}
		return nil
	})
}

// GetSource returns a source the actor sees: its own or a shared one.
func (s *Store) GetSource(ctx context.Context, a Actor, name string) (*Source, error) {
	src, err := getSource(ctx, s.pool, name, false)
	if err != nil {
		return nil, err
	}
	if !a.sees(src.Owner, true) {
		return nil, ErrNotFound
	}
	return src, nil
}

// ListSources lists the sources the actor sees, by name.
func (s *Store) ListSources(ctx context.Context, a Actor, opt ListOptions) ([]Source, error) {
	rows, err := s.pool.Query(ctx, queryListSources, a.Admin, a.Owner, opt.After, opt.limit())
	if err != nil {
		return nil, fmt.Errorf("list sources: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Source, error) {
		s, err := scanSource(r)
		if err != nil {
			return Source{}, err
		}
		return *s, nil
	})
}

// PauseSource pauses (or with paused false resumes) the actor's source:
// the syncers stop scheduling it (sources.status 'paused') until resumed.
func (s *Store) PauseSource(ctx context.Context, a Actor, name string, paused bool, reason string) (*Source, error) {
	var out *Source
	err := s.change(ctx, func(tx pgx.Tx, v int64) error {
		if _, err := s.writableSource(ctx, tx, a, name); err != nil {
			return err
		}
		var r *string
		if paused {
			r = &reason
		}
		var err error
		out, err = scanSource(tx.QueryRow(ctx, queryPauseSource, name, paused, r, v))
		return err
	})
	return out, err
}

// ResumeSource is the one resume of a source, for its owner (the API,
// MCP) and for an operator (an admin: the admin page, `syncer resume`).
// A definition paused (source_definitions.paused: the one meaning of
// "paused in its definition", sources.DefinitionPaused) is resumed first
// when the actor may change it: its owner or an admin, through the API; a
// file's pause is its file's, and an admin's resume of it is refused by
// sources.Resume with a *sources.DefinitionPausedError saying so. Then,
// for an admin, the source's row is resumed as well (an operator's pause,
// a disabled or completed source): active and due at now. The owner's
// resume leaves the row to the syncers, which follow the definition.
//
// It returns the definition (nil for a source without one, which only an
// admin may resume) and, for an admin, the row's state.
func (s *Store) ResumeSource(ctx context.Context, a Actor, name string, now time.Time) (*Source, *sources.State, error) {
	var def *Source
	var st *sources.State
	err := s.change(ctx, func(tx pgx.Tx, v int64) error {
		cur, err := getSource(ctx, tx, name, true)
		switch {
		case errors.Is(err, ErrNotFound) && a.Admin:
		case err != nil:
			return err
		case !a.sees(cur.Owner, true):
			return ErrNotFound
		case cur.Paused && (FileOf(cur.ManagedBy) == "" || !a.Admin):
			if _, err := s.writableSource(ctx, tx, a, name); err != nil {
				return err
			}
			if cur, err = scanSource(tx.QueryRow(ctx, queryPauseSource, name, false, nil, v)); err != nil {
				return err
			}
		}
		def = cur
		if !a.Admin {
			return nil
		}
		st, err = sources.Resume(ctx, tx, name, now)
		if errors.Is(err, sources.ErrUnknownSource) && def != nil {
			return nil // not registered yet: the syncers register it active
		}
		return err
	})
	return def, st, err
}

// RunNow asks for a run of a source the actor sees at the next poll of
// any syncer, whatever its schedule, and wakes the syncers
// (sources.RunNow).
func (s *Store) RunNow(ctx context.Context, a Actor, name string) error {
	src, err := s.GetSource(ctx, a, name)
	if err != nil {
		return err
	}
	if src.Paused {
		return &ConflictError{What: fmt.Sprintf("source %q", name), Msg: "is paused: resume it first"}
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := sources.RunNow(ctx, tx, name, time.Now())
		var na *sources.NotActiveError
		if errors.Is(err, sources.ErrUnknownSource) || errors.As(err, &na) {
			return &ConflictError{What: fmt.Sprintf("source %q", name),
				Msg: "is not active in the syncer (not registered yet, or paused, disabled or completed)"}
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queryNotify, "run"); err != nil {
			return fmt.Errorf("notify config: %w", err)
		}
		return nil
	})
}

// writableSource locks and returns the source name if the actor may
// change it through the API.
func (s *Store) writableSource(ctx context.Context, tx pgx.Tx, a Actor, name string) (*Source, error) {
	cur, err := getSource(ctx, tx, name, true)
	if err != nil {
		return nil, err
	}
	if !a.sees(cur.Owner, true) {
		return nil, ErrNotFound
	}
	what := fmt.Sprintf("source %q", name)
	if f := FileOf(cur.ManagedBy); f != "" {
		return nil, &ConflictError{What: what, File: f, Msg: "change the file; the API cannot change it"}
	}
	if !a.owns(cur.Owner) {
		return nil, &ConflictError{What: what, Msg: "is shared: only an admin changes it"}
	}
	return cur, nil
}

// CreateWatch validates data (one watch, YAML or JSON, as an item of a
// source file's watches) against the source it watches, and creates it,
// owned by the actor. The source is the actor's own or a shared one.
func (s *Store) CreateWatch(ctx context.Context, a Actor, source string, data []byte) (*Watch, error) {
	var out *Watch
	err := s.changeTaking(ctx, func(tx pgx.Tx) (int64, error) {
		var err error
		if out, err = s.createWatchOnKnownSource(ctx, tx, a, source, data); out != nil || err != nil {
			return versionOf(out), err
		}
		// FOR SHARE: watches of several owners are created on one shared
		// source in parallel.
		src, err := scanSource(tx.QueryRow(ctx, queryGetSourceShared, source))
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, ErrNotFound
		}
		if err != nil {
			return 0, err
		}
		if !a.sees(src.Owner, true) {
			return 0, ErrNotFound
		}
		if src.Orphaned() {
			return 0, &ConflictError{What: fmt.Sprintf("source %q", source), Msg: orphanedMsg(src)}
		}
		s.sources.put(src)
		w, err := s.validateWatch(src, data)
		if err != nil {
			return 0, err
		}
		w.Owner, w.ManagedBy = a.Owner, ManagedByAPI
		out, err = createWatchRow(ctx, tx, a, w)
		if err != nil {
			return 0, err
		}
		return out.Version, nil
	})
	// The source was read in the change and is not orphaned
	// (out.SourceOrphanedAt stays nil): no withSource.
	return out, err
}

// createWatchOnKnownSource is CreateWatch's create in one statement, on
// the source as an earlier create read it (sourceCache): data validated
// against it, the watch inserted if the source is unchanged
// (queryCreateWatchOnSource). It returns no watch and no error when the
// source is not known, or changed, or the name is in use, or data is not
// valid against the source known: CreateWatch then reads the source and
// validates again, and says why.
func (s *Store) createWatchOnKnownSource(ctx context.Context, tx pgx.Tx, a Actor, source string, data []byte) (*Watch, error) {
	src := s.sources.get(source)
	if src == nil || !a.sees(src.Owner, true) {
		return nil, nil
	}
	w, err := s.validateWatch(src, data)
	if err != nil {
		return nil, nil
	}
	w.Owner, w.ManagedBy = a.Owner, ManagedByAPI
	out, err := scanWatch(tx.QueryRow(ctx, queryCreateWatchOnSource, w.Source, w.Name, w.Owner, w.ManagedBy, w.Definition, w.Hash, src.Owner, src.Hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, uniqueConflict(err, fmt.Sprintf("watch name %q on source %q", w.Name, w.Source))
	}
	return out, nil
}

// versionOf is w's version, 0 without a watch.
func versionOf(w *Watch) int64 {
	if w == nil {
		return 0
	}
	return w.Version
}

// createWatchRow inserts a new watch with a new config version, in one
// statement: a name in use (committed, or by a transaction that commits
// while the insert waits on it) inserts nothing, and is then read to say
// whose it is (watchNameConflict).
func createWatchRow(ctx context.Context, tx pgx.Tx, a Actor, w *Watch) (*Watch, error) {
	out, err := scanWatch(tx.QueryRow(ctx, queryCreateWatch, w.Source, w.Name, w.Owner, w.ManagedBy, w.Definition, w.Hash))
	if err == nil {
		return out, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, uniqueConflict(err, fmt.Sprintf("watch name %q on source %q", w.Name, w.Source))
	}
	cur, err := getWatch(ctx, tx, w.Source, w.Name, false)
	if errors.Is(err, ErrNotFound) {
		// Deleted between the two statements: still not this create's.
		return nil, &ConflictError{What: fmt.Sprintf("watch name %q is not available on source %q", w.Name, w.Source), Msg: watchNameTaken}
	}
	if err != nil {
		return nil, err
	}
	return nil, watchNameConflict(a, cur)
}

// orphanedMsg says what an orphaned source is.
func orphanedMsg(src *Source) string {
	return fmt.Sprintf("is orphaned since %s: its file %s left the configuration directory; it keeps its watches but does not run until a file declares it again",
		src.OrphanedAt.UTC().Format(time.RFC3339), FileOf(src.ManagedBy))
}

// withSources fills the watches' SourceOrphanedAt from their sources.
func withSources(ctx context.Context, q querier, ws []Watch) ([]Watch, error) {
	if len(ws) == 0 {
		return ws, nil
	}
	var names []string
	for _, w := range ws {
		if len(names) == 0 || names[len(names)-1] != w.Source {
			names = append(names, w.Source)
		}
	}
	rows, err := q.Query(ctx, queryOrphaned, names)
	if err != nil {
		return nil, fmt.Errorf("read the sources of watches: %w", err)
	}
	orphaned := map[string]*time.Time{}
	for rows.Next() {
		var name string
		var at time.Time
		if err := rows.Scan(&name, &at); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the sources of watches: %w", err)
		}
		orphaned[name] = &at
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the sources of watches: %w", err)
	}
	for i := range ws {
		ws[i].SourceOrphanedAt = orphaned[ws[i].Source]
	}
	return ws, nil
}

// withSource is withSources of one watch.
func withSource(ctx context.Context, q querier, w *Watch, err error) (*Watch, error) {
	if err != nil || w == nil {
		return w, err
	}
	ws, err := withSources(ctx, q, []Watch{*w})
	if err != nil {
		return nil, err
	}
	return &ws[0], nil
}

// UpdateWatch replaces the actor's watch with data (its name unchanged).
func (s *Store) UpdateWatch(ctx context.Context, a Actor, source, name string, data []byte) (*Watch, error) {
	var out *Watch
	err := s.change(ctx, func(tx pgx.Tx, v int64) error {
		cur, err := s.writableWatch(ctx, tx, a, source, name)
		if err != nil {
			return err
		}
		src, err := getSource(ctx, tx, source, false)
		if err != nil {
			return err
		}
		w, err := s.validateWatch(src, data)
		if err != nil {
			return err
		}
		if w.Name != name {
			return &ValidationError{Problems: []Problem{{Pointer: "/name", Message: fmt.Sprintf("is %q but the watch is %q: a watch cannot be renamed", w.Name, name)}}}
		}
		out, err = scanWatch(tx.QueryRow(ctx, queryUpdateWatch, source, name, cur.Owner, cur.ManagedBy, w.Definition, w.Hash, v))
		return err
	})
	return withSource(ctx, s.pool, out, err)
}

// DeleteWatch deletes the actor's watch.
func (s *Store) DeleteWatch(ctx context.Context, a Actor, source, name string) error {
	return s.change(ctx, func(tx pgx.Tx, v int64) error {
		cur, err := s.writableWatch(ctx, tx, a, source, name)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queryDeleteWatch, source, name); err != nil {
			return fmt.Errorf("delete watch %s/%s: %w", source, name, err)
		}
		if _, err := tx.Exec(ctx, queryRecordDeletion, v, source, name, cur.Owner, cur.ManagedBy); err != nil {
			return fmt.Errorf("delete watch %s/%s: %w", source, name, err)
		}
		return nil
	})
}

// PauseWatch pauses (or with paused false resumes) the actor's watch: the
// evaluators skip it until resumed.
func (s *Store) PauseWatch(ctx context.Context, a Actor, source, name string, paused bool, reason string) (*Watch, error) {
	var out *Watch
	err := s.change(ctx, func(tx pgx.Tx, v int64) error {
		if _, err := s.writableWatch(ctx, tx, a, source, name); err != nil {
			return err
		}
		var r *string
		if paused {
			r = &reason
		}
		var err error
		out, err = scanWatch(tx.QueryRow(ctx, queryPauseWatch, source, name, paused, r, v))
		return err
	})
	return withSource(ctx, s.pool, out, err)
}

// GetWatch returns a watch the actor sees (its own).
func (s *Store) GetWatch(ctx context.Context, a Actor, source, name string) (*Watch, error) {
	w, err := getWatch(ctx, s.pool, source, name, false)
	if err != nil {
		return nil, err
	}
	if !a.sees(w.Owner, false) {
		return nil, ErrNotFound
	}
	return withSource(ctx, s.pool, w, nil)
}

// ListWatches lists the watches the actor sees, of source ("" for all),
// by source and name.
func (s *Store) ListWatches(ctx context.Context, a Actor, source string, opt ListOptions) ([]Watch, error) {
	rows, err := s.pool.Query(ctx, queryListWatches, a.Admin, a.Owner, source, opt.AfterSource, opt.After, opt.limit())
	if err != nil {
		return nil, fmt.Errorf("list watches: %w", err)
	}
	ws, err := pgx.CollectRows(rows, watchRow)
	if err != nil {
		return nil, err
	}
	return withSources(ctx, s.pool, ws)
}

func (s *Store) writableWatch(ctx context.Context, tx pgx.Tx, a Actor, source, name string) (*Watch, error) {
	cur, err := getWatch(ctx, tx, source, name, true)
	if err != nil {
		return nil, err
	}
	if !a.sees(cur.Owner, false) {
		return nil, ErrNotFound
	}
	if f := FileOf(cur.ManagedBy); f != "" {
		return nil, &ConflictError{What: fmt.Sprintf("watch %q of source %q", name, source), File: f,
			Msg: "change the file; the API cannot change it"}
	}
	return cur, nil
}

// ValidateWatch validates one watch (YAML or JSON) against the stored
// source it would watch: the source's definition with this one watch goes
// through the one validation path. Problems point into the watch (/when).
func (s *Store) ValidateWatch(ctx context.Context, a Actor, source string, data []byte) (*Watch, error) {
	src, err := s.GetSource(ctx, a, source)
	if err != nil {
		return nil, err
	}
	return s.validateWatch(src, data)
}

func (s *Store) validateWatch(src *Source, data []byte) (*Watch, error) {
	raw, err := watchJSON(data)
	if err != nil {
		return nil, &ValidationError{Problems: []Problem{{Message: err.Error()}}}
	}
	doc, err := document(src.Definition, raw)
	if err != nil {
		return nil, err
	}
	parsed, err := s.validator.Sent(doc, "watches[0]")
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			ve.Problems = rebase(ve.Problems, "/watches/0")
		}
		return nil, err
	}
	ws, err := parsedWatches(parsed, "", "")
	if err != nil {
		return nil, err
	}
	if len(ws) != 1 {
		return nil, &ValidationError{Problems: []Problem{{Message: "want one watch"}}}
	}
	return &ws[0], nil
}

// rebase makes the pointers under prefix relative to it; others point at
// the source and say so.
func rebase(ps []Problem, prefix string) []Problem {
	for i, p := range ps {
		switch {
		case p.Pointer == prefix:
			ps[i].Pointer = ""
		case len(p.Pointer) > len(prefix) && p.Pointer[:len(prefix)+1] == prefix+"/":
			ps[i].Pointer = p.Pointer[len(prefix):]
		case p.Pointer != "":
			ps[i].Message = "the source's " + p.Pointer + " " + p.Message
			ps[i].Pointer = ""
		}
	}
	return ps
}

// watchJSON is a watch's definition as JSON, to join to its source's
// (document): a JSON object (what the API and the MCP tools send) as it
// is, since Validator.Sent parses the joined document (keys, types, size,
// duplicates) anyway; YAML through toJSON.
func watchJSON(data []byte) (json.RawMessage, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' && len(t) <= config.MaxDocumentBytes && json.Valid(t) {
		return t, nil
	}
	return toJSON(data)
}

// toJSON reads one YAML or JSON document as canonical JSON, without
// expanding anything.
func toJSON(data []byte) (json.RawMessage, error) {
	return config.DefinitionJSON(data)
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getSource(ctx context.Context, q queryRower, name string, lock bool) (*Source, error) {
	sql := queryGetSource
	if lock {
		sql = queryGetSourceLocked
	}
	s, err := scanSource(q.QueryRow(ctx, sql, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return s, err
}

func getWatch(ctx context.Context, q queryRower, source, name string, lock bool) (*Watch, error) {
	sql := queryGetWatch
	if lock {
		sql = queryGetWatchLocked
	}
	w, err := scanWatch(q.QueryRow(ctx, sql, source, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return w, err
}

// querier runs a query: a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func watchesOf(ctx context.Context, tx querier, source string) ([]Watch, error) {
	rows, err := tx.Query(ctx, queryWatchesOf, source)
	if err != nil {
		return nil, fmt.Errorf("read watches of %s: %w", source, err)
	}
	return pgx.CollectRows(rows, watchRow)
}

func insertSource(ctx context.Context, tx pgx.Tx, r *Source, v int64) (*Source, error) {
	out, err := scanSource(tx.QueryRow(ctx, queryInsertSource, r.Name, r.Owner, r.ManagedBy, r.Connector, r.Definition, r.Hash, v))
	if err != nil {
		return nil, uniqueConflict(err, fmt.Sprintf("source name %q", r.Name))
	}
	return out, nil
}

func insertWatch(ctx context.Context, tx pgx.Tx, w *Watch, v int64) (*Watch, error) {
	out, err := scanWatch(tx.QueryRow(ctx, queryInsertWatch, w.Source, w.Name, w.Owner, w.ManagedBy, w.Definition, w.Hash, v))
	if err != nil {
		return nil, uniqueConflict(err, fmt.Sprintf("watch name %q on source %q", w.Name, w.Source))
	}
	return out, nil
}

// Names are unique across owners (the primary keys of source_definitions
// and watches), so a create of a name another owner holds is refused; the
// conflict says only that the name is not available, never whose it is or
// what holds it, so that refusals do not tell one owner about another's
// objects. A name the actor can see (its own, a shared source, an admin)
// is named plainly.
const (
	sourceNameTaken = "is not available: choose another name (source names are unique across all owners)"
	watchNameTaken  = "choose another name (a watch's name is unique on its source, across all owners)"
)

func sourceNameConflict(a Actor, existing *Source) error {
	switch {
	case a.owns(existing.Owner) && existing.Owner == a.Owner:
		return &ConflictError{What: fmt.Sprintf("you already have source %q", existing.Name), File: FileOf(existing.ManagedBy),
			Msg: "choose another name, or change that source"}
	case a.sees(existing.Owner, true):
		return &ConflictError{What: fmt.Sprintf("source %q", existing.Name), File: FileOf(existing.ManagedBy),
			Msg: "exists already; choose another name"}
	}
	return &ConflictError{What: fmt.Sprintf("source name %q", existing.Name), Msg: sourceNameTaken, bare: true}
}

func watchNameConflict(a Actor, cur *Watch) error {
	if a.owns(cur.Owner) {
		return &ConflictError{What: fmt.Sprintf("you already have watch %q of source %q", cur.Name, cur.Source), File: FileOf(cur.ManagedBy),
			Msg: "choose another name, or change that watch"}
	}
	return &ConflictError{What: fmt.Sprintf("watch name %q is not available on source %q", cur.Name, cur.Source), Msg: watchNameTaken}
}

// uniqueConflict turns a unique violation (a concurrent create of the
// same name, whoever's) into a *ConflictError that names no owner.
func uniqueConflict(err error, what string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return &ConflictError{What: what, Msg: "is not available: choose another name (names are unique across all owners)", bare: true}
	}
	return fmt.Errorf("write %s: %w", what, err)
}

func scanSource(row pgx.Row) (*Source, error) {
	var s Source
	if err := row.Scan(&s.Name, &s.Owner, &s.ManagedBy, &s.Connector, &s.Definition, &s.Hash, &s.Paused,
		&s.PausedReason, &s.Version, &s.CreatedAt, &s.UpdatedAt, &s.OrphanedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read source definition: %w", err)
	}
	return &s, nil
}

// watchRow is scanWatch as a pgx.RowToFunc, for reading many watches.
func watchRow(r pgx.CollectableRow) (Watch, error) {
	w, err := scanWatch(r)
	if err != nil {
		return Watch{}, err
	}
	return *w, nil
}

func scanWatch(row pgx.Row) (*Watch, error) {
	var w Watch
	if err := row.Scan(&w.Source, &w.Name, &w.Owner, &w.ManagedBy, &w.Definition, &w.Hash, &w.Paused,
		&w.PausedReason, &w.Version, &w.CreatedAt, &w.UpdatedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read watch definition: %w", err)
	}
	return &w, nil
}

// Lookup returns the definition of source name whoever owns it, or
// ErrNotFound: for the daemons' own reads (the api's webhook ingest finds
// the webhook block of the source a delivery names), never for a caller
// scoped by owner (use Store.GetSource).
func Lookup(ctx context.Context, pool *pgxpool.Pool, name string) (*Source, error) {
	s, err := getSource(ctx, pool, name, false)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("read the definition of source %s: %w", name, err)
	}
	return s, err
}
