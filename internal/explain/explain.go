// Package explain reads the decision trail of a change: the change, what
// each watch of its source decided (evaluations), the model calls and
// the notifications of those decisions. It only reads, so the commands
// and pages that show a trail (`evaluator explain`, the api's
// explain_change, the admin page's record page) need no evaluator.
package explain

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/definitions"
)

// Query selects the changes to explain: one change by id, or the
// newest changes of a record.
type Query struct {
	ChangeID int64
	Source   string
	RecordID string
	// Limit bounds the changes of a record shown, newest first. Defaults to 10.
	Limit int
}

// Trail is the decision trail of one change.
type Trail struct {
	Change  TrailChange
	Watches []TrailWatch
	// Reviews are the reviews of the record's task results
	// (docs/tasks.md#review), on the newest change's trail only.
	Reviews []TrailReview
}

// TrailChange is the change part of a Trail.
type TrailChange struct {
	ID            int64
	Source        string
	RecordID      string
	Kind          string
	Version       int
	Title         string
	ContentHash   string
	ChangedFields []string
	CreatedAt     time.Time
	EvalStatus    string
	Attempts      int
	NextAt        *time.Time
	EvalError     *string
	EvaluatedAt   *time.Time
}

// TrailWatch is what one watch decided about the change.
type TrailWatch struct {
	Watch string
	// Configured is false for a watch no longer in the configuration.
	Configured bool
	When, Ask  string
	// Evaluation is nil when the watch has not decided (yet).
	Evaluation *TrailEvaluation
	// Verdict is the model call whose verdict decided (for a cache hit, the
	// call that produced it, possibly for another change).
	Verdict *TrailCall
	// Calls are this change's model calls for the watch, oldest first.
	Calls         []TrailCall
	Notifications []TrailNote
}

// TrailEvaluation is an evaluations row.
type TrailEvaluation struct {
	Step, Decision, Reason, Urgency string
	Matched                         bool
	Confidence                      *float64
	ModelCallID, NotificationID     *int64
	Evaluator                       string
	CreatedAt                       time.Time
}

// TrailCall is a model_calls row.
type TrailCall struct {
	ID                         int64
	ChangeID                   *int64
	Purpose, Model, Digest     string
	PromptVersion, Outcome     string
	Attempt                    int
	LatencyMS                  float64
	PromptTokens, OutputTokens int
	Error                      *string
	CreatedAt                  time.Time
}

// TrailNote is a notifications row.
type TrailNote struct {
	ID                   int64
	Sink, Status, Key    string
	Attempts             int
	DuplicatesSuppressed int
	NextAttemptAt        time.Time
	DeliveredAt          *time.Time
	LastError            *string
	ChangeID             *int64
}

// Trails reads the decision trails of the changes q selects. The watches
// of a change's source are read from the definitions (the files as
// applied and the watches made through the API); cfg names them only for
// a source the database holds no definition of (may be nil: then only
// recorded decisions show).
func Trails(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, q Query) ([]Trail, error) {
	var rows pgx.Rows
	var err error
	const cols = `id, source, record_id, kind, version, coalesce(record->>'title', ''), coalesce(new_hash, ''), changed_fields,
		created_at, eval_status, eval_attempts, CASE WHEN eval_next_at > now() THEN eval_next_at END, eval_error, evaluated_at`
	switch {
	case q.ChangeID != 0:
		rows, err = pool.Query(ctx, `SELECT `+cols+` FROM changes_with_record WHERE id = $1`, q.ChangeID)
	case q.Source != "" && q.RecordID != "":
		rows, err = pool.Query(ctx, `SELECT `+cols+` FROM changes_with_record WHERE source = $1 AND record_id = $2 ORDER BY id DESC LIMIT $3`,
			q.Source, q.RecordID, cmp.Or(q.Limit, 10))
	default:
		return nil, fmt.Errorf("explain needs a change id, or a source and a record id")
	}
	if err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	chs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TrailChange, error) {
		var c TrailChange
		err := r.Scan(&c.ID, &c.Source, &c.RecordID, &c.Kind, &c.Version, &c.Title, &c.ContentHash, &c.ChangedFields,
			&c.CreatedAt, &c.EvalStatus, &c.Attempts, &c.NextAt, &c.EvalError, &c.EvaluatedAt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read changes: %w", err)
	}
	if len(chs) == 0 {
		if q.ChangeID != 0 {
			return nil, fmt.Errorf("change %d does not exist", q.ChangeID)
		}
		return nil, fmt.Errorf("record %s/%s has no changes", q.Source, q.RecordID)
	}
	var trails []Trail
	for _, c := range chs {
		t, err := explainChange(ctx, pool, cfg, c)
		if err != nil {
			return nil, err
		}
		trails = append(trails, t)
	}
	if trails[0].Reviews, err = reviewsOf(ctx, pool, chs[0].Source, chs[0].RecordID); err != nil {
		return nil, err
	}
	return trails, nil
}

func explainChange(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, c TrailChange) (Trail, error) {
	t := Trail{Change: c}
	idx := map[string]int{}
	add := func(name string) *TrailWatch {
		i, ok := idx[name]
		if !ok {
			t.Watches = append(t.Watches, TrailWatch{Watch: name})
			i = len(t.Watches) - 1
			idx[name] = i
		}
		return &t.Watches[i]
	}
	// The watches of the source are those of the definitions (the files
	// as applied, and those made through the API); cfg's only for a
	// source the database has no definition of.
	switch def, err := definitions.Lookup(ctx, pool, c.Source); {
	case err == nil:
		ws, err := definitions.WatchesOf(ctx, pool, def.Name)
		if err != nil {
			return t, fmt.Errorf("explain change %d: %w", c.ID, err)
		}
		for _, row := range ws {
			var wd struct {
				When string `json:"when"`
				Ask  string `json:"ask"`
			}
			if err := json.Unmarshal(row.Definition, &wd); err != nil {
				return t, fmt.Errorf("explain change %d: watch %s of source %s: %w", c.ID, row.Name, row.Source, err)
			}
			w := add(row.Name)
			w.Configured, w.When, w.Ask = true, strings.TrimSpace(wd.When), wd.Ask
		}
	case !errors.Is(err, definitions.ErrNotFound):
		return t, fmt.Errorf("explain change %d: %w", c.ID, err)
	case cfg != nil:
		if src := cfg.Source(c.Source); src != nil {
			for _, wc := range src.Watches {
				w := add(wc.Name)
				w.Configured, w.When, w.Ask = true, wc.When, wc.Ask
			}
		}
	}
	rows, err := pool.Query(ctx, `
		SELECT watch, step, decision, reason, coalesce(urgency, ''), matched, confidence, model_call_id, notification_id, evaluator, created_at
		FROM evaluations WHERE change_id = $1 ORDER BY id`, c.ID)
	if err != nil {
		return t, fmt.Errorf("read evaluations of change %d: %w", c.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var e TrailEvaluation
		if err := rows.Scan(&name, &e.Step, &e.Decision, &e.Reason, &e.Urgency, &e.Matched, &e.Confidence,
			&e.ModelCallID, &e.NotificationID, &e.Evaluator, &e.CreatedAt); err != nil {
			return t, fmt.Errorf("read evaluations of change %d: %w", c.ID, err)
		}
		add(name).Evaluation = &e
	}
	if err := rows.Err(); err != nil {
		return t, fmt.Errorf("read evaluations of change %d: %w", c.ID, err)
	}
	rows.Close()
	for i := range t.Watches {
		if err := explainWatch(ctx, pool, c.ID, &t.Watches[i]); err != nil {
			return t, err
		}
	}
	return t, nil
}

const callCols = `id, change_id, purpose, model, model_digest, prompt_version, outcome, attempt, latency_ms, prompt_tokens, output_tokens, error, created_at`

func scanCall(r pgx.CollectableRow) (TrailCall, error) {
	var c TrailCall
	err := r.Scan(&c.ID, &c.ChangeID, &c.Purpose, &c.Model, &c.Digest, &c.PromptVersion, &c.Outcome, &c.Attempt,
		&c.LatencyMS, &c.PromptTokens, &c.OutputTokens, &c.Error, &c.CreatedAt)
	return c, err
}

func explainWatch(ctx context.Context, pool *pgxpool.Pool, changeID int64, w *TrailWatch) error {
	rows, err := pool.Query(ctx, `SELECT `+callCols+` FROM model_calls WHERE change_id = $1 AND watch = $2 ORDER BY id`, changeID, w.Watch)
	if err != nil {
		return fmt.Errorf("read model calls: %w", err)
	}
	if w.Calls, err = pgx.CollectRows(rows, scanCall); err != nil {
		return fmt.Errorf("read model calls: %w", err)
	}
	var noteID *int64
	if e := w.Evaluation; e != nil {
		noteID = e.NotificationID
		if e.ModelCallID != nil {
			rows, err := pool.Query(ctx, `SELECT `+callCols+` FROM model_calls WHERE id = $1`, *e.ModelCallID)
			if err != nil {
				return fmt.Errorf("read model call: %w", err)
			}
			calls, err := pgx.CollectRows(rows, scanCall)
			if err != nil {
				return fmt.Errorf("read model call: %w", err)
			}
			if len(calls) == 1 {
				w.Verdict = &calls[0]
			}
		}
	}
	rows, err = pool.Query(ctx, `
		SELECT id, sink, status, dedupe_key, attempts, duplicates_suppressed, next_attempt_at, delivered_at, last_error, change_id
		FROM notifications WHERE (change_id = $1 AND watch = $2) OR id = $3 ORDER BY id, sink`, changeID, w.Watch, noteID)
	if err != nil {
		return fmt.Errorf("read notifications: %w", err)
	}
	w.Notifications, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TrailNote, error) {
		var n TrailNote
		err := r.Scan(&n.ID, &n.Sink, &n.Status, &n.Key, &n.Attempts, &n.DuplicatesSuppressed, &n.NextAttemptAt, &n.DeliveredAt, &n.LastError, &n.ChangeID)
		return n, err
	})
	if err != nil {
		return fmt.Errorf("read notifications: %w", err)
	}
	return nil
}

// WriteTrails prints trails for an operator.
func WriteTrails(w io.Writer, trails []Trail) {
	for i, t := range trails {
		if i > 0 {
			fmt.Fprintln(w)
		}
		writeTrail(w, t)
	}
}

func ts(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func short(digest string) string {
	d := strings.TrimPrefix(digest, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	if d == "" {
		return "(unknown)"
	}
	return d
}

func writeTrail(w io.Writer, t Trail) {
	c := t.Change
	fmt.Fprintf(w, "change %d · %s/%s · %s v%d · %s\n", c.ID, c.Source, c.RecordID, c.Kind, c.Version, ts(c.CreatedAt))
	if c.Title != "" {
		fmt.Fprintf(w, "  title:    %s\n", c.Title)
	}
	if len(c.ChangedFields) > 0 {
		fmt.Fprintf(w, "  changed:  %s\n", strings.Join(c.ChangedFields, ", "))
	}
	if c.ContentHash != "" {
		fmt.Fprintf(w, "  content:  %s\n", short(c.ContentHash))
	}
	switch {
	case c.EvalStatus == "done" && c.EvaluatedAt != nil:
		fmt.Fprintf(w, "  state:    done, evaluated %s (%d attempt(s))\n", ts(*c.EvaluatedAt), c.Attempts)
	case c.NextAt != nil:
		fmt.Fprintf(w, "  state:    pending, held until %s (%d attempt(s)): %s\n", ts(*c.NextAt), c.Attempts, deref(c.EvalError))
	default:
		fmt.Fprintf(w, "  state:    %s (%d attempt(s))\n", c.EvalStatus, c.Attempts)
	}
	if len(t.Watches) == 0 {
		fmt.Fprintf(w, "  no watches on source %s\n", c.Source)
	}
	for _, wt := range t.Watches {
		writeWatch(w, c, wt)
	}
	writeReviews(w, t.Reviews)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func writeWatch(w io.Writer, c TrailChange, wt TrailWatch) {
	label := "watch " + wt.Watch
	if !wt.Configured {
		label += " (no longer configured)"
	}
	fmt.Fprintf(w, "  %s\n", label)
	line := func(step, format string, args ...any) {
		fmt.Fprintf(w, "    %-8s %s\n", step, fmt.Sprintf(format, args...))
	}
	e := wt.Evaluation
	if e == nil {
		if c.EvalStatus == "pending" {
			line("", "not decided yet (the change is pending)")
		} else {
			line("", "no decision (the watch did not exist when the change was evaluated)")
		}
		return
	}
	when := ""
	if wt.When != "" {
		when = ": " + wt.When
	}
	if !e.Matched {
		line("filter", "false%s → %s", when, e.Decision)
		if e.Decision == "error" {
			line("", "%s", e.Reason)
		}
		return
	}
	line("filter", "true%s", when)
	if wt.Ask != "" {
		line("ask", "%s", wt.Ask)
	}
	verdict := e.Decision
	if e.Urgency != "" {
		verdict += " · urgency " + e.Urgency
	}
	if e.Confidence != nil {
		verdict += fmt.Sprintf(" · confidence %.2f", *e.Confidence)
	}
	switch e.Step {
	case "filter":
		line("decision", "%s", verdict)
	case "model", "cache":
		line(e.Step, "%s — %q", verdict, e.Reason)
	default: // budget, error, dedupe
		line(e.Step, "%s — %s", verdict, e.Reason)
	}
	if v := wt.Verdict; v != nil && v.Outcome == "ok" {
		origin := ""
		if v.ChangeID != nil && *v.ChangeID != c.ID {
			origin = fmt.Sprintf(" (cached: judged for change %d)", *v.ChangeID)
		}
		line("", "verdict of call #%d%s: %s digest %s prompt %s", v.ID, origin, v.Model, short(v.Digest), v.PromptVersion)
	}
	for _, call := range wt.Calls {
		errText := ""
		if call.Error != nil {
			errText = " — " + *call.Error
		}
		line("call", "#%d %s attempt %d · %s · %.0f ms · %d+%d tokens · %s digest %s prompt %s%s", call.ID, ts(call.CreatedAt),
			call.Attempt, call.Outcome, call.LatencyMS, call.PromptTokens, call.OutputTokens, call.Model, short(call.Digest), call.PromptVersion, errText)
	}
	for _, n := range wt.Notifications {
		state := n.Status
		switch {
		case n.Status == "delivered" && n.DeliveredAt != nil:
			state = "delivered " + ts(*n.DeliveredAt)
		case n.Status == "pending":
			state = "pending, next attempt " + ts(n.NextAttemptAt)
		}
		extra := ""
		if n.LastError != nil {
			extra += " · last error: " + *n.LastError
		}
		if n.DuplicatesSuppressed > 0 {
			extra += fmt.Sprintf(" · %d duplicate(s) suppressed", n.DuplicatesSuppressed)
		}
		if n.ChangeID != nil && *n.ChangeID != c.ID {
			extra += fmt.Sprintf(" · sent for change %d", *n.ChangeID)
		}
		line("notify", "#%d → %s: %s (%d attempt(s)) key %s%s", n.ID, n.Sink, state, n.Attempts, n.Key, extra)
	}
}
