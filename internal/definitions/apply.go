package definitions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/iter"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/config"
)

// Diff is what Apply changed: "source" or "source/watch" names, sorted.
type Diff struct {
	// Version is the config version of the change; when nothing
	// changed, the last version taken.
	Version                 int64
	Added, Changed, Removed []string
	// Orphaned are the sources whose file left the directory while users
	// still watch them: kept with those watches, not run
	// (Source.OrphanedAt). Their file's own watches are in Removed.
	Orphaned []string
	// Adopted are orphaned sources a file declares again: their users'
	// watches were kept and work again.
	Adopted []string
	// Generation is the applied generation of the directory after the
	// apply (config_generations), and Hash the directory's
	// (DirectoryHash).
	Generation int64
	Hash       string
}

// Empty reports whether Apply changed nothing.
func (d Diff) Empty() bool {
	return len(d.Added)+len(d.Changed)+len(d.Removed)+len(d.Orphaned)+len(d.Adopted) == 0
}

func (d Diff) String() string {
	if d.Empty() {
		return "no change"
	}
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"added", d.Added}, {"changed", d.Changed}, {"removed", d.Removed}, {"orphaned", d.Orphaned}, {"adopted", d.Adopted}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// ApplyOptions says how Apply treats a directory that differs from the
// applied generation.
type ApplyOptions struct {
	// Force applies the directory whatever generation is applied (`apply
	// --force`): an older directory, or another one. Defaults to false.
	Force bool
	// Base is the hash of the directory the caller loaded last (a
	// running daemon's reload): when it is the applied generation's, the
	// directory changed under a daemon that was in step, and the change
	// is applied. Defaults to "" (a start: no directory before).
	Base string
	// By names who applies, for config_generations.applied_by and the
	// audit rows (the binary, its host and its directory). Defaults to
	// "lookout".
	By string
}

// Generation is an applied configuration directory (config_generations).
type Generation struct {
	Number int64
	// Hash is the directory's DirectoryHash.
	Hash string
	// Version is the config version after its apply.
	Version   int64
	Forced    bool
	AppliedBy string
	AppliedAt time.Time
}

// DivergedError is Apply's refusal of a directory that differs from the
// applied generation when the caller was not in step with it (a start
// with another directory, an older one, a reload of a daemon already
// refused): nothing was written. Diff is what it would have changed.
type DivergedError struct {
	// Hash is the refused directory's.
	Hash string
	// Applied is the generation in the database.
	Applied Generation
	// Older is the generation the directory was applied as before (a
	// directory that was replaced since), or 0.
	Older int64
	Diff  Diff
}

func (e *DivergedError) Error() string {
	what := "differs from"
	if e.Older > 0 {
		what = fmt.Sprintf("is generation %d, older than", e.Older)
	}
	return fmt.Sprintf("the configuration directory (hash %s) %s the applied generation %d (hash %s, applied by %s at %s): not applied; "+
		"the definitions stay those of generation %d (run `apply --force` with this directory to apply it: it would %s)",
		short(e.Hash), what, e.Applied.Number, short(e.Applied.Hash), e.Applied.AppliedBy, e.Applied.AppliedAt.UTC().Format(time.RFC3339),
		e.Applied.Number, e.Diff.wouldString())
}

func (d Diff) wouldString() string {
	if d.Empty() {
		return "change no definition"
	}
	return d.String()
}

// short is a hash as messages print it.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// Short is a directory hash as messages print it (its first 12 digits).
func Short(hash string) string { return short(hash) }

// DirectoryHash is the hash of the definitions of a configuration
// directory: every source's and watch's name, file and content hash
// (comments, key order and formatting do not count). It names the
// directory's generation.
func DirectoryHash(cfg *config.Config) (string, error) {
	files, err := splitFiles(cfg)
	if err != nil {
		return "", err
	}
	return directoryHash(files), nil
}

// splitFiles splits every source of the directory into its definition
// rows, once: Apply's plan and the directory's hash read the same split.
func splitFiles(cfg *config.Config) ([]fileSource, error) {
	// On every core: the canonical JSON of 100,000 watches is a good
	// part of a daemon's start (docs/benchmarks.md (13)).
	files := make([]fileSource, len(cfg.Sources))
	errs := make([]error, len(cfg.Sources))
	iter.ForEachIdx(files, func(i int, f *fileSource) {
		src := cfg.Sources[i]
		f.row, f.watches, errs[i] = Split(src, "", ManagedByFile(src.Path))
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// directoryHash is DirectoryHash of the directory's split sources.
func directoryHash(files []fileSource) string {
	var lines []string
	for _, f := range files {
		row := f.row
		lines = append(lines, row.Name+"\x00"+row.ManagedBy+"\x00"+row.Hash)
		for _, w := range f.watches {
			lines = append(lines, row.Name+"/"+w.Name+"\x00"+w.ManagedBy+"\x00"+w.Hash)
		}
	}
	slices.Sort(lines)
	sum := sha256.New()
	for i, l := range lines {
		if i > 0 {
			sum.Write([]byte{'\n'})
		}
		sum.Write([]byte(l))
	}
	return hex.EncodeToString(sum.Sum(nil))
}

type applyRow struct {
	owner, managedBy, hash string
	orphaned               bool
}

// Apply makes the file-managed definitions those of cfg, a loaded and
// checked configuration directory: sources and watches added, changed
// (by content hash) and removed, in one transaction, with one config
// version bump when anything changed and none otherwise. Replicas may
// apply at once: an advisory lock makes them take turns, and the second
// finds nothing to do. Definitions made through the API are left alone;
// a file declaring a name the API already uses is an error naming the
// file.
//
// Nothing a user made is deleted: a source removed from the directory
// loses its file's own watches, and is deleted when no other watch is
// left; a source users still watch is orphaned instead (kept with their
// watches, not run, an audit row for it and for each of their watches),
// and adopted again, watches intact, when a file declares it. Its sources
// row, records and history stay either way.
//
// The directory is applied when it is the applied generation's, when no
// generation was applied yet, when opts.Base is the applied generation's
// hash (a running daemon's directory changed) or with opts.Force;
// otherwise nothing is written and the error is a *DivergedError.
func Apply(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, opts ApplyOptions) (Diff, error) {
	diff, _, err := ApplyKept(ctx, pool, cfg, opts)
	return diff, err
}

// ApplyKept is Apply that also returns the directory's parse as applied
// (nil when Apply returns an error): a daemon's follower takes its
// sources in its first load (Follower.Reuse) instead of parsing their
// rows again.
func ApplyKept(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, opts ApplyOptions) (Diff, *Applied, error) {
	files, err := splitFiles(cfg)
	if err != nil {
		return Diff{}, nil, err
	}
	dirHash := directoryHash(files)
	by := opts.By
	if by == "" {
		by = "lookout"
	}
	var diff Diff
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		diff = Diff{Hash: dirHash}
		if _, err := tx.Exec(ctx, queryApplyLock); err != nil {
			return fmt.Errorf("lock definitions: %w", err)
		}
		p, err := readApplied(ctx, tx, by, &diff)
		if err != nil {
			return err
		}
		// The plan, then one version for all of it.
		inFiles := make(map[string]bool, len(files))
		if len(p.watches) == 0 {
			// A first apply adds every watch: one allocation for
			// them, not log2(n) copies of a growing slice.
			n := 0
			for _, f := range files {
				n += len(f.watches)
			}
			p.insertWatches = make([]Watch, 0, n)
			p.diff.Added = make([]string, 0, n+len(files))
		}
		for _, f := range files {
			inFiles[f.row.Name] = true
			if err := p.planFile(f); err != nil {
				return err
			}
		}
		for _, name := range slices.Sorted(maps.Keys(p.sources)) {
			if !inFiles[name] {
				p.planGone(name)
			}
		}
		slices.Sort(diff.Added)
		slices.Sort(diff.Changed)
		slices.Sort(diff.Removed)
		slices.Sort(diff.Orphaned)
		slices.Sort(diff.Adopted)
		return p.write(ctx, tx, dirHash, opts)
	})
	if err != nil {
		var de *DivergedError
		if errors.As(err, &de) {
			return Diff{}, nil, err
		}
		return Diff{}, nil, fmt.Errorf("apply the configuration directory: %w", err)
	}
	applied := &Applied{sources: make(map[string]appliedSource, len(files))}
	for i, f := range files {
		a := appliedSource{src: cfg.Sources[i], hash: f.row.Hash, managedBy: f.row.ManagedBy, watches: make(map[string]string, len(f.watches))}
		for _, w := range f.watches {
			a.watches[w.Name] = w.Hash
		}
		applied.sources[f.row.Name] = a
	}
	return diff, applied, nil
}

// Applied is the parse of a configuration directory Apply applied
// (ApplyKept): each source as config parsed it, with the content hashes
// of its definition rows.
type Applied struct {
	sources map[string]appliedSource
}

type appliedSource struct {
	src             *config.Source
	hash, managedBy string
	// watches are the hashes of the file's watches by name.
	watches map[string]string
}

// take returns the parse of the source of row s with the watch rows ws
// when those rows are exactly what the directory declared (the source's
// and every watch's hash, no other watch), its watches in the order of
// ws; otherwise nil. A source is taken once.
func (a *Applied) take(s *Source, ws []Watch) *config.Source {
	if !a.matches(s, ws) {
		return nil
	}
	as := a.sources[s.Name]
	delete(a.sources, s.Name)
	src := as.src
	// The watches in the rows' order (Delta: index-aligned).
	byName := make(map[string]int, len(src.Watches))
	for i := range src.Watches {
		byName[src.Watches[i].Name] = i
	}
	ordered := make([]*config.Watch, len(ws))
	for i, w := range ws {
		ordered[i] = src.Watches[byName[w.Name]]
	}
	src.Watches = ordered
	src.Hash = s.Hash
	src.Path = FileOf(s.ManagedBy)
	src.ForgetLines() // as a parse of the rows: the lines of the stored JSON are not the file's
	return src
}

// matches reports whether the rows of source s and its watches ws are
// exactly what the directory declared (take takes them).
func (a *Applied) matches(s *Source, ws []Watch) bool {
	if a == nil {
		return false
	}
	as, ok := a.sources[s.Name]
	if !ok || as.hash != s.Hash || as.managedBy != s.ManagedBy || len(as.watches) != len(ws) || len(as.src.Watches) != len(ws) {
		return false
	}
	for _, w := range ws {
		if h, ok := as.watches[w.Name]; !ok || h != w.Hash || w.ManagedBy != s.ManagedBy {
			return false
		}
	}
	return true
}

// readWatches reads every watch of a first load in tx that takes the
// directory's parse (Follower.Reuse): the rows without their definitions
// (a start on 100,000 watches does not read their JSON back to drop it),
// then, whole, the watches of the sources whose rows are not exactly the
// directory's (take parses them from their rows), in tx's snapshot.
func (a *Applied) readWatches(ctx context.Context, tx pgx.Tx, sources []Source) ([]Watch, error) {
	// Sized for the directory's watches: 100,000 rows are not copied
	// from one growing slice to the next.
	n := 0
	for _, as := range a.sources {
		n += len(as.watches)
	}
	rows, err := tx.Query(ctx, queryAllWatchesBare)
	if err != nil {
		return nil, err
	}
	bare, err := pgx.AppendRows(make([]Watch, 0, n), rows, watchRow)
	if err != nil {
		return nil, err
	}
	bySource := make(map[string][]Watch, len(sources))
	for start := 0; start < len(bare); {
		end := start + 1
		for end < len(bare) && bare[end].Source == bare[start].Source {
			end++
		}
		bySource[bare[start].Source] = bare[start:end:end]
		start = end
	}
	var whole []string
	for i := range sources {
		s := &sources[i]
		if !a.matches(s, bySource[s.Name]) {
			whole = append(whole, s.Name)
		}
		delete(bySource, s.Name)
	}
	// A watch without its source in the snapshot (none: the foreign
	// key) would be read whole too.
	for name := range bySource {
		whole = append(whole, name)
	}
	if len(whole) == 0 {
		return bare, nil
	}
	full, err := collect[Watch](tx.Query(ctx, queryWatchesOfAny, whole))(scanWatch)
	if err != nil {
		return nil, err
	}
	byKey := make(map[[2]string]int, len(full))
	for i := range full {
		byKey[[2]string{full[i].Source, full[i].Name}] = i
	}
	for i := range bare {
		if j, ok := byKey[[2]string{bare[i].Source, bare[i].Name}]; ok {
			bare[i] = full[j]
		}
	}
	return bare, nil
}

// fileSource is a source of the directory split into its definition rows.
type fileSource struct {
	row     Source
	watches []Watch
}

// applyOp is a statement of Apply's plan; its arguments take the config
// version the plan is written at.
type applyOp struct {
	sql  string
	args func(v int64) []any
}

// applyAudit is an audit row of Apply's plan.
type applyAudit struct {
	entry         audit.Entry
	before, after any
}

// applyPlan is what Apply decides, under its lock, before it writes: the
// definitions applied before, the statements to run, the audit rows and
// the diff.
type applyPlan struct {
	by      string
	sources map[string]applyRow
	watches map[[2]string]applyRow
	// watchNames are the names of each source's watches in watches: a
	// file's plan looks at its source's, not at every watch applied.
	watchNames map[string][]string
	// userWatches are the watches of each source users made (not a file's).
	userWatches map[string][]string
	diff        *Diff
	// The rows added and changed (adopted sources among the changed),
	// written in bulk (writeRows), sources before watches.
	insertSources, updateSources []Source
	insertWatches, updateWatches []Watch
	// ops are the other statements (deletions, tombstones, orphans), run
	// after the rows in plan order.
	ops    []applyOp
	audits []applyAudit
}

// writes reports whether the plan writes anything.
func (p *applyPlan) writes() bool {
	return len(p.ops)+len(p.insertSources)+len(p.updateSources)+len(p.insertWatches)+len(p.updateWatches) > 0
}

// readApplied reads the source and watch definitions applied before into
// a plan that writes as by.
func readApplied(ctx context.Context, tx pgx.Tx, by string, diff *Diff) (*applyPlan, error) {
	p := &applyPlan{by: by, diff: diff, sources: map[string]applyRow{}, watches: map[[2]string]applyRow{}, watchNames: map[string][]string{}, userWatches: map[string][]string{}}
	rows, err := tx.Query(ctx, queryApplySources)
	if err != nil {
		return nil, fmt.Errorf("read source definitions: %w", err)
	}
	for rows.Next() {
		var name string
		var r applyRow
		if err := rows.Scan(&name, &r.owner, &r.managedBy, &r.hash, &r.orphaned); err != nil {
			return nil, fmt.Errorf("read source definitions: %w", err)
		}
		p.sources[name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read source definitions: %w", err)
	}
	rows, err = tx.Query(ctx, queryApplyWatches)
	if err != nil {
		return nil, fmt.Errorf("read watch definitions: %w", err)
	}
	for rows.Next() {
		var k [2]string
		var r applyRow
		if err := rows.Scan(&k[0], &k[1], &r.owner, &r.managedBy, &r.hash); err != nil {
			return nil, fmt.Errorf("read watch definitions: %w", err)
		}
		p.watches[k] = r
		p.watchNames[k[0]] = append(p.watchNames[k[0]], k[1])
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read watch definitions: %w", err)
	}
	for k, w := range p.watches {
		if FileOf(w.managedBy) == "" {
			p.userWatches[k[0]] = append(p.userWatches[k[0]], k[1])
		}
	}
	return p, nil
}

// auditWatches audits the users' watches of source as action: they are
// reported to their owners (audit rows of their own).
func (p *applyPlan) auditWatches(action, source, file string, orphaned bool) {
	names := slices.Sorted(slices.Values(p.userWatches[source]))
	for _, n := range names {
		w := p.watches[[2]string{source, n}]
		p.audits = append(p.audits, applyAudit{
			entry: audit.Entry{Actor: p.by, Via: audit.ViaConfig, Action: action, Kind: "watch", Target: source + "/" + n, Owner: w.owner},
			after: map[string]any{"source": source, "name": n, "owner": w.owner, "source_orphaned": orphaned, "source_file": file}})
	}
}

// planFile plans a source of the directory and its watches: added,
// changed, adopted (an orphan a file declares again), and the file's
// watches it no longer has; a name users hold is refused.
func (p *applyPlan) planFile(f fileSource) error {
	r := f.row
	cur, ok := p.sources[r.Name]
	switch {
	case ok && FileOf(cur.managedBy) == "":
		return &config.Error{File: FileOf(r.ManagedBy), Line: 1, Key: "name",
			Msg: fmt.Sprintf("%q is already the name of a source created through the API (owner %q): rename one of them", r.Name, cur.owner)}
	case !ok:
		p.diff.Added = append(p.diff.Added, r.Name)
		p.insertSources = append(p.insertSources, r)
	case cur.orphaned:
		p.diff.Adopted = append(p.diff.Adopted, r.Name)
		p.updateSources = append(p.updateSources, r)
		file := FileOf(r.ManagedBy)
		p.audits = append(p.audits, applyAudit{
			entry:  audit.Entry{Actor: p.by, Via: audit.ViaConfig, Action: "adopt", Kind: "source", Target: r.Name, Owner: r.Owner},
			before: map[string]any{"name": r.Name, "managed_by": cur.managedBy, "orphaned": true},
			after:  map[string]any{"name": r.Name, "managed_by": r.ManagedBy, "orphaned": false, "watches": sortedOrEmpty(p.userWatches[r.Name])}})
		p.auditWatches("adopt", r.Name, file, false)
	case cur.hash != r.Hash || cur.managedBy != r.ManagedBy || cur.owner != r.Owner:
		p.diff.Changed = append(p.diff.Changed, r.Name)
		p.updateSources = append(p.updateSources, r)
	}
	var inFile map[string]bool // the file's watch names, when the source had watches
	if len(p.watchNames[r.Name]) > 0 {
		inFile = make(map[string]bool, len(f.watches))
	}
	for i, w := range f.watches {
		if inFile != nil {
			inFile[w.Name] = true
		}
		key := r.Name + "/" + w.Name
		cur, ok := p.watches[[2]string{w.Source, w.Name}]
		switch {
		case ok && FileOf(cur.managedBy) == "":
			return &config.Error{File: FileOf(r.ManagedBy), Line: 1, Key: fmt.Sprintf("watches[%d].name", i),
				Msg: fmt.Sprintf("%q is already the name of a watch of this source created through the API (owner %q): rename one of them", w.Name, cur.owner)}
		case !ok:
			p.diff.Added = append(p.diff.Added, key)
			p.insertWatches = append(p.insertWatches, w)
		case cur.hash != w.Hash || cur.managedBy != w.ManagedBy || cur.owner != w.Owner:
			p.diff.Changed = append(p.diff.Changed, key)
			p.updateWatches = append(p.updateWatches, w)
		}
	}
	// File-managed watches of this source the file no longer has.
	for _, name := range p.watchNames[r.Name] {
		k := [2]string{r.Name, name}
		cur := p.watches[k]
		if inFile[name] || FileOf(cur.managedBy) == "" {
			continue
		}
		p.diff.Removed = append(p.diff.Removed, k[0]+"/"+k[1])
		p.ops = append(p.ops, applyOp{queryDeleteWatch, func(int64) []any { return []any{k[0], k[1]} }},
			applyOp{queryRecordDeletion, func(v int64) []any { return []any{v, k[0], k[1], cur.owner, cur.managedBy} }})
	}
	return nil
}

// planGone plans a file-declared source no file declares any more: its
// file's watches go before it (no cascade, migration 29); it goes too
// when no user watches it, or it is kept as an orphan.
func (p *applyPlan) planGone(name string) {
	cur := p.sources[name]
	if FileOf(cur.managedBy) == "" {
		return
	}
	// The file's own watches go with the file, before the source
	// (no cascade, migration 29). A source that goes has one
	// tombstone for it and its watches; an orphan one per watch.
	keep := len(p.userWatches[name]) > 0
	for _, watch := range p.watchNames[name] {
		k := [2]string{name, watch}
		w := p.watches[k]
		if FileOf(w.managedBy) == "" {
			continue
		}
		p.ops = append(p.ops, applyOp{queryDeleteWatch, func(int64) []any { return []any{k[0], k[1]} }})
		if keep {
			p.diff.Removed = append(p.diff.Removed, k[0]+"/"+k[1])
			p.ops = append(p.ops, applyOp{queryRecordDeletion, func(v int64) []any { return []any{v, k[0], k[1], w.owner, w.managedBy} }})
		}
	}
	switch {
	case !keep:
		// Nobody else's: the source goes (an orphan whose users
		// deleted their watches too).
		p.diff.Removed = append(p.diff.Removed, name)
		p.ops = append(p.ops, applyOp{queryDeleteSource, func(int64) []any { return []any{name} }},
			applyOp{queryRecordDeletion, func(v int64) []any { return []any{v, name, "", cur.owner, cur.managedBy} }},
			applyOp{queryMarkSourceRemoved, func(int64) []any { return []any{name, FileOf(cur.managedBy) + " left the configuration directory"} }})
	case !cur.orphaned:
		p.diff.Orphaned = append(p.diff.Orphaned, name)
		p.ops = append(p.ops, applyOp{queryOrphanSource, func(v int64) []any { return []any{name, v} }})
		file := FileOf(cur.managedBy)
		p.audits = append(p.audits, applyAudit{
			entry:  audit.Entry{Actor: p.by, Via: audit.ViaConfig, Action: "orphan", Kind: "source", Target: name, Owner: cur.owner},
			before: map[string]any{"name": name, "managed_by": cur.managedBy, "orphaned": false},
			after: map[string]any{"name": name, "managed_by": cur.managedBy, "orphaned": true, "watches": sortedOrEmpty(p.userWatches[name]),
				"reason": file + " is not in the configuration directory applied; users still watch the source: it is kept, and does not run until a file declares it again"}})
		p.auditWatches("orphan", name, file, true)
	}
}

// write checks the generation, then writes the plan at one new config
// version (or reads the current one when there is nothing to write) with
// its audit rows, and records this directory's generation.
func (p *applyPlan) write(ctx context.Context, tx pgx.Tx, dirHash string, opts ApplyOptions) error {
	// The generation: the applied one, or this directory's.
	gen, err := appliedGeneration(ctx, tx)
	if err != nil {
		return err
	}
	newGeneration := gen == nil || gen.Hash != dirHash
	if newGeneration && gen != nil && !opts.Force && opts.Base != gen.Hash {
		var older int64
		if err := tx.QueryRow(ctx, queryGenerationOf, dirHash).Scan(&older); err != nil {
			return fmt.Errorf("read config generations: %w", err)
		}
		return &DivergedError{Hash: dirHash, Applied: *gen, Older: older, Diff: *p.diff}
	}
	if !p.writes() {
		if err := tx.QueryRow(ctx, queryVersion).Scan(&p.diff.Version); err != nil {
			return fmt.Errorf("read config version: %w", err)
		}
	} else {
		if err := tx.QueryRow(ctx, queryNextVersion).Scan(&p.diff.Version); err != nil {
			return fmt.Errorf("take a config version: %w", err)
		}
		// Sources before their watches, in bulk; then the deletions in
		// plan order, a removed source after its watches.
		if err := p.writeRows(ctx, tx); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, o := range p.ops {
			b.Queue(o.sql, o.args(p.diff.Version)...)
		}
		b.Queue(queryNotify, strconv.FormatInt(p.diff.Version, 10))
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("write definitions: %w", err)
		}
		for _, a := range p.audits {
			if err := audit.Record(ctx, tx, a.entry, a.before, a.after); err != nil {
				return err
			}
		}
	}
	if newGeneration {
		g, err := scanGeneration(tx.QueryRow(ctx, queryInsertGeneration, dirHash, p.diff.Version, gen != nil && opts.Force, p.by))
		if err != nil {
			return fmt.Errorf("record the config generation: %w", err)
		}
		gen = g
	}
	p.diff.Generation = gen.Number
	return nil
}

func sortedOrEmpty(names []string) []string {
	if len(names) == 0 {
		return []string{}
	}
	return slices.Sorted(slices.Values(names))
}

// AppliedGeneration returns the applied generation of the configuration
// directory, or nil when none was applied yet.
func AppliedGeneration(ctx context.Context, pool *pgxpool.Pool) (*Generation, error) {
	return appliedGeneration(ctx, pool)
}

func appliedGeneration(ctx context.Context, q queryRower) (*Generation, error) {
	g, err := scanGeneration(q.QueryRow(ctx, queryAppliedGeneration))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the applied config generation: %w", err)
	}
	return g, nil
}

func scanGeneration(row pgx.Row) (*Generation, error) {
	var g Generation
	if err := row.Scan(&g.Number, &g.Hash, &g.Version, &g.Forced, &g.AppliedBy, &g.AppliedAt); err != nil {
		return nil, err
	}
	return &g, nil
}

// bulkRows is how many definitions one statement of writeRows' updates
// carries: a few MB of arguments at most, so that 100,000 changed watches
// are written in a few dozen statements without holding them all encoded.
const bulkRows = 2000

// writeRows writes the plan's added and changed definitions at its
// version: the added ones with COPY (one statement a table, rows encoded
// as they are sent, so that PostgreSQL inserts while the next are
// encoded: the first apply of 100,000 watches, docs/benchmarks.md (13)),
// the changed ones bulkRows to a statement (arrays unnested); sources
// before watches, an adopted orphan's orphaned_at cleared.
func (p *applyPlan) writeRows(ctx context.Context, tx pgx.Tx) error {
	v := p.diff.Version
	if len(p.insertSources) > 0 {
		rows := p.insertSources
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"source_definitions"}, copySourceColumns, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			r := &rows[i]
			return []any{r.Name, r.Owner, r.ManagedBy, r.Connector, r.Definition, r.Hash, v}, nil
		})); err != nil {
			return fmt.Errorf("insert source definitions: %w", err)
		}
	}
	if len(p.insertWatches) > 0 {
		rows := p.insertWatches
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"watches"}, copyWatchColumns, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			w := &rows[i]
			return []any{w.Source, w.Name, w.Owner, w.ManagedBy, w.Definition, w.Hash, v}, nil
		})); err != nil {
			return fmt.Errorf("insert watches: %w", err)
		}
	}
	for _, part := range []struct {
		what, sql string
		rows      []Source
	}{{"update source definitions", queryUpdateSources, p.updateSources}} {
		for chunk := range slices.Chunk(part.rows, bulkRows) {
			var a bulkArgs
			for _, r := range chunk {
				a.add(r.Name, "", r.Owner, r.ManagedBy, r.Connector, r.Definition, r.Hash)
			}
			if _, err := tx.Exec(ctx, part.sql, a.first, a.owner, a.managedBy, a.connector, a.definition, a.hash, v); err != nil {
				return fmt.Errorf("%s: %w", part.what, err)
			}
		}
	}
	for _, part := range []struct {
		what, sql string
		rows      []Watch
	}{{"update watches", queryUpdateWatches, p.updateWatches}} {
		for chunk := range slices.Chunk(part.rows, bulkRows) {
			var a bulkArgs
			for _, w := range chunk {
				a.add(w.Source, w.Name, w.Owner, w.ManagedBy, "", w.Definition, w.Hash)
			}
			if _, err := tx.Exec(ctx, part.sql, a.first, a.second, a.owner, a.managedBy, a.definition, a.hash, v); err != nil {
				return fmt.Errorf("%s: %w", part.what, err)
			}
		}
	}
	return nil
}

// bulkArgs are the columns of a statement of writeRows, one array each.
type bulkArgs struct {
	first, second, owner, managedBy, connector, definition, hash []string
}

func (a *bulkArgs) add(first, second, owner, managedBy, connector string, definition []byte, hash string) {
	a.first = append(a.first, first)
	a.second = append(a.second, second)
	a.owner = append(a.owner, owner)
	a.managedBy = append(a.managedBy, managedBy)
	a.connector = append(a.connector, connector)
	a.definition = append(a.definition, string(definition))
	a.hash = append(a.hash, hash)
}
