package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/control"
)

// A watch or source definition in a tool's arguments: a JSON object with
// the keys of a source file (docs/config.md), checked by lookout's one
// validation path (the same as `check` for files and the HTTP API).
type definition = map[string]any

// watchKeys tells a model what a watch definition holds.
const watchKeys = `The watch, as an item of a source file's watches (docs/config.md#watches): name (required: letters, digits, - and _), when (an expression over record, previous and change that must be true to notify, e.g. "change.kind == \"updated\" && changed(\"status\") && record.status == \"released\""; read the fields with describe_source), and optionally ask (a yes/no question for the model about the change, asked only when when is true), examples and counter_examples (for ask), notify (names of sinks the operator declared, e.g. ["log"]), dedupe, digest and urgency (low, medium, high).`

func destructive(title string, idempotent bool) *mcpsdk.ToolAnnotations {
	return &mcpsdk.ToolAnnotations{Title: title, DestructiveHint: &yes, IdempotentHint: idempotent, OpenWorldHint: &no}
}

func additive(title string, idempotent bool) *mcpsdk.ToolAnnotations {
	return &mcpsdk.ToolAnnotations{Title: title, DestructiveHint: &no, IdempotentHint: idempotent, OpenWorldHint: &no}
}

func (s *Server) addWatchTools() {
	addTool(s, &mcpsdk.Tool{
		Name:        "create_watch",
		Annotations: additive("Create a watch", false),
		Description: `Creates a watch for the user: from now on every change of the source's records is checked against the watch's "when" expression (and its "ask" question, if any), and a match becomes a notification (read them with recent_notifications). The watch judges every change committed after this call returns; a new source runs at once.
Use it when the user asks you to keep an eye on something. First call describe_source to learn the fields the expression may name, and dry_run to check what the watch would have matched.
Give either source, the name of an existing source (a shared one declared by the operator, or one the user created), or new_source, a source definition to create with the watch (name, connector: http, rss, github, notion or web, a schedule: every such as "15m" or cron with timezone, and the connector's block, e.g. {"name": "lookout-releases", "connector": "github", "every": "1h", "github": {"repo": "lookout-dev/lookout", "kind": "releases"}}). A credential the source needs (github.token, notion.token, an Authorization header of http.headers) is given as is: it is stored encrypted, used only to fetch, and shown as "[redacted]" from then on; never write ${...} references.
The watch's notifications go to the operator's sinks named in notify, or to the user's own webhook: "webhook": {"url": "https://..."} (a public http(s) URL). The answer's watch.webhook_secret is then the webhook's signing secret (whsec_..., Standard Webhooks: the requests carry webhook-id, webhook-timestamp and webhook-signature). It is shown only in this answer (and to a retry with the same idempotency_key): give it to the user to configure their receiver.
Example: {"source": "github-lookout", "watch": {"name": "new-releases", "when": "change.kind == \"created\"", "notify": ["log"]}, "idempotency_key": "c0ffee-1"}.
Example with a webhook: {"source": "github-lookout", "watch": {"name": "new-releases", "when": "change.kind == \"created\"", "webhook": {"url": "https://hooks.example.com/lookout"}}}.
Pass an idempotency_key (any unique string) so that retrying after a timeout creates nothing twice: the same key with the same arguments returns the first answer.
Errors: "invalid arguments" lines name the field to correct, e.g. "/watch/when: ... record.titel is not a field: record has author, body, ..." or "/watch/notify/0: names sink \"pager\", which lookout.yaml does not declare" or "/new_source/cron: ..." or "/watch/webhook/url: ... resolves to 10.0.0.5, a private address ..." (lookout does not send to loopback or private addresses for users); nothing was created. "not found" means the source does not exist for the user; "conflict" that a watch of that name exists on the source; "limit exceeded" that the user has as many watches or sources as allowed (delete one first).`,
	}, s.createWatch)

	addTool(s, &mcpsdk.Tool{
		Name:        "dry_run",
		Annotations: readOnly("Backtest a watch"),
		Description: `Backtests a watch before saving it: re-evaluates the changes stored for a source over a past window against the watch and says how often, and on which changes, it would have notified ("over the 120 stored changes of github-lookout since ... this watch would have notified 3 times"). Nothing is saved and nothing is delivered.
Use it after describe_source and before create_watch or update_watch, to check that the expression matches what the user means: too many matches means it is too broad, none may mean a field or a value is wrong.
Example: {"source": "github-lookout", "watch": {"name": "new-releases", "when": "change.kind == "created""}, "since": "168h"}.
since is how far back (a duration: 24h, 168h; at most 2160h). A watch with an ask answers from cached model verdicts only, unless use_model is true (then at most max_calls model calls). Without use_model the answer comes at once; with it, an evaluator of the deployment asks the model and the call waits for its report (up to a minute).
The answer: changes (in the window), would_notify, matches (change_id, record_id, reason; pass a change_id to explain), filter and model (decisions by outcome) and a one-sentence summary for the user.
Errors: "invalid arguments" lines name the field as for create_watch, e.g. "/watch/when: ..." or "/since: ..."; "not found": the source does not exist for the user; "unavailable: dry run request 17 was not taken by any evaluator ..." with use_model: no evaluator answered in time (tell the user; run it again without use_model for the cached verdicts only).`,
	}, s.dryRun)

	addTool(s, &mcpsdk.Tool{
		Name:        "preview",
		Annotations: &mcpsdk.ToolAnnotations{Title: "Preview a web page's records", ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &no, OpenWorldHint: &yes},
		Description: `Reads a web page now with the selectors of a web block and returns the records a web source would produce, each as a watch's "when" sees it (record.title, record.body, record.extra...). Nothing is saved.
Use it to write a web source for the user: look at the page, write web.items (a CSS selector, or xpath:..., matching one element per record), web.id and web.fields, preview, correct the selectors until the records are right, then create_watch with new_source {"connector": "web", "web": <the same block>, ...}.
Example: {"url": "https://booking.example.com/slots", "web": {"items": "table.slots tr.slot", "id": "@data-slot-id", "fields": {"title": "td.when", "link": "a.book@href"}}}. Without items the whole page is one record (its readable text in body; price, currency, availability in extra when the page has structured data).
The answer: matched (how many records the page gives), records (id, record, origin; the first 50, strings cut at 2,000 characters), missing_fields (web.fields keys that matched in no record) and a summary. An items selector that matches nothing gives matched 0 and a summary saying so: fix the selector (or the page is an error page, or needs JavaScript, which sources created here cannot render).
Errors: "invalid arguments" lines name the field, e.g. "/web/items: web.items: \"tr[\" is not a valid CSS selector ...", "/url: ... resolves to 10.0.0.5, a private address ..." or "/url: the page could not be read ...: GET https://...: 404 Not Found".`,
	}, s.preview)

	addTool(s, &mcpsdk.Tool{
		Name:        "explain",
		Annotations: readOnly("Explain a decision"),
		Description: `Returns the decision trail of a change the user's watches judged: the change (source, record, kind, changed fields) and, for each of the user's watches, the step that decided (filter: the when expression; cache or model: the ask question; budget; error; dedupe), the decision (notify, skip, duplicate, hold, error), whether the expression matched, the reason, the model calls and the notifications it made with their delivery state.
Use it when the user asks why something was (or was not) notified. Take change_id from a notification (recent_notifications) or a dry_run match, e.g. {"change_id": 377}.
Errors: "not found": none of the user's watches judged that change (or it does not exist).`,
	}, s.explain)

	addTool(s, &mcpsdk.Tool{
		Name:        "list_watches",
		Annotations: readOnly("List your watches"),
		Description: `Lists the user's watches by source and name, a page at a time: source, name, paused, the definition (when, ask, notify, ...), who manages it (api, or file:<path> for a watch the operator declared, which cannot be changed here) and when it was created and updated. An admin token lists every watch.
Use it to find a watch before get_watch, update_watch, pause_watch or delete_watch, or to tell the user what is being watched. source narrows the list to one source; pass the answer's next_cursor as cursor for the next page.
Errors: "invalid arguments" names the argument, e.g. "/limit: limit must be between 1 and 200".`,
	}, s.listWatches)

	addTool(s, &mcpsdk.Tool{
		Name:        "get_watch",
		Annotations: readOnly("Read a watch"),
		Description: `Returns one of the user's watches, named by its source and its name (e.g. {"source": "github-lookout", "name": "new-releases"}): its definition, whether it is paused and why, who manages it.
Errors: "not found" means the user has no watch of that name on that source (list_watches shows the ones there are).`,
	}, s.getWatch)

	addTool(s, &mcpsdk.Tool{
		Name:        "update_watch",
		Annotations: destructive("Change a watch", true),
		Description: `Replaces the definition of one of the user's watches (named by source and name) with watch, the whole watch as in create_watch; its name cannot change (to rename, create the new one and delete the old one). It applies to every change committed after the call returns.
Example: {"source": "github-lookout", "name": "new-releases", "watch": {"name": "new-releases", "when": "change.kind == \"created\" && !(record.title contains \"rc\")"}}.
A webhook keeps its signing secret: send the webhook as get_watch shows it (secret "[redacted]") or without secret. Adding a webhook to a watch that had none returns its new secret in webhook_secret, shown only in this answer.
Errors: "invalid arguments" lines name the field, e.g. "/watch/when: ..."; nothing was changed. "not found": no such watch for the user. "conflict": the operator's files manage this watch (it is read-only here).`,
	}, s.updateWatch)

	addTool(s, &mcpsdk.Tool{
		Name:        "rotate_webhook_secret",
		Annotations: destructive("Rotate a webhook's signing secret", false),
		Description: `Gives the own webhook of one of the user's watches (named by source and name) a new signing secret and returns it in webhook_secret, shown only in this answer; requests are signed with it from now on and the old secret stops working. Use it when the user says the secret leaked or was lost. Example: {"source": "github-lookout", "name": "new-releases"}.
Errors: "not found": no such watch for the user. "conflict": the watch has no webhook of its own (give it one with update_watch), or the operator's files manage it.`,
	}, s.rotateWebhookSecret)

	addTool(s, &mcpsdk.Tool{
		Name:        "delete_watch",
		Annotations: destructive("Delete a watch", true),
		Description: `Deletes one of the user's watches (named by source and name): it judges no change from now on. Its past notifications stay readable. Confirm with the user before deleting; to stop it for a while, use pause_watch instead.
Errors: "not found": no such watch for the user (calling again after a success says so too). "conflict": the operator's files manage this watch.`,
	}, s.deleteWatch)

	addTool(s, &mcpsdk.Tool{
		Name:        "pause_watch",
		Annotations: destructive("Pause a watch", true),
		Description: `Pauses one of the user's watches (named by source and name): changes are not judged by it, and nothing is notified, until resume_watch. reason is kept with the watch, e.g. {"source": "github-lookout", "name": "new-releases", "reason": "on holiday until June"}. Pausing a paused watch changes nothing.
Errors: "not found": no such watch for the user. "conflict": the operator's files manage this watch.`,
	}, s.pauseWatch)

	addTool(s, &mcpsdk.Tool{
		Name:        "resume_watch",
		Annotations: additive("Resume a watch", true),
		Description: `Resumes a paused watch of the user (named by source and name): it judges the changes committed from now on (changes made while it was paused are not judged again).
Errors: "not found": no such watch for the user. "conflict": the operator's files manage this watch.`,
	}, s.resumeWatch)

	addTool(s, &mcpsdk.Tool{
		Name:        "run_now",
		Annotations: additive("Check a source now", true),
		Description: `Asks for a run of a source now, whatever its schedule: the syncer fetches it at its next poll (within about a second when it runs) and the watches judge what changed. Use it when the user wants an answer now rather than at the next scheduled run, or after creating a watch on a source that runs rarely. It returns at once; read the outcome with recent_notifications.
Example: {"source": "github-lookout"}.
Errors: "not found": the source does not exist for the user.`,
	}, s.runNow)
}

// CreateWatchInput are create_watch's arguments.
type CreateWatchInput struct {
	Source         string     `json:"source,omitempty" jsonschema:"An existing source to watch, by name (a shared one or the user's). Give source or new_source, not both."`
	NewSource      definition `json:"new_source,omitempty" jsonschema:"A source to create with the watch, as a source file declares it (docs/config.md): name, connector (http, rss, github, notion or web), every or cron, rate_limit, the connector's block, fields. Without watches: the watch goes in watch."`
	Watch          definition `json:"watch" jsonschema:"The watch to create. It must have a name and usually a when expression."`
	IdempotencyKey string     `json:"idempotency_key,omitempty" jsonschema:"Any unique string (at most 255 characters): a retry with the same key and the same arguments returns the first answer and creates nothing."`
}

func (s *Server) createWatch(ctx context.Context, p control.Principal, in CreateWatchInput) (*control.CreatedWatch, error) {
	req := control.CreateWatchRequest{Source: in.Source, NewSource: marshal(in.NewSource), Watch: marshal(in.Watch)}
	// The key's fingerprint covers the arguments but the key itself.
	keyed := in
	keyed.IdempotencyKey = ""
	body, err := json.Marshal(keyed)
	if err != nil {
		return nil, err
	}
	ans, err := s.svc.Idempotent(ctx, p, in.IdempotencyKey, "create_watch", body, func(ctx context.Context, tx pgx.Tx) (*control.Answer, error) {
		out, err := s.svc.CreateWatch(ctx, tx, p, req)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(out)
		return &control.Answer{Status: 201, Body: b, Secret: out.Watch.WebhookSecret != ""}, err
	})
	if err != nil {
		return nil, err
	}
	out := &control.CreatedWatch{}
	if err := json.Unmarshal(ans.Body, out); err != nil {
		return nil, err
	}
	return out, nil
}

func marshal(d definition) json.RawMessage {
	if d == nil {
		return nil
	}
	b, _ := json.Marshal(d)
	return b
}

// ListWatchesInput are list_watches' arguments.
type ListWatchesInput struct {
	Source string `json:"source,omitempty" jsonschema:"Only the watches of this source."`
	Cursor string `json:"cursor,omitempty" jsonschema:"The next_cursor of the previous answer; leave out to start."`
	Limit  int    `json:"limit,omitempty" jsonschema:"Page size, 1 to 200. Defaults to 50."`
}

func (s *Server) listWatches(ctx context.Context, p control.Principal, in ListWatchesInput) (*control.WatchPage, error) {
	return s.svc.ListWatches(ctx, p, in.Source, in.Cursor, in.Limit)
}

// WatchName names a watch: its source and its name.
type WatchName struct {
	Source string `json:"source" jsonschema:"The source the watch watches, e.g. github-lookout."`
	Name   string `json:"name" jsonschema:"The watch's name, e.g. new-releases."`
}

func (s *Server) getWatch(ctx context.Context, p control.Principal, in WatchName) (*control.WatchView, error) {
	return s.svc.GetWatch(ctx, p, in.Source, in.Name)
}

// UpdateWatchInput are update_watch's arguments.
type UpdateWatchInput struct {
	Source string     `json:"source" jsonschema:"The source the watch watches."`
	Name   string     `json:"name" jsonschema:"The watch's name (it cannot change)."`
	Watch  definition `json:"watch" jsonschema:"The whole new definition of the watch, as in create_watch; its name, if given, must be the watch's."`
}

func (s *Server) updateWatch(ctx context.Context, p control.Principal, in UpdateWatchInput) (*control.WatchView, error) {
	w, err := s.svc.UpdateWatch(ctx, p, in.Source, in.Name, marshal(in.Watch))
	return w, under("/watch", err)
}

// Deleted is delete_watch's answer.
type Deleted struct {
	Deleted bool   `json:"deleted" jsonschema:"true: the watch is gone."`
	Source  string `json:"source"`
	Name    string `json:"name"`
}

func (s *Server) deleteWatch(ctx context.Context, p control.Principal, in WatchName) (*Deleted, error) {
	if err := s.svc.DeleteWatch(ctx, p, in.Source, in.Name); err != nil {
		return nil, err
	}
	return &Deleted{Deleted: true, Source: in.Source, Name: in.Name}, nil
}

// PauseWatchInput are pause_watch's arguments.
type PauseWatchInput struct {
	Source string `json:"source" jsonschema:"The source the watch watches."`
	Name   string `json:"name" jsonschema:"The watch's name."`
	Reason string `json:"reason,omitempty" jsonschema:"Why it is paused, kept with the watch (shown by get_watch), e.g. on holiday until June."`
}

func (s *Server) pauseWatch(ctx context.Context, p control.Principal, in PauseWatchInput) (*control.WatchView, error) {
	return s.svc.PauseWatch(ctx, p, in.Source, in.Name, true, in.Reason)
}

func (s *Server) resumeWatch(ctx context.Context, p control.Principal, in WatchName) (*control.WatchView, error) {
	return s.svc.PauseWatch(ctx, p, in.Source, in.Name, false, "")
}

func (s *Server) rotateWebhookSecret(ctx context.Context, p control.Principal, in WatchName) (*control.WatchView, error) {
	return s.svc.RotateWebhookSecret(ctx, p, in.Source, in.Name)
}

// RunNowInput are run_now's arguments.
type RunNowInput struct {
	Source string `json:"source" jsonschema:"The source to run, e.g. github-lookout."`
}

// RunRequested is run_now's answer.
type RunRequested struct {
	Requested bool   `json:"requested" jsonschema:"true: the source runs at the syncer's next poll."`
	Source    string `json:"source"`
}

func (s *Server) runNow(ctx context.Context, p control.Principal, in RunNowInput) (*RunRequested, error) {
	if err := s.svc.RunNow(ctx, p, in.Source); err != nil {
		return nil, err
	}
	return &RunRequested{Requested: true, Source: in.Source}, nil
}

// under locates the body pointers of a validation error under prefix:
// the control layer locates a watch's fields from the watch itself (the
// HTTP API's body), a tool's arguments carry it in an argument.
func under(prefix string, err error) error {
	var inv *control.InvalidError
	if !errors.As(err, &inv) {
		return err
	}
	out := &control.InvalidError{Errors: make([]control.FieldError, len(inv.Errors))}
	for i, f := range inv.Errors {
		if f.Parameter == "" && f.Header == "" {
			f.Pointer = prefix + f.Pointer
		}
		out.Errors[i] = f
	}
	return out
}

// DryRunInput are dry_run's arguments.
type DryRunInput struct {
	Source   string     `json:"source" jsonschema:"The source whose stored changes to replay (a shared one or the user's), e.g. github-lookout."`
	Watch    definition `json:"watch" jsonschema:"The watch to test, as for create_watch: a new one, or one of the user's with changes."`
	Since    string     `json:"since,omitempty" jsonschema:"How far back, as a duration: 24h, 168h. Defaults to 168h (7 days); at most 2160h (90 days)."`
	UseModel bool       `json:"use_model,omitempty" jsonschema:"Ask the model where the watch has an ask and no verdict is cached (costs model calls). Defaults to false: cached verdicts only."`
	MaxCalls int        `json:"max_calls,omitempty" jsonschema:"At most this many model calls with use_model, 1 to 50. Defaults to 20."`
}

func (s *Server) dryRun(ctx context.Context, p control.Principal, in DryRunInput) (*control.DryRunReport, error) {
	var since time.Duration
	if in.Since != "" {
		d, err := time.ParseDuration(in.Since)
		if err != nil || d <= 0 {
			return nil, control.Invalid("/since", "must be a positive duration such as 24h or 168h, not %q", in.Since)
		}
		since = d
	}
	return s.svc.DryRun(ctx, p, control.DryRunRequest{Source: in.Source, Watch: marshal(in.Watch), Since: since, UseModel: in.UseModel, MaxCalls: in.MaxCalls})
}

// PreviewInput are preview's arguments.
type PreviewInput struct {
	URL    string     `json:"url,omitempty" jsonschema:"The page to read (http or https). Give it here or as web.url."`
	Web    definition `json:"web,omitempty" jsonschema:"The web block of a source (docs/web.md): items (selector of the records), id, fields (name to selector, @attr or selector@attr), remove, ignore_text, ignore_regex, headers, robots, max_bytes."`
	Fields definition `json:"fields,omitempty" jsonschema:"The source's fields mapping (item keys to record fields), as in a source file. Defaults to none: title, body and url fill those record fields, other keys go to extra."`
}

func (s *Server) preview(ctx context.Context, p control.Principal, in PreviewInput) (*control.PreviewReport, error) {
	return s.svc.Preview(ctx, p, control.PreviewRequest{URL: in.URL, Web: marshal(in.Web), Fields: marshal(in.Fields)})
}

// ExplainInput are explain's arguments.
type ExplainInput struct {
	ChangeID int64 `json:"change_id" jsonschema:"The change to explain: the change_id of a notification or of a dry_run match."`
}

func (s *Server) explain(ctx context.Context, p control.Principal, in ExplainInput) (*control.TrailView, error) {
	if in.ChangeID < 1 {
		return nil, control.Invalid("/change_id", "must be a change id (a positive number from a notification's change_id), not %d", in.ChangeID)
	}
	return s.svc.Explain(ctx, p, in.ChangeID)
}
