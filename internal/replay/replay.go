// Package replay re-evaluates stored changes against watches without
// deciding anything: the `when` expression of each watch (compiled by
// watchspec) over the changes of a window, and for a watch with an ask the
// verdicts cached in `verdicts`, or the answers of a Model when one is
// given. It writes no evaluations and no notifications, delivers nothing,
// and links no model client: the evaluator's `replay` command gives it the
// evaluator's judge as the Model, and the api's dry runs without the model
// run it with none (control.DryRun).
//
// It is also the one owner of `dry_run_requests` (request.go): a dry run
// with the model asked through the api is recorded there, claimed by an
// evaluator replica (Worker), answered with the report, and read back by
// the api (Await).
package replay

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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/normalize"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// Querier is what a replay reads through: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Query selects the stored changes to re-evaluate.
type Query struct {
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

// Row is one (change, watch): what was decided and what would be now.
type Row struct {
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

// Report is the outcome of a replay.
type Report struct {
	Query   Query
	Changes int
	Rows    []Row
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

// Source is a source's part of a replay: its compiled watches and its
// volatile fields (left out of what the model sees).
type Source struct {
	Name     string
	Volatile []string
	Watches  []*watchspec.Watch
}

// Ask is one model step of a replay: a change that passed the `when` of a
// watch with an ask.
type Ask struct {
	ChangeID         int64
	Source, RecordID string
	Watch            string
	// Owner is the user the watch belongs to ("" for the operator's).
	Owner string
	// ContentHash is the record's content hash at the change.
	ContentHash string
	Question    *modelspec.Question
	Input       modelspec.Input
	// Budget is the watch's daily budget (a replay is not counted against
	// it; the Model may read it).
	Budget config.Budget
}

// Verdict is a model's answer about one change.
type Verdict struct {
	ShouldNotify bool
	Urgency      string
	Confidence   float64
	Reason       string
}

// Answer is the Model's result of one Ask.
type Answer struct {
	// Step is cache or model with a Verdict; anything else (error,
	// budget) is a failed model step, decided by the watch's
	// on_model_error.
	Step    string
	Verdict *Verdict
	// Err says why there is no verdict.
	Err error
	// Limit is set when the replay's MaxCalls stopped this ask.
	Limit bool
	// Calls is the number of model requests made for this ask.
	Calls int
}

// Model answers the model steps of a replay with the model: the
// evaluator's judge (verdict cache, then the model, at most maxCalls calls
// when maxCalls > 0, recorded with purpose replay).
type Model interface {
	Judge(ctx context.Context, asks []Ask, maxCalls int) ([]Answer, error)
}

// change is a stored change as replayed.
type change struct {
	watchspec.Change
	RecordID string
	NewHash  string
}

// decision is one (change, watch) of a replay.
type decision struct {
	change  *change
	watch   *watchspec.Watch
	step    string
	matched bool
	verdict string
	reason  string
}

// Run re-evaluates the stored changes q selects against the watches of
// sources, without writing evaluations or notifications and without
// delivering anything. Model steps are answered by m, or, when m is nil
// or q.NoModel is set, from the verdict cache only (the newest verdict of
// the same prompt version, input and model name, whatever its digest):
// nothing asks the model server anything then.
func Run(ctx context.Context, db Querier, sources []Source, q Query, m Model) (*Report, error) {
	if q.Until.IsZero() {
		q.Until = time.Now()
	}
	q.Limit = cmp.Or(q.Limit, 10000)
	if q.MaxCalls == 0 {
		q.MaxCalls = 100
	}
	bySource := map[string]*Source{}
	for i := range sources {
		bySource[sources[i].Name] = &sources[i]
	}
	if err := checkScope(bySource, q); err != nil {
		return nil, err
	}
	claimed, err := loadChanges(ctx, db, q)
	if err != nil {
		return nil, err
	}
	rep := &Report{Query: q, Changes: len(claimed), Filter: map[string]int{}, Model: map[string]int{}}
	decs := evaluate(claimed, bySource, q.Watch)
	if err := judge(ctx, db, decs, bySource, q, m, rep); err != nil {
		return nil, err
	}
	old, err := recordedDecisions(ctx, db, claimed)
	if err != nil {
		return nil, err
	}
	for i := range decs {
		rep.add(&decs[i], old[decided{decs[i].change.ID, decs[i].watch.Config.Name}])
	}
	return rep, nil
}

// checkScope refuses a q.Source or q.Watch the replay does not have.
func checkScope(bySource map[string]*Source, q Query) error {
	if q.Source != "" && bySource[q.Source] == nil {
		return fmt.Errorf("source %q is not configured", q.Source)
	}
	if q.Watch == "" {
		return nil
	}
	for name, s := range bySource {
		if q.Source != "" && name != q.Source {
			continue
		}
		for _, w := range s.Watches {
			if w.Config.Name == q.Watch {
				return nil
			}
		}
	}
	if q.Source != "" {
		return fmt.Errorf("watch %q is not configured on source %s", q.Watch, q.Source)
	}
	return fmt.Errorf("watch %q is not configured", q.Watch)
}

// evaluate runs the `when` of every watch (only watch, when set) of each
// change's source.
func evaluate(claimed []*change, bySource map[string]*Source, watch string) []decision {
	var out []decision
	for _, c := range claimed {
		s := bySource[c.Source]
		if s == nil {
			continue
		}
		env := c.Env()
		for _, w := range s.Watches {
			if watch != "" && w.Config.Name != watch {
				continue
			}
			d := decision{change: c, watch: w, step: "filter"}
			d.matched, d.verdict, d.reason = w.Filter(env)
			out = append(out, d)
		}
	}
	return out
}

// judge runs the model step of the decisions whose `when` matched and
// whose watch has an ask: through m, or from the cache.
func judge(ctx context.Context, db Querier, decs []decision, bySource map[string]*Source, q Query, m Model, rep *Report) error {
	var asks []Ask
	var idx []int
	for i := range decs {
		d := &decs[i]
		if !d.matched || d.watch.Question == nil {
			continue
		}
		c, w := d.change, d.watch
		a := Ask{ChangeID: c.ID, Source: c.Source, RecordID: c.RecordID, Watch: w.Config.Name, Owner: w.Owner, ContentHash: c.NewHash,
			Question: w.Question, Input: modelspec.Input{Source: c.Source, Kind: c.Kind, ChangedFields: c.ChangedFields,
				Record: c.Record, Previous: c.Previous, Omit: bySource[c.Source].Volatile}}
		if b := w.Config.Budget; b != nil {
			a.Budget = *b
		}
		asks, idx = append(asks, a), append(idx, i)
	}
	if len(asks) == 0 {
		return nil
	}
	var answers []Answer
	var err error
	if m == nil || q.NoModel {
		answers, err = cached(ctx, db, asks)
	} else {
		answers, err = m.Judge(ctx, asks, max(q.MaxCalls, 0))
	}
	if err != nil {
		return err
	}
	for k, a := range answers {
		d := &decs[idx[k]]
		rep.Calls += a.Calls
		switch {
		case a.Step == stepUncached:
			rep.Unknown++
			d.verdict, d.step, d.reason = "unknown", "uncached", "no cached verdict for this content (--no-model)"
		case a.Limit:
			rep.Unknown++
			d.verdict, d.step, d.reason = "unknown", "limit", a.Err.Error()+" (--max-calls)"
		case a.Verdict != nil:
			if a.Step == stepCache {
				rep.CacheHits++
			}
			d.step, d.reason, d.verdict = a.Step, a.Verdict.Reason, "skip"
			if a.Verdict.ShouldNotify {
				d.verdict = "notify"
			}
		default:
			d.failed(a)
		}
	}
	return nil
}

// failed decides a model step without a verdict by the watch's
// on_model_error, as the evaluator would (a replay holds nothing: a hold
// is reported as one).
func (d *decision) failed(a Answer) {
	if d.step = a.Step; d.step != "budget" {
		d.step = "error"
	}
	why := "model step failed"
	if a.Err != nil {
		why = a.Err.Error()
	}
	switch policy := d.watch.Config.OnModelError; policy {
	case "notify", "skip":
		d.verdict, d.reason = policy, why+"; on_model_error is "+policy
	default:
		d.verdict, d.reason = "hold", why+"; on_model_error is hold"
	}
}

// add counts the decision d, recorded as old, into the report.
func (r *Report) add(d *decision, old [2]string) {
	row := Row{ChangeID: d.change.ID, Source: d.change.Source, RecordID: d.change.RecordID, Watch: d.watch.Config.Name,
		Old: old[0], OldStep: old[1], New: d.verdict, NewStep: d.step, Reason: d.reason}
	oldNorm := row.Old
	if oldNorm == "duplicate" {
		oldNorm = "notify"
	}
	row.Differs = row.Old != "" && oldNorm != row.New && row.New != "unknown"
	if row.Differs {
		r.Differ++
	}
	if row.Old == "" {
		r.New++
	}
	if row.NewStep == "filter" {
		r.Filter[row.New]++
	} else {
		r.Model[row.New]++
	}
	r.Rows = append(r.Rows, row)
}

// loadChanges reads the changes of the replay window with the snapshot of
// the version each describes (changes_with_record), decoded as live
// evaluation decodes them, so that replay differs only where the watches
// do.
func loadChanges(ctx context.Context, db Querier, q Query) ([]*change, error) {
	rows, err := db.Query(ctx, queryChanges, q.Since, q.Until, q.Source, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("read changes to replay: %w", err)
	}
	defer rows.Close()
	var out []*change
	for rows.Next() {
		c := &change{}
		var rec, prev []byte
		if err := rows.Scan(&c.ID, &c.Source, &c.RecordID, &c.Kind, &c.Version, &c.NewHash, &c.ChangedFields, &rec, &prev); err != nil {
			return nil, fmt.Errorf("read changes to replay: %w", err)
		}
		if rec == nil {
			return nil, fmt.Errorf("change %d: no record snapshot: the change stores none and record %s/%s is no longer at version %d", c.ID, c.Source, c.RecordID, c.Version)
		}
		if c.Record, c.Previous, err = normalize.DecodeSnapshots(rec, prev); err != nil {
			return nil, fmt.Errorf("change %d: %w", c.ID, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read changes to replay: %w", err)
	}
	return out, nil
}

// decided is a (change id, watch) of the recorded decisions.
type decided struct {
	change int64
	watch  string
}

// recordedDecisions maps (change id, watch) to the recorded [decision, step].
func recordedDecisions(ctx context.Context, db Querier, claimed []*change) (map[decided][2]string, error) {
	ids := make([]int64, len(claimed))
	for i, c := range claimed {
		ids[i] = c.ID
	}
	out := map[decided][2]string{}
	rows, err := db.Query(ctx, queryRecordedDecisions, ids)
	if err != nil {
		return nil, fmt.Errorf("read recorded decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k decided
		var d, s string
		if err := rows.Scan(&k.change, &k.watch, &d, &s); err != nil {
			return nil, fmt.Errorf("read recorded decisions: %w", err)
		}
		out[k] = [2]string{d, s}
	}
	return out, rows.Err()
}

// Steps of a cached answer (semantic's evaluations.step values).
const (
	stepCache    = "cache"
	stepUncached = "uncached"
)

// cached answers asks from the verdict cache only: the newest verdict of
// the same prompt version, input hash and model name, whichever model
// digest made it. It asks no model server anything (not even the digest)
// and writes nothing (a hit is not counted in verdicts.hits).
func cached(ctx context.Context, db Querier, asks []Ask) ([]Answer, error) {
	type key struct{ version, model, input string }
	keys := make([]key, len(asks))
	var vs, ms, hs []string
	for i, a := range asks {
		_, hash := a.Input.UserMessage()
		keys[i] = key{a.Question.Version, a.Question.Model, hash}
		vs, ms, hs = append(vs, keys[i].version), append(ms, keys[i].model), append(hs, hash)
	}
	rows, err := db.Query(ctx, queryCachedVerdicts, vs, ms, hs)
	if err != nil {
		return nil, fmt.Errorf("look up cached verdicts: %w", err)
	}
	defer rows.Close()
	found := map[key]Verdict{}
	for rows.Next() {
		var k key
		var v Verdict
		if err := rows.Scan(&k.version, &k.model, &k.input, &v.ShouldNotify, &v.Urgency, &v.Confidence, &v.Reason); err != nil {
			return nil, fmt.Errorf("look up cached verdicts: %w", err)
		}
		found[k] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up cached verdicts: %w", err)
	}
	out := make([]Answer, len(asks))
	for i, k := range keys {
		if v, ok := found[k]; ok {
			out[i] = Answer{Step: stepCache, Verdict: &v}
			continue
		}
		out[i] = Answer{Step: stepUncached}
	}
	return out, nil
}

// Write prints a replay report: a summary, then the rows whose decision
// would change or is unknown (every row when all is set).
func Write(w io.Writer, r *Report, all bool) error {
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
	var shown []Row
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
