package notion

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lookout-dev/lookout/internal/connectors"
)

// maxText is Notion's limit on one rich text content.
const maxText = 2000

// The task actions (connectors.Actor) read the page with GET
// /v1/pages/{id}, then write its properties with PATCH /v1/pages/{id} —
// only over what lookout itself left there: Claim over the todo status,
// Complete, Fail and Release over the claim's own in-progress status and
// RunId (status alone when the database has no RunId property). The PATCH
// follows the GET at once: it waits for the budgets at most
// connectors.ActWaitLimit, else the action is a RetryLaterError and is
// tried again, read first. One action of a source at a time makes its
// requests (connectors.ActLock). Confirm reads the page back. Which properties
// are written is the task: block's; a property left at its default name
// that the database does not have is not written.

// taskState is what a page shows of the task actions' properties.
type taskState struct {
	status, runID string
}

// state reads page id. A page deleted, archived or in the trash wraps
// connectors.ErrNotFound.
func (c *Connector) state(ctx context.Context, s *schema, id string) (taskState, error) {
	v, err := c.c.do(ctx, http.MethodGet, "/v1/pages/"+compactID(id), nil)
	if err != nil {
		return taskState{}, err
	}
	pg, _ := v.(map[string]any)
	if pg["archived"] == true || pg["in_trash"] == true {
		return taskState{}, fmt.Errorf("page %s is archived: %w", id, connectors.ErrNotFound)
	}
	props, _ := pg["properties"].(map[string]any)
	var st taskState
	st.status, _ = Value(props[s.task["status"]]).(string)
	if p := s.task["run_id"]; p != "" {
		st.runID, _ = Value(props[p]).(string)
	}
	return st, nil
}

// ours reports whether st shows cl's run: its RunId, or any when the
// database has no RunId property.
func ours(s *schema, st taskState, cl connectors.Claim) bool {
	return s.task["run_id"] == "" || st.runID == cl.RunID
}

// Claim writes Status = in_progress, ClaimedBy, ClaimedAt, ClaimExpiresAt
// and RunId when the page shows the todo status; a page that shows cl's
// claim already (a retry after the write landed) is left as it is.
func (c *Connector) Claim(ctx context.Context, id string, cl connectors.Claim) error {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s, t, err := c.task(ctx)
	if err != nil {
		return err
	}
	st, err := c.state(ctx, s, id)
	if err != nil {
		return fmt.Errorf("claim page %s: %w", id, err)
	}
	switch {
	case st.status == t.InProgress && s.task["run_id"] != "" && st.runID == cl.RunID:
		return nil
	case st.status != t.Todo:
		return fmt.Errorf("claim page %s: it shows %q, not %q: %w", id, st.status, t.Todo, connectors.ErrMoved)
	}
	return c.write(ctx, "claim", id, func(t *Task, w *writer) {
		w.set("status", t.InProgress)
		w.set("claimed_by", cl.By)
		w.set("claimed_at", cl.At)
		w.set("claim_expires_at", cl.ExpiresAt)
		w.set("run_id", cl.RunID)
	})
}

// Confirm reads the page and reports whether it is still in progress
// under cl's run (RunId, when the database has it). A page deleted,
// archived or in the trash is not confirmed.
func (c *Connector) Confirm(ctx context.Context, id string, cl connectors.Claim) (bool, error) {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	s, t, err := c.task(ctx)
	if err != nil {
		return false, err
	}
	st, err := c.state(ctx, s, id)
	if errors.Is(err, connectors.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("confirm the claim on page %s: %w", id, err)
	}
	return st.status == t.InProgress && ours(s, st, cl), nil
}

// Complete writes Status = complete, CompletedAt = o.At and clears
// LastError, over cl's claim.
func (c *Connector) Complete(ctx context.Context, id string, cl connectors.Claim, o connectors.Outcome) error {
	return c.end(ctx, "complete", id, cl, func(t *Task) string { return t.Complete }, func(t *Task, w *writer) {
		w.set("status", t.Complete)
		w.set("completed_at", o.At)
		w.set("last_error", "")
	})
}

// Fail writes Status = failed, LastError and RetryCount, over cl's claim.
func (c *Connector) Fail(ctx context.Context, id string, cl connectors.Claim, o connectors.Outcome) error {
	return c.end(ctx, "fail", id, cl, func(t *Task) string { return t.Failed }, func(t *Task, w *writer) {
		w.set("status", t.Failed)
		w.set("last_error", o.Error)
		w.set("retry_count", o.RetryCount)
	})
}

// Release writes Status = todo, LastError and RetryCount, and clears
// ClaimedBy, ClaimedAt, ClaimExpiresAt and RunId, over cl's claim. A page
// that shows todo without a RunId (the release landed, or the claim never
// did) is left as it is.
func (c *Connector) Release(ctx context.Context, id string, cl connectors.Claim, o connectors.Outcome) error {
	return c.end(ctx, "release", id, cl, func(t *Task) string { return t.Todo }, func(t *Task, w *writer) {
		w.set("status", t.Todo)
		w.set("last_error", o.Error)
		w.set("retry_count", o.RetryCount)
		w.set("claimed_by", "")
		w.set("claimed_at", time.Time{})
		w.set("claim_expires_at", time.Time{})
		w.set("run_id", "")
	})
}

// end writes a terminal state (or a release) when the page shows cl's
// claim; a page that shows the state under cl's run already (a retry
// after the write landed) is left as it is; anything else is ErrMoved.
func (c *Connector) end(ctx context.Context, action, id string, cl connectors.Claim, target func(*Task) string, fill func(t *Task, w *writer)) error {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s, t, err := c.task(ctx)
	if err != nil {
		return err
	}
	st, err := c.state(ctx, s, id)
	if err != nil {
		return fmt.Errorf("%s page %s: %w", action, id, err)
	}
	switch to := target(t); {
	case st.status == t.InProgress && ours(s, st, cl):
		return c.write(ctx, action, id, fill)
	case st.status == to && (ours(s, st, cl) || (action == "release" && st.runID == "")):
		return nil
	case s.task["run_id"] != "" && st.runID != cl.RunID:
		return fmt.Errorf("%s page %s: it shows %q under run %q, not lookout's claim %s: %w", action, id, st.status, st.runID, cl.RunID, connectors.ErrMoved)
	default:
		return fmt.Errorf("%s page %s: it shows %q, not lookout's %q: %w", action, id, st.status, t.InProgress, connectors.ErrMoved)
	}
}

// StripTask removes from a record's fields what the task actions write:
// the task properties under extra.properties (the status, the claim,
// RetryCount, LastError, CompletedAt) and the properties Notion itself
// moves on every edit (last_edited_time, last_edited_by); see
// connectors.TaskContent.
func (c *Connector) StripTask(fields map[string]any) {
	extra, _ := fields["extra"].(map[string]any)
	props, _ := extra["properties"].(map[string]any)
	if props == nil {
		return
	}
	if t := c.o.Task; t != nil {
		for _, f := range taskFields(t) {
			if f.kinds != nil {
				delete(props, *f.value)
			}
		}
	}
	c.mu.Lock()
	s := c.schema
	c.mu.Unlock()
	if s != nil {
		for name, typ := range s.types {
			if typ == "last_edited_time" || typ == "last_edited_by" {
				delete(props, name)
			}
		}
	}
}

// task returns the checked schema and the task block, or an error when
// the source has no task block.
func (c *Connector) task(ctx context.Context) (*schema, *Task, error) {
	if c.o.Task == nil {
		return nil, nil, c.o.Errorf("notion", "has no task: block; a source acts on tasks only with one (task: {} takes the defaults)")
	}
	s, err := c.verify(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return s, c.o.Task, nil
}

// writer collects property values in the API's request shapes.
type writer struct {
	s     *schema
	props map[string]any
	names []string
}

// set encodes v (string, time.Time or int; zero values clear) for the
// property of task key, by the property's type; keys whose property the
// database lacks are skipped.
func (w *writer) set(key string, v any) {
	name := w.s.task[key]
	if name == "" {
		return
	}
	var val any
	switch typ := w.s.types[name]; typ {
	case "rich_text", "title":
		s, _ := v.(string)
		if r := []rune(s); len(r) > maxText {
			s = string(r[:maxText-1]) + "…"
		}
		rt := []any{}
		if s != "" {
			rt = append(rt, map[string]any{"type": "text", "text": map[string]any{"content": s}})
		}
		val = map[string]any{typ: rt}
	case "select", "status":
		var opt any
		if s, _ := v.(string); s != "" {
			opt = map[string]any{"name": s}
		}
		val = map[string]any{typ: opt}
	case "date":
		var d any
		if t, _ := v.(time.Time); !t.IsZero() {
			d = map[string]any{"start": t.UTC().Format(time.RFC3339)}
		}
		val = map[string]any{"date": d}
	case "number":
		n, _ := v.(int)
		val = map[string]any{"number": n}
	default:
		return // check refused other types
	}
	w.props[name] = val
	w.names = append(w.names, name)
}

// write sends one PATCH with what fill sets, waiting for the budgets at
// most connectors.ActWaitLimit.
func (c *Connector) write(ctx context.Context, action, id string, fill func(t *Task, w *writer)) error {
	s, t, err := c.task(ctx)
	if err != nil {
		return err
	}
	w := &writer{s: s, props: map[string]any{}}
	fill(t, w)
	// Right after the read the write is conditional on: no long wait.
	ctx = connectors.WithWaitLimit(ctx, connectors.ActWaitLimit)
	_, err = c.c.do(ctx, http.MethodPatch, "/v1/pages/"+compactID(id), map[string]any{"properties": w.props})
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && ae.Code == "validation_error" {
		err = &connectors.ValidationError{Property: fmt.Sprint(w.names), Reason: "Notion refused the update: " + ae.Message}
	}
	if err != nil {
		return fmt.Errorf("%s page %s: %w", action, id, err)
	}
	return nil
}
