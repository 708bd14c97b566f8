package definitions

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
)

// Diff is what Apply changed: "source" or "source/watch" names, sorted.
type Diff struct {
	// Version is the config version after the change; unchanged when
	// nothing changed.
	Version                 int64
	Added, Changed, Removed []string
}

// Empty reports whether Apply changed nothing.
func (d Diff) Empty() bool { return len(d.Added)+len(d.Changed)+len(d.Removed) == 0 }

func (d Diff) String() string {
	if d.Empty() {
		return "no change"
	}
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", d.Added}, {"changed", d.Changed}, {"removed", d.Removed}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

type applyRow struct {
	owner, managedBy, hash string
}

// Apply makes the file-managed definitions those of cfg, a loaded and
// checked configuration directory: sources and watches added, changed
// (by content hash) and removed, in one transaction, with one config
// version bump when anything changed and none otherwise. Replicas may
// apply at once: an advisory lock makes them take turns, and the second
// finds nothing to do. Definitions made through the API are left alone;
// a file declaring a name the API already uses is an error naming the
// file. A source removed from the directory loses its definition (and
// its watches, API-made ones included); its sources row, records and
// history stay, as they did when a file was removed before.
func Apply(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) (Diff, error) {
	type fileSource struct {
		row     Source
		watches []Watch
	}
	files := make([]fileSource, 0, len(cfg.Sources))
	for _, src := range cfg.Sources {
		row, watches, err := Split(src, "", ManagedByFile(src.Path))
		if err != nil {
			return Diff{}, err
		}
		files = append(files, fileSource{row, watches})
	}
	var diff Diff
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		diff = Diff{}
		if _, err := tx.Exec(ctx, queryApplyLock); err != nil {
			return fmt.Errorf("lock definitions: %w", err)
		}
		sources := map[string]applyRow{}
		rows, err := tx.Query(ctx, queryApplySources)
		if err != nil {
			return fmt.Errorf("read source definitions: %w", err)
		}
		for rows.Next() {
			var name string
			var r applyRow
			if err := rows.Scan(&name, &r.owner, &r.managedBy, &r.hash); err != nil {
				return fmt.Errorf("read source definitions: %w", err)
			}
			sources[name] = r
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read source definitions: %w", err)
		}
		watches := map[[2]string]applyRow{}
		rows, err = tx.Query(ctx, queryApplyWatches)
		if err != nil {
			return fmt.Errorf("read watch definitions: %w", err)
		}
		for rows.Next() {
			var k [2]string
			var r applyRow
			if err := rows.Scan(&k[0], &k[1], &r.owner, &r.managedBy, &r.hash); err != nil {
				return fmt.Errorf("read watch definitions: %w", err)
			}
			watches[k] = r
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read watch definitions: %w", err)
		}

		// The plan, then one version for all of it.
		type op struct {
			sql  string
			args func(v int64) []any
		}
		var ops []op
		inFiles := map[string]bool{}
		for _, f := range files {
			r := f.row
			inFiles[r.Name] = true
			cur, ok := sources[r.Name]
			switch {
			case ok && FileOf(cur.managedBy) == "":
				return &config.Error{File: FileOf(r.ManagedBy), Line: 1, Key: "name",
					Msg: fmt.Sprintf("%q is already the name of a source created through the API (owner %q): rename one of them", r.Name, cur.owner)}
			case !ok:
				diff.Added = append(diff.Added, r.Name)
				ops = append(ops, op{queryInsertSource, func(v int64) []any {
					return []any{r.Name, r.Owner, r.ManagedBy, r.Connector, r.Definition, r.Hash, v}
				}})
			case cur.hash != r.Hash || cur.managedBy != r.ManagedBy || cur.owner != r.Owner:
				diff.Changed = append(diff.Changed, r.Name)
				ops = append(ops, op{queryUpdateSource, func(v int64) []any {
					return []any{r.Name, r.Owner, r.ManagedBy, r.Connector, r.Definition, r.Hash, v}
				}})
			}
			inFile := map[string]bool{}
			for i, w := range f.watches {
				inFile[w.Name] = true
				key := r.Name + "/" + w.Name
				cur, ok := watches[[2]string{w.Source, w.Name}]
				switch {
				case ok && FileOf(cur.managedBy) == "":
					return &config.Error{File: FileOf(r.ManagedBy), Line: 1, Key: fmt.Sprintf("watches[%d].name", i),
						Msg: fmt.Sprintf("%q is already the name of a watch of this source created through the API (owner %q): rename one of them", w.Name, cur.owner)}
				case !ok:
					diff.Added = append(diff.Added, key)
					ops = append(ops, op{queryInsertWatch, func(v int64) []any {
						return []any{w.Source, w.Name, w.Owner, w.ManagedBy, w.Definition, w.Hash, v}
					}})
				case cur.hash != w.Hash || cur.managedBy != w.ManagedBy || cur.owner != w.Owner:
					diff.Changed = append(diff.Changed, key)
					ops = append(ops, op{queryUpdateWatch, func(v int64) []any {
						return []any{w.Source, w.Name, w.Owner, w.ManagedBy, w.Definition, w.Hash, v}
					}})
				}
			}
			// File-managed watches of this source the file no longer has.
			for k, cur := range watches {
				if k[0] != r.Name || inFile[k[1]] || FileOf(cur.managedBy) == "" {
					continue
				}
				diff.Removed = append(diff.Removed, k[0]+"/"+k[1])
				ops = append(ops, op{queryDeleteWatch, func(int64) []any { return []any{k[0], k[1]} }},
					op{queryRecordDeletion, func(v int64) []any { return []any{v, k[0], k[1], cur.owner, cur.managedBy} }})
			}
		}
		for name, cur := range sources {
			if inFiles[name] || FileOf(cur.managedBy) == "" {
				continue
			}
			diff.Removed = append(diff.Removed, name)
			ops = append(ops, op{queryDeleteSource, func(int64) []any { return []any{name} }},
				op{queryRecordDeletion, func(v int64) []any { return []any{v, name, "", cur.owner, cur.managedBy} }})
		}
		if len(ops) == 0 {
			return tx.QueryRow(ctx, queryVersion).Scan(&diff.Version)
		}
		if err := tx.QueryRow(ctx, queryBump).Scan(&diff.Version); err != nil {
			return fmt.Errorf("bump config version: %w", err)
		}
		// Sources before their watches: inserts and updates in plan
		// order, deletions of sources last (they cascade to watches).
		b := &pgx.Batch{}
		for _, o := range ops {
			b.Queue(o.sql, o.args(diff.Version)...)
		}
		b.Queue(queryNotify, strconv.FormatInt(diff.Version, 10))
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("write definitions: %w", err)
		}
		return nil
	})
	if err != nil {
		return Diff{}, fmt.Errorf("apply the configuration directory: %w", err)
	}
	slices.Sort(diff.Added)
	slices.Sort(diff.Changed)
	slices.Sort(diff.Removed)
	return diff, nil
}
