package github

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/connectors"
)

// Claim modes of the task block.
const (
	ClaimComment  = "comment"
	ClaimAssignee = "assignee"
)

// Task is the github: block's task: block. The status of an issue is one
// of four labels; the visible claim is a comment (the default) or an
// assignee.
//
//	github:
//	  repo: acme/ops
//	  task: {claim: assignee, assignee: lookout-bot}
type Task struct {
	// Todo, InProgress, Complete and Failed are the status labels.
	// Default to todo, in-progress, done and failed.
	Todo       string `yaml:"todo"`
	InProgress string `yaml:"in_progress"`
	Complete   string `yaml:"complete"`
	Failed     string `yaml:"failed"`
	// Claim is comment (a comment names the run, who claimed and until
	// when) or assignee (the issue is assigned to Assignee while claimed).
	// Defaults to comment.
	Claim string `yaml:"claim"`
	// Assignee is the login assigned while claimed. Required with
	// claim: assignee.
	Assignee string `yaml:"assignee"`
}

func (t *Task) check(src *config.Source) []error {
	var errs []error
	t.Todo = cmp.Or(t.Todo, "todo")
	t.InProgress = cmp.Or(t.InProgress, "in-progress")
	t.Complete = cmp.Or(t.Complete, "done")
	t.Failed = cmp.Or(t.Failed, "failed")
	t.Claim = cmp.Or(t.Claim, ClaimComment)
	seen := map[string]string{}
	for _, l := range []struct{ key, v string }{{"todo", t.Todo}, {"in_progress", t.InProgress}, {"complete", t.Complete}, {"failed", t.Failed}} {
		if prev, dup := seen[strings.ToLower(l.v)]; dup {
			errs = append(errs, src.Errorf("github.task."+l.key, "%q is also task.%s: the four states need four labels", l.v, prev))
		}
		seen[strings.ToLower(l.v)] = l.key
	}
	switch t.Claim {
	case ClaimComment:
	case ClaimAssignee:
		if t.Assignee == "" {
			errs = append(errs, src.Errorf("github.task.assignee", "is required with claim: assignee (the login to assign)"))
		}
	default:
		errs = append(errs, src.Errorf("github.task.claim", "must be comment or assignee, not %q", t.Claim))
	}
	return errs
}

// StripTask removes from a record's fields what the task actions write:
// the four status labels, the comment count (claim and error comments) and
// the assignees (claim: assignee); see connectors.TaskContent.
func (c *Connector) StripTask(fields map[string]any) {
	t, err := c.taskOf()
	if err != nil {
		return
	}
	if labels, ok := fields["labels"].([]any); ok {
		kept := []any{}
		for _, l := range labels {
			if s, _ := l.(string); !slices.ContainsFunc(t.states(), func(st string) bool { return strings.EqualFold(st, s) }) {
				kept = append(kept, l)
			}
		}
		fields["labels"] = kept
	}
	if extra, ok := fields["extra"].(map[string]any); ok {
		delete(extra, "comments")
		if t.Claim == ClaimAssignee {
			delete(extra, "assignees")
		}
	}
}

// states are the status labels, which a status change replaces.
func (t *Task) states() []string { return []string{t.Todo, t.InProgress, t.Complete, t.Failed} }

// The task actions read the issue first and write only over what lookout
// left there (connectors.Actor): Claim only an open issue that carries no
// status label but todo; Complete, Fail and Release only an open issue
// labelled in-progress under the claim's own run (its assignee, or its
// claim comment as the latest claim). The label write follows the read
// at once (connectors.ActWaitLimit); one action of a source at a time
// makes its requests (connectors.ActLock).

// has reports whether is carries label (GitHub compares labels without
// case).
func (is *ghIssue) has(label string) bool {
	return slices.ContainsFunc(is.labels(), func(l string) bool { return strings.EqualFold(l, label) })
}

// status is the status label is carries besides todo ("" for none).
func (t *Task) status(is *ghIssue) string {
	for _, l := range []string{t.InProgress, t.Complete, t.Failed} {
		if is.has(l) {
			return l
		}
	}
	return ""
}

// claimed reports whether is shows cl's claim: open, labelled
// in-progress, and assigned to the assignee, or with cl's claim comment as
// the latest claim since cl.At (none: cl's label landed, not its comment).
func (c *Connector) claimed(ctx context.Context, t *Task, id string, is *ghIssue, cl connectors.Claim, strict bool) (bool, error) {
	if is.State != "open" || !is.has(t.InProgress) {
		return false, nil
	}
	if t.Claim == ClaimAssignee {
		for _, a := range is.Assignees {
			if strings.EqualFold(a.Login, t.Assignee) {
				return true, nil
			}
		}
		return false, nil
	}
	comments, err := c.comments(ctx, id, cl.At)
	if err != nil {
		return false, err
	}
	for i := len(comments) - 1; i >= 0; i-- {
		if strings.Contains(comments[i].Body, "<!-- lookout:claim ") {
			return strings.Contains(comments[i].Body, claimMarker(cl.RunID)), nil
		}
	}
	return !strict, nil
}

// Claim labels the issue in-progress and makes the claim visible: a
// comment naming the run (once per run) or the assignee. An issue that is
// closed or carries another status label than todo is left as it is
// (ErrMoved), unless it shows cl's claim already (a retry).
func (c *Connector) Claim(ctx context.Context, id string, cl connectors.Claim) error {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t, err := c.taskOf()
	if err != nil {
		return err
	}
	is, err := c.issue(ctx, id)
	if err != nil {
		return fmt.Errorf("claim issue %s: %w", id, err)
	}
	switch st := t.status(is); {
	case is.State != "open":
		return fmt.Errorf("claim issue %s: it is %s: %w", id, is.State, connectors.ErrMoved)
	case st == t.InProgress:
		ok, err := c.claimed(ctx, t, id, is, cl, false)
		if err != nil {
			return fmt.Errorf("claim issue %s: %w", id, err)
		}
		if !ok {
			return fmt.Errorf("claim issue %s: it is labelled %s under another claim: %w", id, st, connectors.ErrMoved)
		}
	case st != "":
		return fmt.Errorf("claim issue %s: it is labelled %s, not %s: %w", id, st, t.Todo, connectors.ErrMoved)
	default:
		if err := c.setStatus(ctx, id, is, t.InProgress); err != nil {
			return fmt.Errorf("claim issue %s: %w", id, err)
		}
	}
	if t.Claim == ClaimAssignee {
		_, err = c.do(ctx, http.MethodPost, "/issues/"+id+"/assignees", map[string]any{"assignees": []string{t.Assignee}})
	} else {
		err = c.comment(ctx, id, cl.At, claimMarker(cl.RunID), fmt.Sprintf("Claimed by %s for run %s until %s.",
			cl.By, cl.RunID, cl.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	if err != nil {
		return fmt.Errorf("claim issue %s: %w", id, err)
	}
	return nil
}

// Confirm reads the issue back: open, labelled in-progress, and assigned
// to the assignee or carrying the claim's comment as the latest claim.
func (c *Connector) Confirm(ctx context.Context, id string, cl connectors.Claim) (bool, error) {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	t, err := c.taskOf()
	if err != nil {
		return false, err
	}
	is, err := c.issue(ctx, id)
	if errors.Is(err, connectors.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("confirm the claim on issue %s: %w", id, err)
	}
	ok, err := c.claimed(ctx, t, id, is, cl, true)
	if err != nil {
		return false, fmt.Errorf("confirm the claim on issue %s: %w", id, err)
	}
	return ok, nil
}

// end moves the issue from cl's claim to label: when it shows the claim,
// the label is written; when it carries label already and not
// in-progress (a retry after the label landed), it is left, and the
// caller does the rest of its action (comments, the assignee) again, which
// is idempotent; otherwise ErrMoved.
func (c *Connector) end(ctx context.Context, t *Task, action, id string, cl connectors.Claim, label string) error {
	is, err := c.issue(ctx, id)
	if err != nil {
		return fmt.Errorf("%s issue %s: %w", action, id, err)
	}
	if is.has(label) && !is.has(t.InProgress) {
		return nil
	}
	ok, err := c.claimed(ctx, t, id, is, cl, true)
	if err != nil {
		return fmt.Errorf("%s issue %s: %w", action, id, err)
	}
	if !ok {
		st := cmp.Or(t.status(is), t.Todo)
		if !is.has(st) {
			st = "no status label"
		}
		return fmt.Errorf("%s issue %s: it is %s, %s, not lookout's claim %s: %w", action, id, is.State, st, cl.RunID, connectors.ErrMoved)
	}
	if err := c.setStatus(ctx, id, is, label); err != nil {
		return fmt.Errorf("%s issue %s: %w", action, id, err)
	}
	return nil
}

// Complete labels the issue done.
func (c *Connector) Complete(ctx context.Context, id string, cl connectors.Claim, o connectors.Outcome) error {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t, err := c.taskOf()
	if err != nil {
		return err
	}
	return c.end(ctx, t, "complete", id, cl, t.Complete)
}

// Fail labels the issue failed and comments its error once per run.
func (c *Connector) Fail(ctx context.Context, id string, cl connectors.Claim, o connectors.Outcome) error {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t, err := c.taskOf()
	if err != nil {
		return err
	}
	if err := c.end(ctx, t, "fail", id, cl, t.Failed); err != nil {
		return err
	}
	body := fmt.Sprintf("Run %s failed after %d attempts: %s", cl.RunID, o.RetryCount, o.Error)
	if err := c.comment(ctx, id, cl.At, "<!-- lookout:fail run="+cl.RunID+" -->", body); err != nil {
		return fmt.Errorf("fail issue %s: %w", id, err)
	}
	return nil
}

// Release labels the issue todo again, unassigns the assignee, and
// comments the error (once per run) when there is one.
func (c *Connector) Release(ctx context.Context, id string, cl connectors.Claim, o connectors.Outcome) error {
	unlock, err := c.acting.Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t, err := c.taskOf()
	if err != nil {
		return err
	}
	if err := c.end(ctx, t, "release", id, cl, t.Todo); err != nil {
		return err
	}
	if t.Claim == ClaimAssignee {
		if _, err := c.do(ctx, http.MethodDelete, "/issues/"+id+"/assignees", map[string]any{"assignees": []string{t.Assignee}}); err != nil {
			return fmt.Errorf("release issue %s: %w", id, err)
		}
	}
	if o.Error != "" {
		body := fmt.Sprintf("Run %s released the task (retry %d): %s", cl.RunID, o.RetryCount, o.Error)
		if err := c.comment(ctx, id, cl.At, "<!-- lookout:release run="+cl.RunID+" -->", body); err != nil {
			return fmt.Errorf("release issue %s: %w", id, err)
		}
	}
	return nil
}

func (c *Connector) taskOf() (*Task, error) {
	if c.task == nil {
		return nil, fmt.Errorf("github source %s has no task: block; it acts on issues only with one", c.repo)
	}
	return c.task, nil
}

func claimMarker(run string) string { return "<!-- lookout:claim run=" + run + " -->" }

type ghIssue struct {
	State  string `json:"state"`
	Labels []struct {
		Name string `json:"name"`
	} `json:"labels"`
	Assignees []struct {
		Login string `json:"login"`
	} `json:"assignees"`
}

func (is *ghIssue) labels() []string {
	var out []string
	for _, l := range is.Labels {
		out = append(out, l.Name)
	}
	return out
}

type ghComment struct {
	Body string `json:"body"`
}

func (c *Connector) issue(ctx context.Context, id string) (*ghIssue, error) {
	data, err := c.do(ctx, http.MethodGet, "/issues/"+id, nil)
	if err != nil {
		return nil, err
	}
	var is ghIssue
	if err := json.Unmarshal(data, &is); err != nil {
		return nil, fmt.Errorf("decode issue %s: %w", id, err)
	}
	return &is, nil
}

// setStatus replaces the status labels of is (just read) with label,
// keeping the others, and writes the labels only when they change, right
// after the read (connectors.ActWaitLimit).
func (c *Connector) setStatus(ctx context.Context, id string, is *ghIssue, label string) error {
	have := is.labels()
	want := slices.DeleteFunc(slices.Clone(have), func(l string) bool {
		return slices.ContainsFunc(c.task.states(), func(st string) bool { return strings.EqualFold(st, l) })
	})
	want = append(want, label)
	if slices.Equal(slices.Sorted(slices.Values(have)), slices.Sorted(slices.Values(want))) {
		return nil
	}
	_, err := c.do(connectors.WithWaitLimit(ctx, connectors.ActWaitLimit), http.MethodPut, "/issues/"+id+"/labels", map[string]any{"labels": want})
	return err
}

// comments lists the comments updated since since (a minute of clock skew
// allowed), oldest first.
func (c *Connector) comments(ctx context.Context, id string, since time.Time) ([]ghComment, error) {
	q := url.Values{"per_page": {"100"}}
	if !since.IsZero() {
		q.Set("since", since.Add(-time.Minute).UTC().Format(time.RFC3339))
	}
	data, err := c.do(ctx, http.MethodGet, "/issues/"+id+"/comments?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	var out []ghComment
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decode comments of issue %s: %w", id, err)
	}
	return out, nil
}

// comment posts body with marker unless a comment since since carries the
// marker already, so that a retried call comments once.
func (c *Connector) comment(ctx context.Context, id string, since time.Time, marker, body string) error {
	existing, err := c.comments(ctx, id, since)
	if err != nil {
		return err
	}
	for _, cm := range existing {
		if strings.Contains(cm.Body, marker) {
			return nil
		}
	}
	_, err = c.do(ctx, http.MethodPost, "/issues/"+id+"/comments", map[string]any{"body": body + "\n\n" + marker})
	return err
}

// do sends one request of the REST API under the repository's URL and
// maps the status: connectors.CheckStatusAt's sentinels, 404 wrapping
// connectors.ErrNotFound, 422 a *connectors.ValidationError.
func (c *Connector) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	what := method + " " + c.repo + path
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		rd = bytes.NewReader(b)
	}
	if te, ok := c.client.Transport.(connectors.TimeoutEnforcer); !(ok && te.EnforcesTimeout()) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	if err := connectors.CheckStatusAt(resp, c.now()); err != nil {
		var se *connectors.StatusError
		if errors.As(err, &se) {
			switch se.Code {
			case http.StatusNotFound, http.StatusGone:
				return nil, fmt.Errorf("%s: %w: %w", what, err, connectors.ErrNotFound)
			case http.StatusUnprocessableEntity:
				return nil, fmt.Errorf("%s: %w", what, &connectors.ValidationError{Property: path, Reason: "GitHub refused the request: " + se.Snippet})
			}
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, connectors.MaxBody))
	if err != nil {
		return nil, fmt.Errorf("%s: read body: %w", what, err)
	}
	return data, nil
}
