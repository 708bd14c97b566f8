package mcp

import (
	"context"
	"encoding/json"
	"errors"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/control"
)

// addTool registers a typed tool: its input and output schemas are
// inferred from In and Out (schemaFor), its arguments decoded strictly
// (decodeArgs: unknown fields, wrong types and missing fields are tool
// errors naming the field), and h runs with the caller's Principal. An
// error of h is a tool error (toolError).
func addTool[In, Out any](s *Server, t *mcpsdk.Tool, h func(context.Context, control.Principal, In) (*Out, error)) {
	t.InputSchema = schemaFor[In]()
	t.OutputSchema = schemaFor[Out]()
	s.srv.AddTool(t, func(ctx context.Context, req *mcpsdk.CallToolRequest) (*mcpsdk.CallToolResult, error) {
		p, ok := principalFrom(ctx)
		if !ok {
			return nil, errors.New("unauthenticated")
		}
		var in In
		if inv := decodeArgs(req.Params.Arguments, &in); inv != nil {
			return s.toolError(ctx, p, t.Name, inv), nil
		}
		out, err := h(ctx, p, in)
		if err != nil {
			return s.toolError(ctx, p, t.Name, err), nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return s.toolError(ctx, p, t.Name, err), nil
		}
		return &mcpsdk.CallToolResult{
			Content:           []mcpsdk.Content{&mcpsdk.TextContent{Text: string(b)}},
			StructuredContent: json.RawMessage(b),
		}, nil
	})
}

var (
	yes = true
	no  = false
)

// readOnly annotates a tool that changes nothing.
func readOnly(title string) *mcpsdk.ToolAnnotations {
	return &mcpsdk.ToolAnnotations{Title: title, ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &no, OpenWorldHint: &no}
}

func (s *Server) addTools() {
	addTool(s, &mcpsdk.Tool{
		Name:        "describe_source",
		Annotations: readOnly("Describe a source's record fields"),
		Description: `Lists the fields of a source's records as a watch's "when" expression names them (record.title, record.status, record.labels, record.extra.stars, ...), with the JSON types seen and up to three example values, read from the newest mirrored records. It also lists the other names an expression sees (previous, change.kind, change.changed_fields, changed(name), source) and example expressions over these fields.
A web source's records (connector web: a page's items, or the whole page as one record) have record.body (the item's text, or the page's readable text), record.url, record.title when a field gives it, and under record.extra its web.fields, and, for a whole page, record.extra.diff, record.extra.added and record.extra.removed (the lines of the last change) and record.extra.price, record.extra.currency and record.extra.availability (InStock, OutOfStock, ...) from its structured data; read them with get(record.extra, "price"). Its examples are the conditions of a page watch: a text that appears, a line added, a price under a threshold, a restock.
Call it before create_watch or dry_run, so that your expression names fields that exist and compares them with values of the right type.
Give either source (a source name, e.g. {"source": "github-lookout"}) or connector (a kind: http, rss, github, notion, web, imap, file or postgres, e.g. {"connector": "rss"}, which describes every source of that kind you can see), not both.
Errors: "not found" means no source of that name exists for you (it may belong to another user); "invalid arguments" names the argument to correct, e.g. "/sample: sample must be between 1 and 1000".`,
	}, s.describeSource)

	addTool(s, &mcpsdk.Tool{
		Name:        "recent_notifications",
		Annotations: readOnly("Read your notifications"),
		Description: `Returns the notifications your watches made, newest first, a page at a time: id, source, watch, record_id, title, body, urgency (low, medium, high), reason (why the watch notified), change_id (pass it to explain), created_at, and payload (the record and change as the webhook sink sends them). An admin token sees everyone's, operator alerts included.
Use it to tell the user what their watches found. To poll for new ones, pass after_id = the largest id you have already seen (e.g. {"after_id": 4182}): only newer notifications are returned. To read older ones, pass the answer's next_cursor as cursor (absent on the last page). source and watch narrow the list to one source or one watch.
The answer's feed is the URI of your notification feed resource: subscribe to it to be told when new notifications arrive instead of polling.
Errors: "invalid arguments" names the argument to correct, e.g. "/limit: limit must be between 1 and 200" or "/cursor: ..." for a cursor that was not passed back unchanged.`,
	}, s.recentNotifications)

	addTool(s, &mcpsdk.Tool{
		Name:        "report_model_drift",
		Annotations: readOnly("Report the drift of the model's decisions"),
		Description: `Reports, week by week, whether the local model's decisions on your watches drift: for each watch whose decisions' reasons are embedded (lookout.yaml's ollama.drift; "enabled": false when it is not set), each week's distance — the cosine distance between the centroid of the week's reason embeddings and the baseline week's (0 same, 1 unrelated) —, its spread (how varied the reasons are), "drifted" when the distance passed the threshold (an alert is sent once per watch and week), the notify rate of the model-judged decisions, and the model digest changes of the week (a new model version behind the same name).
Use it when the user asks whether a watch's judgments changed, or after a model update. A drifted week with a model change in it usually means the new version judges differently: compare the notify rates, and dry_run the watch to see its current answers.
Example: {"source": "support", "weeks": 8}. source and watch narrow the report; weeks (1 to 104, default 12) counts the current week.
Errors: "invalid arguments" names the argument to correct, e.g. "/weeks: weeks must be between 1 and 104".`,
	}, s.reportModelDrift)

	addTool(s, &mcpsdk.Tool{
		Name:        "report_task_runs",
		Annotations: readOnly("Report the runs of your task watches"),
		Description: `Lists the runs of your task watches (every task run for an admin), newest first, a page at a time: the task (its watch), source, record_id, title, status (claimed, confirming, running, reviewing, completed, failed, ...), attempt, executions, retry_count, when it was claimed, started and finished and how long it ran, the executor's exit_code and result, last_error, whether the tool shows its state, and the review of its result when the watch declares review: correction_count (how many times a failed review sent the result back), review_status (pending, passed, failed, dropped), review_score (the lowest criterion score, 0-10), review (each criterion with pass, score and comment) and review_held_because (why a pending review waits, e.g. the model is down, or why it was dropped).
Use it when the user asks what their task watches did, why a task failed or was sent back, or whether a review is stuck. To read older runs, pass the answer's next_cursor as cursor (absent on the last page).
Example: {"source": "agent-tasks", "status": "failed", "limit": 20}. source, task, status and record_id narrow the list.
Errors: "invalid arguments" names the argument to correct, e.g. "/limit: limit must be between 1 and 200" or "/cursor: ..." for a cursor that was not passed back unchanged.`,
	}, s.reportTaskRuns)
}

// ReportTaskRunsInput are report_task_runs' arguments.
type ReportTaskRunsInput struct {
	Source   string `json:"source,omitempty" jsonschema:"Only the task runs of this source."`
	Task     string `json:"task,omitempty" jsonschema:"Only the task runs of this task watch."`
	Status   string `json:"status,omitempty" jsonschema:"Only the task runs in this status, e.g. failed."`
	RecordID string `json:"record_id,omitempty" jsonschema:"Only the task runs of this record."`
	Cursor   string `json:"cursor,omitempty" jsonschema:"The next_cursor of the previous page; leave out for the newest."`
	Limit    int    `json:"limit,omitempty" jsonschema:"Page size, 1 to 200. Defaults to 50."`
}

func (s *Server) reportTaskRuns(ctx context.Context, p control.Principal, in ReportTaskRunsInput) (*control.TaskRunPage, error) {
	return s.svc.TaskRuns(ctx, p, control.TaskRunQuery{Source: in.Source, Task: in.Task, Status: in.Status, RecordID: in.RecordID, Cursor: in.Cursor, Limit: in.Limit})
}

// ReportModelDriftInput are report_model_drift's arguments.
type ReportModelDriftInput struct {
	Source string `json:"source,omitempty" jsonschema:"Only the watches of this source."`
	Watch  string `json:"watch,omitempty" jsonschema:"Only the watches of this name."`
	Weeks  int    `json:"weeks,omitempty" jsonschema:"How many weeks, the current one last, 1 to 104. Defaults to 12."`
}

func (s *Server) reportModelDrift(ctx context.Context, p control.Principal, in ReportModelDriftInput) (*control.ModelDrift, error) {
	return s.svc.ModelDrift(ctx, p, control.ModelDriftQuery{Source: in.Source, Watch: in.Watch, Weeks: in.Weeks})
}

// DescribeSourceInput are describe_source's arguments.
type DescribeSourceInput struct {
	Source    string `json:"source,omitempty" jsonschema:"The source to describe, by name, e.g. github-lookout. Give source or connector, not both."`
	Connector string `json:"connector,omitempty" jsonschema:"Describe every source of this connector kind you can see instead: http, rss, github, notion, web, imap, file or postgres."`
	Sample    int    `json:"sample,omitempty" jsonschema:"How many of the newest records to read, 1 to 1000. Defaults to 200."`
}

func (s *Server) describeSource(ctx context.Context, p control.Principal, in DescribeSourceInput) (*control.SourceDescription, error) {
	return s.svc.DescribeSource(ctx, p, control.DescribeQuery{Source: in.Source, Connector: in.Connector, Sample: in.Sample})
}

// RecentNotificationsInput are recent_notifications' arguments.
type RecentNotificationsInput struct {
	AfterID int64  `json:"after_id,omitempty" jsonschema:"Only notifications with an id greater than this: the largest id you have seen, to poll for new ones."`
	Cursor  string `json:"cursor,omitempty" jsonschema:"The next_cursor of the previous answer, to read older notifications; leave out for the newest."`
	Limit   int    `json:"limit,omitempty" jsonschema:"Page size, 1 to 200. Defaults to 50."`
	Source  string `json:"source,omitempty" jsonschema:"Only notifications of this source."`
	Watch   string `json:"watch,omitempty" jsonschema:"Only notifications of this watch."`
}

// RecentNotificationsOutput is recent_notifications' answer.
type RecentNotificationsOutput struct {
	Items      []control.Notification `json:"items" jsonschema:"The notifications, newest first."`
	NextCursor string                 `json:"next_cursor,omitempty" jsonschema:"Pass as cursor to read the next (older) page; absent on the last page or when after_id ended the list."`
	Feed       string                 `json:"feed" jsonschema:"The URI of your notification feed resource (lookout://notifications/<owner>): subscribe to it to be told when new notifications arrive."`
}

func (s *Server) recentNotifications(ctx context.Context, p control.Principal, in RecentNotificationsInput) (*RecentNotificationsOutput, error) {
	if in.AfterID < 0 {
		return nil, control.Invalid("/after_id", "after_id must be 0 or a notification id (a positive number), not %d", in.AfterID)
	}
	page, err := s.svc.ListNotifications(ctx, p, control.NotificationQuery{Cursor: in.Cursor, Limit: in.Limit, Source: in.Source, Watch: in.Watch})
	if err != nil {
		return nil, err
	}
	out := &RecentNotificationsOutput{Items: page.Items, NextCursor: page.NextCursor, Feed: feedURI(p.Owner)}
	if in.AfterID > 0 {
		// Newest first: what follows the first seen id is older still.
		out.Items = out.Items[:0:0]
		for _, n := range page.Items {
			if n.ID <= in.AfterID {
				out.NextCursor = ""
				break
			}
			out.Items = append(out.Items, n)
		}
	}
	return out, nil
}
