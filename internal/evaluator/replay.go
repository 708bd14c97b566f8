package evaluator

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lookout-dev/lookout/internal/semantic"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// ReplayQuery selects the stored changes to re-evaluate.
type ReplayQuery struct {
	// Since and Until bound changes.created_at (Until exclusive; zero = now).
	Since, Until time.Time
	// Source and Watch restrict the replay to one source and/or one watch
	// name; empty means all.
	Source, Watch string
	// NoModel answers model steps from the verdict cache only.
	NoModel bool
	// MaxCalls caps the model calls of the replay. Defaults to 100; negative
	// means no cap.
	MaxCalls int
	// Limit caps the changes replayed, oldest first. Defaults to 10000.
	Limit int
}

// ReplayRow is one (change, watch): what was decided and what would be now.
type ReplayRow struct {
	ChangeID         int64
	Source, RecordID string
	Watch            string
	// Old is the recorded decision ("" when there is none), OldStep its step.
	Old, OldStep string
	// New is the decision the current configuration makes: notify, skip,
	// hold, error, or unknown (no cached verdict with NoModel, or the call
	// limit reached).
	New, NewStep string
	Reason       string
	// Differs compares Old and New, counting a duplicate as a notify; an
	// unknown New differs from nothing, and a row without a recorded
	// decision (a new watch) differs from nothing either: it is new.
	Differs bool
}

// ReplayReport is the outcome of a replay.
type ReplayReport struct {
	Query   ReplayQuery
	Changes int
	Rows    []ReplayRow
	// Differ counts rows whose recorded decision would change; New counts
	// rows without a recorded decision (a new watch, or a watch that did
	// not exist when the change was evaluated).
	Differ, New int
	// Filter counts the decisions the `when` expression made by decision
	// (skip, notify, error); Model those the model step made (notify,
	// skip, hold, error, unknown), whatever was recorded before.
	Filter, Model map[string]int
	// Model step: calls made, verdicts from the cache, verdicts missing.
	Calls, CacheHits, Unknown int
}

// Replay re-evaluates the stored changes q selects against the current
// watches, without writing evaluations or notifications and without
// delivering anything. Model steps use the verdict cache, and (unless
// q.NoModel) call the model: those calls are recorded in model_calls with
// purpose 'replay' (not counted against budgets) and their verdicts cached.
func (e *Evaluator) Replay(ctx context.Context, q ReplayQuery) (*ReplayReport, error) {
	if q.Until.IsZero() {
		q.Until = time.Now()
	}
	q.Limit = cmp.Or(q.Limit, 10000)
	if q.MaxCalls == 0 {
		q.MaxCalls = 100
	}
	if q.Source != "" && e.source(q.Source) == nil {
		return nil, fmt.Errorf("source %q is not configured", q.Source)
	}
	if q.Watch != "" && !e.hasWatch(q.Source, q.Watch) {
		if q.Source != "" {
			return nil, fmt.Errorf("watch %q is not configured on source %s", q.Watch, q.Source)
		}
		return nil, fmt.Errorf("watch %q is not configured", q.Watch)
	}
	claimed, err := e.loadChanges(ctx, q)
	if err != nil {
		return nil, err
	}
	rep := &ReplayReport{Query: q, Changes: len(claimed), Filter: map[string]int{}, Model: map[string]int{}}
	decs := e.evaluate(claimed, nil)
	if q.Watch != "" {
		kept := decs[:0]
		for _, d := range decs {
			if d.watch.Config.Name == q.Watch {
				kept = append(kept, d)
			}
		}
		decs = kept
	}
	if e.judge != nil {
		if reqs, idx := e.modelRequests(decs); len(reqs) > 0 {
			maxCalls := max(q.MaxCalls, 0)
			results, err := e.judge.Judge(ctx, reqs, semantic.Options{Purpose: semantic.PurposeReplay, NoModel: q.NoModel, MaxCalls: maxCalls})
			if err != nil {
				return nil, err
			}
			now := time.Now()
			for k, r := range results {
				d := &decs[idx[k]]
				rep.Calls += r.Calls
				switch {
				case r.Step == semantic.StepCache:
					rep.CacheHits++
				case r.Step == semantic.StepUncached:
					rep.Unknown++
					d.verdict, d.step, d.reason = "unknown", "uncached", "no cached verdict for this content (--no-model)"
					continue
				case r.Step == semantic.StepBudget && q.MaxCalls > 0 && r.Err != nil && strings.HasPrefix(r.Err.Error(), "call limit"):
					rep.Unknown++
					d.verdict, d.step, d.reason = "unknown", "limit", r.Err.Error()+" (--max-calls)"
					continue
				}
				e.applyResult(d, r, now)
			}
		}
	}
	old, err := e.recordedDecisions(ctx, claimed)
	if err != nil {
		return nil, err
	}
	for i := range decs {
		d := &decs[i]
		o := old[[2]any{d.change.ID, d.watch.Config.Name}]
		row := ReplayRow{ChangeID: d.change.ID, Source: d.change.Source, RecordID: d.change.RecordID, Watch: d.watch.Config.Name,
			Old: o[0], OldStep: o[1], New: d.verdict, NewStep: d.step, Reason: d.reason}
		oldNorm := row.Old
		if oldNorm == "duplicate" {
			oldNorm = "notify"
		}
		row.Differs = row.Old != "" && oldNorm != row.New && row.New != "unknown"
		if row.Differs {
			rep.Differ++
		}
		if row.Old == "" {
			rep.New++
		}
		if row.NewStep == "filter" {
			rep.Filter[row.New]++
		} else {
			rep.Model[row.New]++
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

func (e *Evaluator) hasWatch(source, name string) bool {
	found := false
	e.index.each(func(src string, ws []*watchspec.Watch) {
		if source != "" && src != source {
			return
		}
		for _, w := range ws {
			if w.Config.Name == name {
				found = true
			}
		}
	})
	return found
}

// loadChanges reads the changes of the replay window with the snapshot of
// the version each describes (changes_with_record), decoded as live
// evaluation decodes them (scanChanges), so that replay differs only where
// the watches do.
func (e *Evaluator) loadChanges(ctx context.Context, q ReplayQuery) ([]*change, error) {
	rows, err := e.pool.Query(ctx, `
		SELECT id, source, record_id, kind, version, coalesce(new_hash, ''), changed_fields, record, previous, eval_attempts + 1, created_at
		FROM changes_with_record
		WHERE created_at >= $1 AND created_at < $2 AND ($3 = '' OR source = $3)
		ORDER BY id LIMIT $4`, q.Since, q.Until, q.Source, q.Limit)
	out, err := scanChanges(rows, err)
	if err == nil {
		err = fillSnapshots(ctx, e.pool, out)
	}
	if err != nil {
		return nil, fmt.Errorf("read changes to replay: %w", err)
	}
	return out, nil
}

// recordedDecisions maps (change id, watch) to the recorded [decision, step].
func (e *Evaluator) recordedDecisions(ctx context.Context, claimed []*change) (map[[2]any][2]string, error) {
	ids := make([]int64, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
	}
	out := map[[2]any][2]string{}
	rows, err := e.pool.Query(ctx, `SELECT change_id, watch, decision, step FROM evaluations WHERE change_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("read recorded decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var w, d, s string
		if err := rows.Scan(&id, &w, &d, &s); err != nil {
			return nil, fmt.Errorf("read recorded decisions: %w", err)
		}
		out[[2]any{id, w}] = [2]string{d, s}
	}
	return out, rows.Err()
}

// WriteReplay prints a replay report: a summary, then the rows whose
// decision would change or is unknown (every row when all is set).
func WriteReplay(w io.Writer, r *ReplayReport, all bool) error {
	q := r.Query
	scope := "all watches"
	switch {
	case q.Source != "" && q.Watch != "":
		scope = "watch " + q.Source + "/" + q.Watch
	case q.Source != "":
		scope = "source " + q.Source
	case q.Watch != "":
		scope = "watch " + q.Watch
	}
	fmt.Fprintf(w, "replay of changes from %s to %s, %s: %d change(s), %d decision(s), %d would change, %d new (no recorded decision)\n",
		ts(q.Since), ts(q.Until), scope, r.Changes, len(r.Rows), r.Differ, r.New)
	fmt.Fprintf(w, "filter (when): %s\n", counts(r.Filter, "skip", "notify", "error"))
	mode := "model and cache"
	if q.NoModel {
		mode = "cache only (--no-model)"
	}
	fmt.Fprintf(w, "model step (%s): %s; %d call(s), %d cached verdict(s), %d without a verdict\n",
		mode, counts(r.Model, "notify", "skip", "hold", "error", "unknown"), r.Calls, r.CacheHits, r.Unknown)
	fmt.Fprintln(w, "nothing was written to evaluations or notifications, nothing was delivered")
	var shown []ReplayRow
	for _, row := range r.Rows {
		// A filter skip without a recorded decision (a new watch's `when`
		// was false) is only counted: there are usually many.
		newDecision := row.Old == "" && (row.NewStep != "filter" || row.New != "skip")
		if all || row.Differs || row.New == "unknown" || newDecision {
			shown = append(shown, row)
		}
	}
	if len(shown) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANGE\tRECORD\tWATCH\tOLD\t\tNEW\tREASON")
	for _, row := range shown {
		old := "—"
		if row.Old != "" {
			old = fmt.Sprintf("%s (%s)", row.Old, row.OldStep)
		}
		arrow := "→"
		if !row.Differs && row.Old != "" {
			arrow = "="
		}
		reason := strings.ReplaceAll(row.Reason, "\n", " ")
		if len([]rune(reason)) > 100 {
			reason = string([]rune(reason)[:100]) + "…"
		}
		fmt.Fprintf(tw, "%d\t%s/%s\t%s\t%s\t%s\t%s (%s)\t%s\n", row.ChangeID, row.Source, row.RecordID, row.Watch, old, arrow, row.New, row.NewStep, reason)
	}
	return tw.Flush()
}

// counts prints decision counts in the order given, then any other
// decision, leaving out zeros: "3 skip, 1 notify"; "none" when empty.
func counts(m map[string]int, order ...string) string {
	var parts []string
	for _, k := range order {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 && !slices.Contains(order, k) {
			parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func ts(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
