package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/explain"
	"github.com/lookout-dev/lookout/internal/modelspec"
	"github.com/lookout-dev/lookout/internal/replay"
	"github.com/lookout-dev/lookout/internal/watchspec"
)

// DryRunRequest backtests a watch over a source's stored history.
type DryRunRequest struct {
	Source string
	// Watch is the watch to test (a source file's watches item as JSON);
	// it may be new or one of p's watches with changes.
	Watch json.RawMessage
	// Since is how far back to look. Defaults to 7 days; at most 90.
	Since time.Duration
	// UseModel calls the model for watches with an ask (at most MaxCalls
	// calls); otherwise only cached verdicts answer. With the model, the
	// dry run is answered by an evaluator (dry_run_requests), awaited for
	// at most Config.DryRunWait.
	UseModel bool
	// MaxCalls bounds the model calls: 1 to 50. Defaults to 20.
	MaxCalls int
}

// DryRunMatch is one change the watch would have notified about.
type DryRunMatch struct {
	ChangeID int64  `json:"change_id"`
	RecordID string `json:"record_id"`
	Reason   string `json:"reason,omitempty"`
	// Recorded is what the watch decided then ("" when it did not exist).
	Recorded string `json:"recorded,omitempty" doc:"The decision recorded then, if the watch existed (notify, skip, ...)."`
}

// DryRunReport is what a dry run found.
type DryRunReport struct {
	Source  string    `json:"source"`
	Watch   string    `json:"watch"`
	Since   time.Time `json:"since"`
	Changes int       `json:"changes" doc:"Changes of the source in the window."`
	// WouldNotify counts the changes the watch would have notified about.
	WouldNotify int           `json:"would_notify"`
	Matches     []DryRunMatch `json:"matches" doc:"The changes it would have notified about, oldest first (at most 50)."`
	// Filter and Model count decisions by step and outcome.
	Filter  map[string]int `json:"filter" doc:"Decisions of the when expression: skip, notify, error."`
	Model   map[string]int `json:"model" doc:"Decisions of the model step: notify, skip, hold, error, unknown (no cached verdict without use_model)."`
	Calls   int            `json:"model_calls"`
	Summary string         `json:"summary" doc:"One sentence for the user."`
}

// DryRun re-evaluates the stored changes of a source p can see against a
// watch that is not saved, delivering nothing and writing no decision.
func (s *Service) DryRun(ctx context.Context, p Principal, req DryRunRequest) (*DryRunReport, error) {
	switch {
	case req.Since == 0:
		req.Since = 7 * 24 * time.Hour
	case req.Since < 0 || req.Since > 90*24*time.Hour:
		return nil, Invalid("/since", "must be a duration between 1m and 2160h (90 days), e.g. 168h")
	}
	switch {
	case req.MaxCalls == 0:
		req.MaxCalls = 20
	case req.MaxCalls < 1 || req.MaxCalls > 50:
		return nil, Invalid("/max_calls", "must be between 1 and 50")
	}
	if err := checkWatchFields(req.Watch, "/watch"); err != nil {
		return nil, err
	}
	req.Watch = withoutWebhook(req.Watch) // a dry run delivers nothing
	src, err := s.store.GetSource(ctx, actor(p), req.Source)
	if err != nil {
		return nil, fromStore(err, "/source", "source", req.Source)
	}
	w, err := s.store.ValidateWatch(ctx, actor(p), req.Source, req.Watch)
	if err != nil {
		var ve *definitions.ValidationError
		if errors.As(err, &ve) {
			for i := range ve.Problems {
				ve.Problems[i].Pointer = trimWatchPrefix(ve.Problems[i].Pointer)
			}
		}
		return nil, fromStore(err, "/watch", "source", req.Source)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(src.Definition, &keys); err != nil {
		return nil, fmt.Errorf("dry run: source %s: %w", src.Name, err)
	}
	keys["watches"], _ = json.Marshal([]json.RawMessage{w.Definition})
	doc, _ := json.Marshal(keys)
	v := s.store.Validator()
	parsed, err := v.Source(doc)
	if err != nil {
		return nil, fromStore(err, "/watch", "source", req.Source)
	}
	if len(parsed.Watches) != 1 {
		return nil, fmt.Errorf("dry run: source %s: want the one watch, got %d", src.Name, len(parsed.Watches))
	}
	model := modelspec.Config{}
	if v.Global != nil {
		model = modelspec.FromConfig(v.Global.Ollama)
	}
	cw, err := watchspec.Compile(parsed, 0, parsed.Watches[0], p.Owner, model)
	if err != nil {
		return nil, Invalid("/watch", "%v", err)
	}
	since := time.Now().Add(-req.Since)
	q := replay.Query{Since: since, Until: time.Now(), Source: src.Name, Watch: w.Name, MaxCalls: req.MaxCalls}
	var rep *replay.Report
	if !req.UseModel || cw.Question == nil {
		// Deterministic: the when, and the cached verdicts of an ask. The
		// api runs it itself and asks no model server anything.
		q.NoModel = true
		rep, err = replay.Run(ctx, s.pool, []replay.Source{{Name: parsed.Name, Volatile: parsed.Volatile, Watches: []*watchspec.Watch{cw}}}, q, nil)
	} else {
		rep, err = s.dryRunInEvaluator(ctx, p, doc, q)
	}
	if err != nil {
		return nil, fmt.Errorf("dry run of %s/%s: %w", src.Name, w.Name, err)
	}
	out := &DryRunReport{Source: src.Name, Watch: w.Name, Since: since, Changes: rep.Changes, Filter: rep.Filter, Model: rep.Model,
		Calls: rep.Calls, Matches: []DryRunMatch{}}
	for _, row := range rep.Rows {
		if row.New != "notify" {
			continue
		}
		out.WouldNotify++
		if len(out.Matches) < 50 {
			out.Matches = append(out.Matches, DryRunMatch{ChangeID: row.ChangeID, RecordID: row.RecordID, Reason: row.Reason, Recorded: row.Old})
		}
	}
	out.Summary = fmt.Sprintf("over the %d stored change(s) of %s since %s this watch would have notified %d time(s); nothing was saved or delivered",
		rep.Changes, src.Name, since.UTC().Format(time.RFC3339), out.WouldNotify)
	if n := rep.Unknown; n > 0 {
		if req.UseModel {
			out.Summary += fmt.Sprintf("; %d change(s) needed the model past max_calls and had no cached verdict", n)
		} else {
			out.Summary += fmt.Sprintf("; %d change(s) needed the model and had no cached verdict (set use_model to ask it)", n)
		}
	}
	return out, nil
}

// dryRunInEvaluator has the evaluator deployment answer a dry run with the
// model: a dry_run_requests row (replay.Submit, NOTIFY), claimed by an
// evaluator, whose report is awaited for at most conf.DryRunWait
// (replay.Await). An answer that does not come in time is a
// *DryRunPendingError naming the request.
func (s *Service) dryRunInEvaluator(ctx context.Context, p Principal, doc []byte, q replay.Query) (*replay.Report, error) {
	id, err := replay.Submit(ctx, s.pool, replay.Request{Owner: p.Owner, Source: q.Source, Watch: q.Watch, Definition: doc,
		Since: q.Since, Until: q.Until, MaxCalls: q.MaxCalls}, time.Now().Add(s.conf.DryRunWait))
	if err != nil {
		return nil, err
	}
	s.logger.Debug("dry run asked of the evaluators", "request_id", id, "owner", p.Owner, "source", q.Source, "watch", q.Watch)
	rep, err := replay.Await(ctx, s.pool, id, s.conf.DryRunWait, s.logger)
	var pending *replay.PendingError
	var failed *replay.FailedError
	switch {
	case errors.As(err, &pending):
		return nil, &UnavailableError{Detail: pending.Error()}
	case errors.As(err, &failed):
		return nil, &UnavailableError{Detail: failed.Error()}
	}
	return rep, err
}

// trimWatchPrefix turns the store's /watches/0/when into /when.
func trimWatchPrefix(ptr string) string {
	const pre = "/watches/0"
	if len(ptr) >= len(pre) && ptr[:len(pre)] == pre {
		return ptr[len(pre):]
	}
	return ptr
}

// TrailView is the decision trail of one change, as the API shows it.
type TrailView struct {
	ChangeID      int64          `json:"change_id"`
	Source        string         `json:"source"`
	RecordID      string         `json:"record_id"`
	Kind          string         `json:"kind"`
	Version       int            `json:"version"`
	Title         string         `json:"title,omitempty"`
	ChangedFields []string       `json:"changed_fields"`
	CreatedAt     time.Time      `json:"created_at"`
	EvalStatus    string         `json:"eval_status" doc:"pending or done."`
	EvaluatedAt   *time.Time     `json:"evaluated_at,omitempty"`
	Watches       []TrailDecided `json:"watches" doc:"What each of your watches decided."`
}

// TrailDecided is what one watch decided about the change.
type TrailDecided struct {
	Watch         string     `json:"watch"`
	Step          string     `json:"step,omitempty" doc:"Which step decided: filter, cache, model, budget, error, dedupe."`
	Decision      string     `json:"decision,omitempty" doc:"notify, skip, duplicate, hold or error; empty when not decided yet."`
	Matched       bool       `json:"matched" doc:"Whether the when expression was true."`
	Reason        string     `json:"reason,omitempty"`
	Urgency       string     `json:"urgency,omitempty"`
	Confidence    *float64   `json:"confidence,omitempty"`
	ModelCalls    int        `json:"model_calls"`
	Notifications []TrailOut `json:"notifications"`
}

// TrailOut is a notification the decision made.
type TrailOut struct {
	ID          int64      `json:"id"`
	Sink        string     `json:"sink"`
	Status      string     `json:"status"`
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
}

// Explain returns the decision trail of a change as p's watches judged
// it; a change none of p's watches judged does not exist for p.
func (s *Service) Explain(ctx context.Context, p Principal, changeID int64) (*TrailView, error) {
	notFound := &NotFoundError{Kind: "change", Name: fmt.Sprint(changeID), Hint: "explain takes the change_id of one of your notifications (list_notifications)"}
	mine := map[string]bool{}
	if !p.Admin {
		rows, err := s.pool.Query(ctx, `SELECT watch FROM evaluations WHERE change_id = $1 AND owner = $2`, changeID, p.Owner)
		if err != nil {
			return nil, fmt.Errorf("explain change %d: %w", changeID, err)
		}
		ws, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("explain change %d: %w", changeID, err)
		}
		if len(ws) == 0 {
			return nil, notFound
		}
		for _, w := range ws {
			mine[w] = true
		}
	}
	trails, err := explain.Trails(ctx, s.pool, nil, explain.Query{ChangeID: changeID})
	if err != nil {
		return nil, fmt.Errorf("explain change %d: %w", changeID, err)
	}
	if len(trails) == 0 {
		return nil, notFound
	}
	t := trails[0]
	c := t.Change
	out := &TrailView{ChangeID: c.ID, Source: c.Source, RecordID: c.RecordID, Kind: c.Kind, Version: c.Version, Title: c.Title,
		ChangedFields: c.ChangedFields, CreatedAt: c.CreatedAt, EvalStatus: c.EvalStatus, EvaluatedAt: c.EvaluatedAt, Watches: []TrailDecided{}}
	if out.ChangedFields == nil {
		out.ChangedFields = []string{}
	}
	for _, w := range t.Watches {
		if !p.Admin && !mine[w.Watch] {
			continue
		}
		d := TrailDecided{Watch: w.Watch, ModelCalls: len(w.Calls), Notifications: []TrailOut{}}
		if e := w.Evaluation; e != nil {
			d.Step, d.Decision, d.Matched, d.Reason, d.Urgency, d.Confidence = e.Step, e.Decision, e.Matched, e.Reason, e.Urgency, e.Confidence
		}
		for _, n := range w.Notifications {
			o := TrailOut{ID: n.ID, Sink: n.Sink, Status: n.Status, DeliveredAt: n.DeliveredAt}
			if n.LastError != nil {
				o.LastError = *n.LastError
			}
			d.Notifications = append(d.Notifications, o)
		}
		out.Watches = append(out.Watches, d)
	}
	return out, nil
}
