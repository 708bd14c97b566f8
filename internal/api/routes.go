package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/sse"

	"github.com/lookout-dev/lookout/internal/control"
)

// problemResponses documents the problem+json answers of authenticated operations.
func problemResponses(codes ...int) map[string]*huma.Response {
	out := map[string]*huma.Response{}
	for _, c := range append([]int{http.StatusUnauthorized}, codes...) {
		out[strconv.Itoa(c)] = &huma.Response{Description: http.StatusText(c), Content: map[string]*huma.MediaType{
			"application/problem+json": {Schema: &huma.Schema{Ref: "#/components/schemas/Problem"}},
		}}
	}
	return out
}

// declareProblems adds to op the problems huma and the middleware answer
// without the handler, so that the document lists every status the
// operation can answer (apitest checks each answer the tests receive):
// a body is a 400 when it is not JSON, a 413 over 1 MiB, a 415 in
// another content type, a 422 when it does not match its schema; a
// parameter that is not a string or has bounds is a 422 when it is out of
// them; a bearer operation is a 503 when the token cannot be checked;
// every operation may fail with a 500.
func declareProblems(op *huma.Operation) {
	var codes []int
	if op.RequestBody != nil {
		codes = append(codes, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity)
	}
	for _, p := range op.Parameters {
		if s := p.Schema; s != nil && (s.Type != "string" || s.Minimum != nil || s.Maximum != nil || len(s.Enum) > 0 || s.MaxLength != nil || s.MinLength != nil || s.Pattern != "") {
			codes = append(codes, http.StatusUnprocessableEntity)
			break
		}
	}
	if slices.ContainsFunc(op.Security, func(s map[string][]string) bool { _, ok := s["bearer"]; return ok }) {
		codes = append(codes, http.StatusServiceUnavailable)
	}
	codes = append(codes, http.StatusInternalServerError)
	for code, r := range problemResponses(codes...) {
		if op.Responses[code] == nil {
			op.Responses[code] = r
		}
	}
}

func (a *API) routes() {
	// Register the Problem schema once, for the responses above.
	a.huma.OpenAPI().Components.Schemas.Schema(reflectType[Problem](), true, "Problem")

	huma.Register(a.huma, huma.Operation{
		OperationID: "whoami", Method: http.MethodGet, Path: "/v1/me", Tags: []string{"account"},
		Summary:     "Who the token belongs to",
		Description: "Returns the owner and scope of the bearer token, and the owner's limits.",
		Security:    bearer, Responses: problemResponses(),
	}, a.whoami)

	huma.Register(a.huma, huma.Operation{
		OperationID: "me_link", Method: http.MethodPost, Path: "/v1/me/link", Tags: []string{"account"}, DefaultStatus: http.StatusCreated,
		Summary: "A sign-in link to your page (/me), for the person you act for",
		Description: "Mints a link that opens the owner's page /me (their watches, notifications and why each fired, a form to create a watch, " +
			"their channels) as the token's owner, never as an admin: once, within `ttl` (default 10m, at most 1h). Hand it to the person; " +
			"opening it shows a Sign in button, so a chat app's preview of the link does not spend it. Only its hash is stored; minting and " +
			"using it are audited (kind sign_in_link).",
		Security: bearer, Responses: problemResponses(http.StatusUnprocessableEntity, http.StatusForbidden),
	}, a.meLink)

	huma.Register(a.huma, huma.Operation{
		OperationID: "list_notifications", Method: http.MethodGet, Path: "/v1/notifications", Tags: []string{"notifications"},
		Summary: "List your notifications, newest first",
		Description: "A page of the notifications your watches made (an admin sees all). " +
			"Pass next_cursor as cursor to get older ones. For a live feed use /v1/notifications/stream.",
		Security: bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.listNotifications)

	sse.Register(a.huma, huma.Operation{
		OperationID: "stream_notifications", Method: http.MethodGet, Path: "/v1/notifications/stream", Tags: []string{"notifications"},
		Summary: "Stream your notifications as Server-Sent Events",
		Description: "Each notification is one `notification` event whose id is the notification id. " +
			"Reconnect with the Last-Event-ID header (or ?after=ID) to get what was created while disconnected; " +
			"without either, the stream starts with notifications created from now on. A `keepalive` event is sent when the stream opens and when nothing happened for a while.",
		Security: bearer, Responses: problemResponses(),
	}, map[string]any{"notification": control.Notification{}, "keepalive": Keepalive{}}, a.streamNotifications)

	a.definitionRoutes()
	a.importExportRoutes()

	huma.Register(a.huma, huma.Operation{
		OperationID: "list_audit", Method: http.MethodGet, Path: "/v1/audit", Tags: []string{"account"},
		Summary:     "List the changes made to your objects, newest first",
		Description: "Every change made through the API, MCP or the api binary: who, what, when, and the object before and after (never a secret). An admin sees every owner's.",
		Security:    bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.listAudit)

	huma.Register(a.huma, huma.Operation{
		OperationID: "describe_source", Method: http.MethodGet, Path: "/v1/sources/{source}/fields", Tags: []string{"sources"},
		Summary: "Describe the fields of a source's records",
		Description: "Samples the newest mirrored records of the source and lists each field as a `when` expression names it " +
			"(record.title, record.extra.stars, ...), with the JSON types seen and example values. Read it before writing a watch.",
		Security: bearer, Responses: problemResponses(http.StatusNotFound, http.StatusUnprocessableEntity),
	}, a.describeSource)

	huma.Register(a.huma, huma.Operation{
		OperationID: "describe_connector", Method: http.MethodGet, Path: "/v1/connectors/{connector}/fields", Tags: []string{"sources"},
		Summary:     "Describe the fields of a connector kind's records",
		Description: "Like describe_source, over every source of the connector kind (http, rss, github, notion, web, imap, file) you can see.",
		Security:    bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.describeConnector)

	huma.Register(a.huma, huma.Operation{
		OperationID: "report_model_drift", Method: http.MethodGet, Path: "/v1/reports/model-drift", Tags: []string{"watches"},
		Summary: "Report the drift of the model's decisions, week by week",
		Description: "For each of your watches (every watch for an admin) whose model decisions are embedded (ollama.drift), " +
			"each week's cosine distance between the centroid of its reasons' embeddings and a baseline week's, its spread, " +
			"whether it passed the threshold (an alert is sent once per watch and week), the notify rate of the model-judged " +
			"decisions, and the model digest changes of the week. enabled is false when lookout.yaml does not set ollama.drift. " +
			"See docs/semantic.md, \"Drift of model outputs\".",
		Security: bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.reportModelDrift)

	huma.Register(a.huma, huma.Operation{
		OperationID: "report_task_runs", Method: http.MethodGet, Path: "/v1/reports/task-runs", Tags: []string{"tasks"},
		Summary: "List the runs of your task watches, newest first",
		Description: "The rows of report_task_runs for your task watches (every task run for an admin): status, attempts, executions, " +
			"timings, the executor's result and last error, whether the tool shows the run's state, and the review of the result " +
			"(correction_count, review_status, review_score, review, review_held_because) when the watch declares review:. " +
			"Pass next_cursor as cursor to get older ones. See docs/tasks.md.",
		Security: bearer, Responses: problemResponses(http.StatusUnprocessableEntity),
	}, a.reportTaskRuns)

	huma.Register(a.huma, huma.Operation{
		OperationID: "report_task_run", Method: http.MethodPost, Path: "/v1/task-runs/{id}/result", Tags: []string{"tasks"},
		Summary: "Report the result of a task run you accepted",
		Description: "An agent that answered a task's webhook with 202 reports here when it is done, with the bearer token " +
			"the task's payload carried (report.token; one per attempt, stored hashed). The syncer's task runner then moves the " +
			"task to its terminal state in the tool. Idempotent: the same report again is a no-op (stored: false); a different one, " +
			"or a report of a run that no longer runs (its claim expired), is a 409. See docs/tasks.md.",
		Security:  []map[string][]string{{"taskRunToken": {}}},
		Responses: problemResponses(http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity),
	}, a.reportTaskRun)
}

// ReportTaskRunInput is an agent's report of a task run.
type ReportTaskRunInput struct {
	ID            int64  `path:"id" minimum:"1" doc:"The task run id (task_run_id of the payload)."`
	Authorization string `header:"Authorization" doc:"Bearer <report.token of the payload>."`
	Body          struct {
		Status string         `json:"status" enum:"completed,failed" doc:"completed, or failed."`
		Result map[string]any `json:"result,omitempty" doc:"The result, a JSON object; required when completed."`
		Error  string         `json:"error,omitempty" doc:"Why it failed, in words; required when failed. It becomes LastError in the tool."`
		Retry  *bool          `json:"retry,omitempty" doc:"When failed: whether another attempt may help. Defaults to true."`
	}
}

// ReportTaskRunOutput acknowledges a report.
type ReportTaskRunOutput struct {
	Body struct {
		ID     int64 `json:"id"`
		Stored bool  `json:"stored" doc:"false when the same report was already stored (a retried request)."`
	}
}

func (a *API) reportTaskRun(ctx context.Context, in *ReportTaskRunInput) (*ReportTaskRunOutput, error) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(in.Authorization), " ")
	if !strings.EqualFold(scheme, "bearer") {
		token = ""
	}
	stored, err := a.svc.ReportTaskRun(ctx, in.ID, strings.TrimSpace(token), control.TaskReport{Status: in.Body.Status,
		Result: in.Body.Result, Error: in.Body.Error, Retry: in.Body.Retry})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	out := &ReportTaskRunOutput{}
	out.Body.ID, out.Body.Stored = in.ID, stored
	return out, nil
}

// WhoAmI is whoami's answer.
type WhoAmI struct {
	Body struct {
		Owner  string         `json:"owner"`
		Scope  string         `json:"scope" enum:"user,admin"`
		Limits control.Limits `json:"limits" doc:"The owner's limits (0: none)."`
	}
}

func (a *API) whoami(ctx context.Context, _ *struct{}) (*WhoAmI, error) {
	p := principal(ctx)
	out := &WhoAmI{}
	out.Body.Owner, out.Body.Scope = p.Owner, "user"
	if p.Admin {
		out.Body.Scope = "admin"
	}
	out.Body.Limits = a.svc.Limits()
	return out, nil
}

// MeLinkInput is me_link's request.
type MeLinkInput struct {
	Body *MeLinkBody `required:"false"`
}

// MeLinkBody is me_link's body (optional).
type MeLinkBody struct {
	TTL string `json:"ttl,omitempty" doc:"How long the link may be used, a duration from 1m to 1h. Defaults to 10m."`
}

// MeLinkOutput is me_link's answer.
type MeLinkOutput struct{ Body *control.SignInLink }

func (a *API) meLink(ctx context.Context, in *MeLinkInput) (*MeLinkOutput, error) {
	var ttl time.Duration
	if in.Body != nil && in.Body.TTL != "" {
		d, err := time.ParseDuration(in.Body.TTL)
		if err != nil || d <= 0 {
			return nil, a.fail(ctx, control.Invalid("/ttl", "must be a duration between 1m and 1h such as 10m, not %q", in.Body.TTL))
		}
		ttl = d
	}
	l, err := a.svc.MintSignInLink(ctx, principal(ctx), ttl, time.Now())
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &MeLinkOutput{Body: l}, nil
}

// ListNotificationsInput are list_notifications' parameters.
type ListNotificationsInput struct {
	Cursor string `query:"cursor" doc:"The next_cursor of the previous page; leave out for the newest."`
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Page size."`
	Source string `query:"source" doc:"Only notifications of this source."`
	Watch  string `query:"watch" doc:"Only notifications of this watch."`
}

// NotificationPageOutput is list_notifications' answer.
type NotificationPageOutput struct {
	Body *control.NotificationPage
}

func (a *API) listNotifications(ctx context.Context, in *ListNotificationsInput) (*NotificationPageOutput, error) {
	page, err := a.svc.ListNotifications(ctx, principal(ctx), control.NotificationQuery{Cursor: in.Cursor, Limit: in.Limit, Source: in.Source, Watch: in.Watch})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &NotificationPageOutput{Body: page}, nil
}

// StreamInput are stream_notifications' parameters.
type StreamInput struct {
	LastEventID int64  `header:"Last-Event-ID" doc:"The id of the last event received; the stream resumes after it."`
	After       int64  `query:"after" minimum:"0" doc:"Like Last-Event-ID, for clients that cannot set headers."`
	Source      string `query:"source" doc:"Only notifications of this source."`
	Watch       string `query:"watch" doc:"Only notifications of this watch."`
}

// Keepalive is the event sent on a quiet stream.
type Keepalive struct {
	At time.Time `json:"at"`
}

func (a *API) streamNotifications(ctx context.Context, in *StreamInput, send sse.Sender) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-a.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	after := max(in.LastEventID, in.After)
	p := principal(ctx)
	err := a.svc.Stream(ctx, p, control.StreamQuery{After: after, Source: in.Source, Watch: in.Watch},
		func(n control.Notification) error { return send(sse.Message{ID: int(n.ID), Data: n}) },
		func() error { return send.Data(Keepalive{At: time.Now().UTC()}) })
	if err != nil && ctx.Err() == nil {
		a.logger.Debug("notification stream ended", "error", err, "owner", p.Owner, "request_id", p.RequestID)
	}
}

// DescribeSourceInput are describe_source's parameters.
type DescribeSourceInput struct {
	Source string `path:"source" doc:"The source name."`
	Sample int    `query:"sample" minimum:"1" maximum:"1000" default:"200" doc:"How many of the newest records to read."`
}

// DescribeConnectorInput are describe_connector's parameters.
type DescribeConnectorInput struct {
	Connector string `path:"connector" doc:"The connector kind: http, rss, github, notion, web, imap, file or postgres"`
	Sample    int    `query:"sample" minimum:"1" maximum:"1000" default:"200" doc:"How many of the newest records to read."`
}

// ReportModelDriftInput are report_model_drift's parameters.
type ReportModelDriftInput struct {
	Source string `query:"source" doc:"Only the watches of this source."`
	Watch  string `query:"watch" doc:"Only the watches of this name."`
	Weeks  int    `query:"weeks" minimum:"1" maximum:"104" default:"12" doc:"How many weeks, the current one last."`
}

// ReportModelDriftOutput is report_model_drift's answer.
type ReportModelDriftOutput struct {
	Body *control.ModelDrift
}

func (a *API) reportModelDrift(ctx context.Context, in *ReportModelDriftInput) (*ReportModelDriftOutput, error) {
	d, err := a.svc.ModelDrift(ctx, principal(ctx), control.ModelDriftQuery{Source: in.Source, Watch: in.Watch, Weeks: in.Weeks})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &ReportModelDriftOutput{Body: d}, nil
}

// ReportTaskRunsInput are report_task_runs' parameters.
type ReportTaskRunsInput struct {
	Source   string `query:"source" doc:"Only the task runs of this source."`
	Task     string `query:"task" doc:"Only the task runs of this task watch."`
	Status   string `query:"status" doc:"Only the task runs in this status, e.g. failed."`
	RecordID string `query:"record_id" doc:"Only the task runs of this record."`
	Cursor   string `query:"cursor" doc:"The next_cursor of the previous page; leave out for the newest."`
	Limit    int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Page size."`
}

// ReportTaskRunsOutput is report_task_runs' answer.
type ReportTaskRunsOutput struct {
	Body *control.TaskRunPage
}

func (a *API) reportTaskRuns(ctx context.Context, in *ReportTaskRunsInput) (*ReportTaskRunsOutput, error) {
	page, err := a.svc.TaskRuns(ctx, principal(ctx), control.TaskRunQuery{Source: in.Source, Task: in.Task, Status: in.Status, RecordID: in.RecordID, Cursor: in.Cursor, Limit: in.Limit})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &ReportTaskRunsOutput{Body: page}, nil
}

// DescribeOutput is describe_source's answer.
type DescribeOutput struct {
	Body *control.SourceDescription
}

func (a *API) describeSource(ctx context.Context, in *DescribeSourceInput) (*DescribeOutput, error) {
	d, err := a.svc.DescribeSource(ctx, principal(ctx), control.DescribeQuery{Source: in.Source, Sample: in.Sample})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &DescribeOutput{Body: d}, nil
}

func (a *API) describeConnector(ctx context.Context, in *DescribeConnectorInput) (*DescribeOutput, error) {
	d, err := a.svc.DescribeSource(ctx, principal(ctx), control.DescribeQuery{Connector: in.Connector, Sample: in.Sample})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &DescribeOutput{Body: d}, nil
}

// ListAuditInput are list_audit's parameters.
type ListAuditInput struct {
	Cursor string `query:"cursor" doc:"The next_cursor of the previous page; leave out for the newest."`
	Limit  int    `query:"limit" minimum:"1" maximum:"200" default:"50" doc:"Page size."`
	Kind   string `query:"kind" enum:"watch,source,token" doc:"Only changes of this kind of object."`
	Target string `query:"target" doc:"Only changes of this object (a source name, source/watch, or a token id)."`
}

// AuditPageOutput is list_audit's answer.
type AuditPageOutput struct {
	Body *control.AuditPage
}

func (a *API) listAudit(ctx context.Context, in *ListAuditInput) (*AuditPageOutput, error) {
	page, err := a.svc.ListAudit(ctx, principal(ctx), control.AuditQuery{Cursor: in.Cursor, Limit: in.Limit, Kind: in.Kind, Target: in.Target})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &AuditPageOutput{Body: page}, nil
}
