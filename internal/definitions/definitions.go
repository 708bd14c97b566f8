// Package definitions owns the definitions of sources and watches in
// PostgreSQL (source_definitions, watches, config_version and
// config_version_seq, definition_deletions): the single truth the syncer
// and the evaluator read. The configuration directory is loaded into them (Apply, one
// transaction, by content hash); the control plane (cmd/api) creates,
// changes, pauses and deletes them through Store, scoped by owner; the
// daemons follow them (Follower, Watcher) by MVCC snapshot, woken by
// NOTIFY on <schema>.config.
//
// A definition is the validated source or watch as JSON in the shape of
// a source file (the connector block raw, ${ENV} references unexpanded),
// with its owner (” for the operator's shared sources) and who manages
// it: "file:sources/acme.yaml" or "api". A file-managed definition is
// read-only to the API (*ConflictError naming the file). Every change
// takes a config version from a sequence (config_version_seq), without a
// lock, so changes of different owners commit in parallel; versions are
// for people, logs and metrics, and do not order commits. Every row
// records the transaction that wrote it (xid, stamped by a trigger): a
// follower keeps the snapshot of its last catch-up and reads the rows
// that snapshot did not see, so it never misses a change, even one that
// committed after a change with a larger version.
//
// Validation is the one path of `check`: config.ParseSource (keys, types,
// defaults, the connector's block) and the binary's build of what it runs
// (Check: syncer.Build, watchspec.Check), with errors located by a JSON
// pointer (*ValidationError).
package definitions

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"encoding/json"
)

// ManagedByAPI is managed_by of definitions created through the API.
const ManagedByAPI = "api"

// filePrefix starts managed_by of file-managed definitions.
const filePrefix = "file:"

// ManagedByFile is managed_by of a definition declared in path (relative
// to the configuration directory, e.g. sources/acme.yaml).
func ManagedByFile(path string) string { return filePrefix + path }

// FileOf returns the file of a file-managed managed_by, or "".
func FileOf(managedBy string) string {
	f, _ := strings.CutPrefix(managedBy, filePrefix)
	if f == managedBy {
		return ""
	}
	return f
}

// Channel is the NOTIFY channel of schema's definitions, signalled (with
// the new version as payload, a hint only) when a change commits.
func Channel(schema string) string { return schema + ".config" }

// Source is a row of source_definitions.
type Source struct {
	Name string
	// Owner is the user the source belongs to; "" for a shared source
	// declared by the operator.
	Owner string
	// ManagedBy is "file:<path>" or "api".
	ManagedBy string
	Connector string
	// Definition is the source's keys as JSON, without its watches.
	Definition json.RawMessage
	// Hash identifies the definition (sha256 of its canonical JSON).
	Hash         string
	Paused       bool
	PausedReason string
	// Version is the config version of the row's last change.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// OrphanedAt is set while the source is orphaned: its file left the
	// configuration directory while users still watched it (Apply). It
	// is kept with their watches, and not run, until a file declares it
	// again.
	OrphanedAt *time.Time
}

// Orphaned reports whether the source is orphaned (OrphanedAt).
func (s *Source) Orphaned() bool { return s.OrphanedAt != nil }

// Label names the definition in errors: its file, or "source NAME".
func (s *Source) Label() string {
	if f := FileOf(s.ManagedBy); f != "" {
		return f
	}
	return "source " + s.Name
}

// Watch is a row of watches.
type Watch struct {
	Source string
	Name   string
	// Owner is the user the watch belongs to; "" for the operator's.
	Owner     string
	ManagedBy string
	// Definition is the watch's keys as JSON (one item of a source
	// file's watches).
	Definition   json.RawMessage
	Hash         string
	Paused       bool
	PausedReason string
	Version      int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// SourceOrphanedAt is the source's OrphanedAt, filled by the Store's
	// reads for the API (GetWatch, ListWatches, ...): the watch is kept
	// but its source does not run.
	SourceOrphanedAt *time.Time
}

// ErrNotFound is returned for a definition that does not exist or that
// the caller may not see (another owner's): the API answers 404 to both.
var ErrNotFound = errors.New("not found")

// ConflictError is a change the definitions refuse as they stand: a
// file-managed definition changed through the API (File names the file),
// a name already taken, or a shared definition changed by a user.
type ConflictError struct {
	// What is "source x" or "watch x of source y".
	What string
	// File is the file that manages the definition, when one does.
	File string
	// Msg says what to do instead.
	Msg string
	// bare joins What and Msg with a space ("source name x is not
	// available: ...") instead of ": ".
	bare bool
}

func (e *ConflictError) Error() string {
	if e.File != "" {
		return fmt.Sprintf("%s is managed by the configuration file %s: %s", e.What, e.File, e.Msg)
	}
	if e.bare {
		return e.What + " " + e.Msg
	}
	return e.What + ": " + e.Msg
}

// Actor is who asks: a user (Owner) or an admin, who sees and changes
// every owner's definitions.
type Actor struct {
	Owner string
	Admin bool
}

// sees reports whether a may read a definition of owner; shared sources
// (owner "") are visible to everyone when shared is set.
func (a Actor) sees(owner string, shared bool) bool {
	return a.Admin || owner == a.Owner || (shared && owner == "")
}

// owns reports whether a may change a definition of owner.
func (a Actor) owns(owner string) bool { return a.Admin || owner == a.Owner }
