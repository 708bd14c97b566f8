package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/control"
)

// Definition is a free-form JSON object validated by lookout's one
// validation path (the same as `check` for files). Its numbers are kept
// as written (json.Number), never rounded through float64: an all-digit
// id or a 64-bit seed reaches the definition exactly.
type Definition map[string]any

// UnmarshalJSON decodes the object keeping its numbers as written.
func (d *Definition) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return err
	}
	*d = m
	return nil
}

func (a *API) definitionRoutes() {
	// Each operation gets maps of its own: huma adds the operation's
	// success answer to the map it is given, so a shared map gave every
	// source operation the watch schema of the first watch operation.
	write := func() map[string]*huma.Response {
		return problemResponses(http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity)
	}
	create := func() map[string]*huma.Response {
		return problemResponses(http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusForbidden, http.StatusRequestEntityTooLarge)
	}
	read := func() map[string]*huma.Response { return problemResponses(http.StatusNotFound) }

	huma.Register(a.huma, huma.Operation{
		OperationID: "create_watch", Method: http.MethodPost, Path: "/v1/watches", Tags: []string{"watches"}, DefaultStatus: http.StatusCreated,
		Summary: "Create a watch, on an existing source or a new one",
		Description: "Give `source` (a source you can see: a shared one or yours; see list_sources) or `new_source` (a source definition, " +
			"created with the watch), and `watch`: `name`, `when` (an expression over record, previous, change; see describe_source), " +
			"optionally `ask` (a question for the model), `notify` (sink names), `webhook` ({\"url\": \"https://...\"}: your own webhook, " +
			"which receives each notification signed the Standard Webhooks way; the answer's watch.webhook_secret is its signing secret, shown this once). " +
			"The watch is used for every change committed after the call returns; " +
			"a new source runs at once. Send an Idempotency-Key header so that a retry creates nothing twice (a retry gets the same secret).",
		Security: bearer, Responses: create(),
	}, a.createWatch)

	huma.Register(a.huma, huma.Operation{
		OperationID: "dry_run", Method: http.MethodPost, Path: "/v1/dry_run", Tags: []string{"watches"},
		Summary: "Backtest a watch over the stored history of a source, without saving it",
		Description: "Re-evaluates the stored changes of `source` from `since` ago against `watch` (new, or one of yours with changes) " +
			"and says how often and on which changes it would have notified. Nothing is saved and nothing is delivered. " +
			"A watch with an ask uses cached verdicts only unless `use_model` is set (then at most `max_calls` model calls). " +
			"Without `use_model` the api answers at once; with it, an evaluator answers: the call waits for its report (up to a minute, " +
			"LOOKOUT_DRY_RUN_WAIT) and answers 503 (`unavailable`, naming the dry run request) when no evaluator took the request in time.",
		Security: bearer, Responses: problemResponses(http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable),
	}, a.dryRun)

	huma.Register(a.huma, huma.Operation{
		OperationID: "preview", Method: http.MethodPost, Path: "/v1/preview", Tags: []string{"sources"},
		Summary: "Read a web page with a web block's selectors, without saving anything",
		Description: "Fetches `url` (or `web.url`) now and extracts it with `web` (the web block of a source: items, id, fields, remove, " +
			"ignore_text, ignore_regex, headers; docs/web.md) and `fields` (the source's fields mapping), and answers the records a web source " +
			"would produce: each record as a watch's `when` sees it. Nothing is saved. The URL goes through the checks of a source created " +
			"through the API (no loopback, private, link-local or metadata address; `render: browser` refused) and every connection through the " +
			"untrusted egress policy; robots.txt is obeyed unless `web.robots: ignore`; at most 45s. An `items` selector that matches nothing " +
			"is an answer with no records whose summary says so; a page that cannot be read is a 422 at /url (or /web/url).",
		Security: bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.preview)

	huma.Register(a.huma, huma.Operation{
		OperationID: "explain", Method: http.MethodGet, Path: "/v1/changes/{change}/explain", Tags: []string{"watches"},
		Summary: "The decision trail of a change your watches judged",
		Description: "For each of your watches: the step that decided (filter, cache, model, budget, error, dedupe), the decision, " +
			"the reason, the model calls and the notifications it made. Take change_id from a notification.",
		Security: bearer, Responses: problemResponses(http.StatusNotFound),
	}, a.explain)

	huma.Register(a.huma, huma.Operation{
		OperationID: "list_watches", Method: http.MethodGet, Path: "/v1/watches", Tags: []string{"watches"},
		Summary: "List your watches", Description: "Your watches by source and name (an admin sees all).",
		Security: bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.listWatches)
	huma.Register(a.huma, huma.Operation{
		OperationID: "get_watch", Method: http.MethodGet, Path: "/v1/watches/{source}/{watch}", Tags: []string{"watches"},
		Summary: "Read a watch", Security: bearer, Responses: read(),
	}, a.getWatch)
	huma.Register(a.huma, huma.Operation{
		OperationID: "update_watch", Method: http.MethodPut, Path: "/v1/watches/{source}/{watch}", Tags: []string{"watches"},
		Summary: "Replace a watch's definition",
		Description: "The body is the whole watch (its name unchanged); it is validated like a new one. A webhook keeps its signing secret " +
			"(leave webhook.secret out, or send back [redacted]); a webhook added by the update gets one, in webhook_secret of the answer, shown this once.",
		Security: bearer, Responses: write(),
	}, a.updateWatch)
	huma.Register(a.huma, huma.Operation{
		OperationID: "delete_watch", Method: http.MethodDelete, Path: "/v1/watches/{source}/{watch}", Tags: []string{"watches"},
		Summary: "Delete a watch", Security: bearer, Responses: write(), DefaultStatus: http.StatusNoContent,
	}, a.deleteWatch)
	huma.Register(a.huma, huma.Operation{
		OperationID: "rotate_webhook_secret", Method: http.MethodPost, Path: "/v1/watches/{source}/{watch}/webhook/rotate", Tags: []string{"watches"},
		Summary: "Give a watch's own webhook a new signing secret",
		Description: "The answer's webhook_secret is the new secret, shown this once; requests are signed with it from now on " +
			"(notifications already being sent may still carry the old one's signature). 409 when the watch has no webhook of its own.",
		Security: bearer, Responses: write(),
	}, a.rotateWebhookSecret)
	huma.Register(a.huma, huma.Operation{
		OperationID: "pause_watch", Method: http.MethodPost, Path: "/v1/watches/{source}/{watch}/pause", Tags: []string{"watches"},
		Summary: "Pause a watch: changes are not judged by it until resumed", Security: bearer, Responses: write(),
	}, a.pauseWatch)
	huma.Register(a.huma, huma.Operation{
		OperationID: "resume_watch", Method: http.MethodPost, Path: "/v1/watches/{source}/{watch}/resume", Tags: []string{"watches"},
		Summary: "Resume a paused watch", Security: bearer, Responses: write(),
	}, a.resumeWatch)

	huma.Register(a.huma, huma.Operation{
		OperationID: "create_source", Method: http.MethodPost, Path: "/v1/sources", Tags: []string{"sources"}, DefaultStatus: http.StatusCreated,
		Summary: "Create a source (and its watches)",
		Description: "The body is a source definition as in a source file (name, connector, every or cron, the connector's block, watches). " +
			"Sources created through the API are yours; their URLs may not reach loopback, private, link-local or metadata addresses.",
		Security: bearer, Responses: create(),
	}, a.createSource)
	huma.Register(a.huma, huma.Operation{
		OperationID: "list_sources", Method: http.MethodGet, Path: "/v1/sources", Tags: []string{"sources"},
		Summary: "List the sources you can watch: shared ones and yours", Security: bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.listSources)
	huma.Register(a.huma, huma.Operation{
		OperationID: "get_source", Method: http.MethodGet, Path: "/v1/sources/{source}", Tags: []string{"sources"},
		Summary: "Read a source", Security: bearer, Responses: read(),
	}, a.getSource)
	huma.Register(a.huma, huma.Operation{
		OperationID: "update_source", Method: http.MethodPut, Path: "/v1/sources/{source}", Tags: []string{"sources"},
		Summary: "Replace a source's keys (not its watches)", Security: bearer, Responses: write(),
	}, a.updateSource)
	huma.Register(a.huma, huma.Operation{
		OperationID: "delete_source", Method: http.MethodDelete, Path: "/v1/sources/{source}", Tags: []string{"sources"},
		Summary: "Delete a source you created, with its watches", Security: bearer, Responses: write(), DefaultStatus: http.StatusNoContent,
	}, a.deleteSource)
	huma.Register(a.huma, huma.Operation{
		OperationID: "pause_source", Method: http.MethodPost, Path: "/v1/sources/{source}/pause", Tags: []string{"sources"},
		Summary: "Pause a source you created: it is not polled until resumed", Security: bearer, Responses: write(),
	}, a.pauseSource)
	huma.Register(a.huma, huma.Operation{
		OperationID: "resume_source", Method: http.MethodPost, Path: "/v1/sources/{source}/resume", Tags: []string{"sources"},
		Summary: "Resume a paused source", Security: bearer, Responses: write(),
	}, a.resumeSource)
	huma.Register(a.huma, huma.Operation{
		OperationID: "run_now", Method: http.MethodPost, Path: "/v1/sources/{source}/run", Tags: []string{"sources"}, DefaultStatus: http.StatusAccepted,
		Summary: "Run a source now, whatever its schedule", Security: bearer, Responses: write(),
	}, a.runNow)
}

// CreateWatchBody is create_watch's body.
type CreateWatchBody struct {
	Source    string     `json:"source,omitempty" doc:"An existing source to watch (a shared one or yours)."`
	NewSource Definition `json:"new_source,omitempty" doc:"A source definition to create with the watch (as in a source file, without watches)."`
	Watch     Definition `json:"watch" doc:"The watch: name, when, and optionally ask, examples, counter_examples, notify, dedupe, digest, urgency (docs/config.md#watches)."`
}

// CreateWatchInput is create_watch's request.
type CreateWatchInput struct {
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"Any unique string; a retry with the same key and body returns the first answer and creates nothing."`
	RawBody        []byte
	Body           CreateWatchBody
}

// CreatedWatchOutput is create_watch's answer.
type CreatedWatchOutput struct {
	Status   int
	Replayed bool `header:"Idempotent-Replayed" doc:"true when this is the stored answer of an earlier request with the same Idempotency-Key."`
	Body     *control.CreatedWatch
}

func marshalDef(d Definition) json.RawMessage {
	if d == nil {
		return nil
	}
	b, _ := json.Marshal(d)
	return b
}

func (a *API) createWatch(ctx context.Context, in *CreateWatchInput) (*CreatedWatchOutput, error) {
	p := principal(ctx)
	ans, err := a.svc.Idempotent(ctx, p, in.IdempotencyKey, "create_watch", in.RawBody, func(ctx context.Context, tx pgx.Tx) (*control.Answer, error) {
		out, err := a.svc.CreateWatch(ctx, tx, p, control.CreateWatchRequest{Source: in.Body.Source, NewSource: marshalDef(in.Body.NewSource), Watch: marshalDef(in.Body.Watch)})
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		return &control.Answer{Status: http.StatusCreated, Body: b, Secret: out.Watch.WebhookSecret != "", Value: out}, err
	})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	out := &CreatedWatchOutput{Status: ans.Status, Replayed: ans.Replayed}
	if v, ok := ans.Value.(*control.CreatedWatch); ok {
		out.Body = v
		return out, nil
	}
	out.Body = &control.CreatedWatch{}
	if err := json.Unmarshal(ans.Body, out.Body); err != nil {
		return nil, a.fail(ctx, err)
	}
	return out, nil
}

// CreateSourceInput is create_source's request.
type CreateSourceInput struct {
	IdempotencyKey string `header:"Idempotency-Key" maxLength:"255" doc:"Any unique string; a retry with the same key and body returns the first answer and creates nothing."`
	RawBody        []byte
	Body           Definition
}

// SourceOutput answers with a source.
type SourceOutput struct {
	Status   int
	Replayed bool `header:"Idempotent-Replayed" doc:"true when this is the stored answer of an earlier request with the same Idempotency-Key."`
	Body     *control.SourceView
}

func (a *API) createSource(ctx context.Context, in *CreateSourceInput) (*SourceOutput, error) {
	p := principal(ctx)
	ans, err := a.svc.Idempotent(ctx, p, in.IdempotencyKey, "create_source", in.RawBody, func(ctx context.Context, tx pgx.Tx) (*control.Answer, error) {
		out, err := a.svc.CreateSource(ctx, tx, p, marshalDef(in.Body))
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		return &control.Answer{Status: http.StatusCreated, Body: b, Value: out}, err
	})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	out := &SourceOutput{Status: ans.Status, Replayed: ans.Replayed}
	if v, ok := ans.Value.(*control.SourceView); ok {
		out.Body = v
		return out, nil
	}
	out.Body = &control.SourceView{}
	if err := json.Unmarshal(ans.Body, out.Body); err != nil {
		return nil, a.fail(ctx, err)
	}
	return out, nil
}

// WatchPath names a watch.
type WatchPath struct {
	Source string `path:"source" doc:"The source the watch watches."`
	Watch  string `path:"watch" doc:"The watch's name."`
}

// SourcePath names a source.
type SourcePath struct {
	Source string `path:"source" doc:"The source's name."`
}

// ListInput pages a listing.
type ListInput struct {
	Cursor string `query:"cursor" doc:"The next_cursor of the previous page; leave out to start."`
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Page size."`
}

// ListWatchesInput are list_watches' parameters.
type ListWatchesInput struct {
	ListInput
	Source string `query:"source" doc:"Only the watches of this source."`
}

// WatchPageOutput is list_watches' answer.
type WatchPageOutput struct{ Body *control.WatchPage }

// WatchOutput answers with a watch.
type WatchOutput struct{ Body *control.WatchView }

// SourceViewOutput answers with a source.
type SourceViewOutput struct{ Body *control.SourceView }

// SourcePageOutput is list_sources' answer.
type SourcePageOutput struct{ Body *control.SourcePage }

// UpdateWatchInput is update_watch's request.
type UpdateWatchInput struct {
	WatchPath
	Body Definition
}

// UpdateSourceInput is update_source's request.
type UpdateSourceInput struct {
	SourcePath
	Body Definition
}

// PauseBody is the optional body of pause operations.
type PauseBody struct {
	Reason string `json:"reason,omitempty" maxLength:"500" doc:"Why; shown with the paused object."`
}

// PauseWatchInput is pause_watch's request.
type PauseWatchInput struct {
	WatchPath
	Body *PauseBody `required:"false"`
}

// PauseSourceInput is pause_source's request.
type PauseSourceInput struct {
	SourcePath
	Body *PauseBody `required:"false"`
}

func reason(b *PauseBody) string {
	if b == nil {
		return ""
	}
	return b.Reason
}

func (a *API) listWatches(ctx context.Context, in *ListWatchesInput) (*WatchPageOutput, error) {
	page, err := a.svc.ListWatches(ctx, principal(ctx), in.Source, in.Cursor, in.Limit)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &WatchPageOutput{Body: page}, nil
}

func (a *API) getWatch(ctx context.Context, in *WatchPath) (*WatchOutput, error) {
	w, err := a.svc.GetWatch(ctx, principal(ctx), in.Source, in.Watch)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &WatchOutput{Body: w}, nil
}

func (a *API) updateWatch(ctx context.Context, in *UpdateWatchInput) (*WatchOutput, error) {
	w, err := a.svc.UpdateWatch(ctx, principal(ctx), in.Source, in.Watch, marshalDef(in.Body))
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &WatchOutput{Body: w}, nil
}

func (a *API) deleteWatch(ctx context.Context, in *WatchPath) (*struct{}, error) {
	if err := a.svc.DeleteWatch(ctx, principal(ctx), in.Source, in.Watch); err != nil {
		return nil, a.fail(ctx, err)
	}
	return &struct{}{}, nil
}

func (a *API) rotateWebhookSecret(ctx context.Context, in *WatchPath) (*WatchOutput, error) {
	w, err := a.svc.RotateWebhookSecret(ctx, principal(ctx), in.Source, in.Watch)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &WatchOutput{Body: w}, nil
}

func (a *API) pauseWatch(ctx context.Context, in *PauseWatchInput) (*WatchOutput, error) {
	w, err := a.svc.PauseWatch(ctx, principal(ctx), in.Source, in.Watch, true, reason(in.Body))
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &WatchOutput{Body: w}, nil
}

func (a *API) resumeWatch(ctx context.Context, in *WatchPath) (*WatchOutput, error) {
	w, err := a.svc.PauseWatch(ctx, principal(ctx), in.Source, in.Watch, false, "")
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &WatchOutput{Body: w}, nil
}

func (a *API) listSources(ctx context.Context, in *ListInput) (*SourcePageOutput, error) {
	page, err := a.svc.ListSources(ctx, principal(ctx), in.Cursor, in.Limit)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &SourcePageOutput{Body: page}, nil
}

func (a *API) getSource(ctx context.Context, in *SourcePath) (*SourceViewOutput, error) {
	s, err := a.svc.GetSource(ctx, principal(ctx), in.Source)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &SourceViewOutput{Body: s}, nil
}

func (a *API) updateSource(ctx context.Context, in *UpdateSourceInput) (*SourceViewOutput, error) {
	s, err := a.svc.UpdateSource(ctx, principal(ctx), in.Source, marshalDef(in.Body))
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &SourceViewOutput{Body: s}, nil
}

func (a *API) deleteSource(ctx context.Context, in *SourcePath) (*struct{}, error) {
	if err := a.svc.DeleteSource(ctx, principal(ctx), in.Source); err != nil {
		return nil, a.fail(ctx, err)
	}
	return &struct{}{}, nil
}

func (a *API) pauseSource(ctx context.Context, in *PauseSourceInput) (*SourceViewOutput, error) {
	s, err := a.svc.PauseSource(ctx, principal(ctx), in.Source, true, reason(in.Body))
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &SourceViewOutput{Body: s}, nil
}

func (a *API) resumeSource(ctx context.Context, in *SourcePath) (*SourceViewOutput, error) {
	s, err := a.svc.PauseSource(ctx, principal(ctx), in.Source, false, "")
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &SourceViewOutput{Body: s}, nil
}

func (a *API) runNow(ctx context.Context, in *SourcePath) (*struct{}, error) {
	if err := a.svc.RunNow(ctx, principal(ctx), in.Source); err != nil {
		return nil, a.fail(ctx, err)
	}
	return &struct{}{}, nil
}

// DryRunBody is dry_run's body.
type DryRunBody struct {
	Source   string     `json:"source" doc:"The source whose stored changes to replay (a shared one or yours)."`
	Watch    Definition `json:"watch" doc:"The watch to test, as for create_watch."`
	Since    string     `json:"since,omitempty" doc:"How far back, as a duration (24h, 168h). Defaults to 168h; at most 2160h."`
	UseModel bool       `json:"use_model,omitempty" doc:"Ask the model where the watch has an ask and no verdict is cached."`
	MaxCalls int        `json:"max_calls,omitempty" minimum:"0" maximum:"50" doc:"At most this many model calls (default 20)."`
}

// DryRunInput is dry_run's request.
type DryRunInput struct {
	Body DryRunBody
}

// DryRunOutput is dry_run's answer.
type DryRunOutput struct{ Body *control.DryRunReport }

func (a *API) dryRun(ctx context.Context, in *DryRunInput) (*DryRunOutput, error) {
	var since time.Duration
	if in.Body.Since != "" {
		d, err := time.ParseDuration(in.Body.Since)
		if err != nil || d <= 0 {
			return nil, a.fail(ctx, control.Invalid("/since", "must be a positive duration such as 24h or 168h, not %q", in.Body.Since))
		}
		since = d
	}
	rep, err := a.svc.DryRun(ctx, principal(ctx), control.DryRunRequest{Source: in.Body.Source, Watch: marshalDef(in.Body.Watch),
		Since: since, UseModel: in.Body.UseModel, MaxCalls: in.Body.MaxCalls})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &DryRunOutput{Body: rep}, nil
}

// PreviewBody is preview's body.
type PreviewBody struct {
	URL    string     `json:"url,omitempty" doc:"The page to read, http(s). Defaults to web.url (give it in one of them)."`
	Web    Definition `json:"web,omitempty" doc:"The web block of a source, as in a source file (docs/web.md): items, id, fields, remove, ignore_text, ignore_regex, headers, robots, max_bytes."`
	Fields Definition `json:"fields,omitempty" doc:"The source's fields mapping (item keys to record fields), as in a source file. Defaults to none: title, body and url fill those record fields, any other key goes to extra."`
}

// PreviewInput is preview's request.
type PreviewInput struct {
	Body PreviewBody
}

// PreviewOutput is preview's answer.
type PreviewOutput struct{ Body *control.PreviewReport }

func (a *API) preview(ctx context.Context, in *PreviewInput) (*PreviewOutput, error) {
	rep, err := a.svc.Preview(ctx, principal(ctx), control.PreviewRequest{URL: in.Body.URL, Web: marshalDef(in.Body.Web), Fields: marshalDef(in.Body.Fields)})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &PreviewOutput{Body: rep}, nil
}

// ExplainInput is explain's request.
type ExplainInput struct {
	Change int64 `path:"change" minimum:"1" doc:"The change id (a notification's change_id)."`
}

// ExplainOutput is explain's answer.
type ExplainOutput struct{ Body *control.TrailView }

func (a *API) explain(ctx context.Context, in *ExplainInput) (*ExplainOutput, error) {
	t, err := a.svc.Explain(ctx, principal(ctx), in.Change)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &ExplainOutput{Body: t}, nil
}
