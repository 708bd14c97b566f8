package control

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/sources"
)

// WatchView is a watch as the API shows it.
type WatchView struct {
	Source       string          `json:"source"`
	Name         string          `json:"name"`
	Owner        string          `json:"owner" doc:"Whose watch it is; empty for the operator's."`
	ManagedBy    string          `json:"managed_by" doc:"api, or file:<path> for a watch declared in the operator's files (read-only here)."`
	Paused       bool            `json:"paused"`
	PausedReason string          `json:"paused_reason,omitempty"`
	Definition   json.RawMessage `json:"definition" doc:"The watch as in a source file's watches: name, when, ask, notify, webhook, ... A webhook's secret shows as [redacted]."`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	// SourceOrphaned is set while the watch's source is orphaned.
	SourceOrphaned   bool       `json:"source_orphaned" doc:"The watch's source is orphaned: the operator's file that declared it left the configuration directory. The watch is kept, intact, but the source does not run (no new changes) until a file declares it again; delete the watch if you no longer want it."`
	SourceOrphanedAt *time.Time `json:"source_orphaned_at,omitempty" doc:"Since when the watch's source is orphaned."`
	// WebhookSecret is set only in the answer of the request that made
	// the watch's webhook secret: shown once, stored sealed.
	WebhookSecret string `json:"webhook_secret,omitempty" doc:"The signing secret of the watch's own webhook (whsec_..., Standard Webhooks), in the answer of the create, update or rotate that made it and never again: keep it to verify the webhook-signature of its requests."`
}

// SourceView is a source as the API shows it.
type SourceView struct {
	Name         string          `json:"name"`
	Owner        string          `json:"owner" doc:"Who created it; empty for a shared source declared by the operator."`
	Shared       bool            `json:"shared" doc:"Declared by the operator; everyone may watch it."`
	ManagedBy    string          `json:"managed_by" doc:"api, or file:<path> (read-only here)."`
	Connector    string          `json:"connector"`
	Paused       bool            `json:"paused"`
	PausedReason string          `json:"paused_reason,omitempty"`
	Definition   json.RawMessage `json:"definition" doc:"The source's keys as in a source file, without its watches. Credentials (tokens, secrets, Authorization and other credential headers) show as [redacted]; send [redacted] back in an update to keep the stored one."`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	Orphaned     bool            `json:"orphaned" doc:"The operator's file that declared the source left the configuration directory while users still watch it: it is kept with their watches but does not run until a file declares it again."`
	OrphanedAt   *time.Time      `json:"orphaned_at,omitempty" doc:"Since when the source is orphaned."`
}

func watchView(w *definitions.Watch) WatchView {
	return WatchView{Source: w.Source, Name: w.Name, Owner: w.Owner, ManagedBy: w.ManagedBy, Paused: w.Paused,
		PausedReason: w.PausedReason, Definition: definitions.RedactCredentials(w.Definition), CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		SourceOrphaned: w.SourceOrphanedAt != nil, SourceOrphanedAt: w.SourceOrphanedAt}
}

func sourceView(s *definitions.Source) SourceView {
	return SourceView{Name: s.Name, Owner: s.Owner, Shared: s.Owner == "", ManagedBy: s.ManagedBy, Connector: s.Connector,
		Paused: s.Paused, PausedReason: s.PausedReason, Definition: definitions.RedactCredentials(s.Definition), CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		Orphaned: s.Orphaned(), OrphanedAt: s.OrphanedAt}
}

func actor(p Principal) definitions.Actor { return definitions.Actor{Owner: p.Owner, Admin: p.Admin} }

// fromStore maps the definitions store's errors to the service's, with
// pointers prefixed by where the definition sits in the request.
func fromStore(err error, prefix, kind, name string) error {
	var ve *definitions.ValidationError
	var ce *definitions.ConflictError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, definitions.ErrNotFound):
		return &NotFoundError{Kind: kind, Name: name}
	case errors.As(err, &ve):
		out := &InvalidError{}
		for _, p := range ve.Problems {
			out.Errors = append(out.Errors, FieldError{Pointer: prefix + p.Pointer, Detail: problemDetail(p)})
		}
		return out
	case errors.As(err, &ce):
		return &ConflictError{Detail: ce.Error()}
	}
	return err
}

func problemDetail(p definitions.Problem) string {
	if p.Pointer == "" {
		return p.Message
	}
	// "/watches/0/notify/1" reads as watches[0].notify[1].
	var b strings.Builder
	for _, seg := range strings.Split(strings.TrimPrefix(p.Pointer, "/"), "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		if _, err := strconv.Atoi(seg); err == nil {
			b.WriteString("[" + seg + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String() + ": " + strings.TrimLeft(p.Message, ": ")
}

// CreateWatchRequest creates a watch on an existing source, or on a new
// source created with it.
type CreateWatchRequest struct {
	// Source names an existing source (a shared one, or yours).
	Source string
	// NewSource is a source definition to create first (a source file's
	// keys as JSON, without watches).
	NewSource json.RawMessage
	// Watch is the watch (a source file's watches item as JSON).
	Watch json.RawMessage
}

// CreatedWatch is what CreateWatch made.
type CreatedWatch struct {
	Watch WatchView `json:"watch"`
	// Source is set when the request created the source.
	Source *SourceView `json:"source,omitempty" doc:"The source, when this request created it."`
}

// CreateWatch creates a watch (and its new source) owned by p, within
// p's limits, audited, in tx (Idempotent's).
func (s *Service) CreateWatch(ctx context.Context, tx pgx.Tx, p Principal, req CreateWatchRequest) (*CreatedWatch, error) {
	if (req.Source == "") == (len(req.NewSource) == 0) {
		return nil, Invalid("/source", "give either source (the name of an existing source) or new_source (a source definition to create), not both and not neither")
	}
	if len(req.Watch) == 0 {
		return nil, Invalid("/watch", "is required: the watch to create, e.g. {\"name\": \"releases\", \"when\": \"change.kind == 'created'\"}")
	}
	if err := s.lockOwner(ctx, tx, p); err != nil {
		return nil, err
	}
	store := s.storeIn(ctx, tx)
	out := &CreatedWatch{}
	source := req.Source
	if len(req.NewSource) > 0 {
		src, err := s.createSource(ctx, tx, store, p, req.NewSource, "/new_source")
		if err != nil {
			return nil, err
		}
		source, out.Source = src.Name, src
	}
	if err := checkWatchFields(req.Watch, "/watch"); err != nil {
		return nil, err
	}
	if err := noEnvRefs(req.Watch, "/watch"); err != nil {
		return nil, err
	}
	if err := s.checkLimit(ctx, tx, p, "watches", s.conf.Limits.Watches, 1, "/watch"); err != nil {
		return nil, err
	}
	def, secret, err := s.prepareWebhook(ctx, source, req.Watch, nil, "/watch")
	if err != nil {
		return nil, err
	}
	if def, err = s.prepareChannel(ctx, source, def, nil, "/watch"); err != nil {
		return nil, err
	}
	def, _, err = s.allotModelCalls(ctx, tx, p, def, "/watch", "", "", 0)
	if err != nil {
		return nil, err
	}
	w, err := store.CreateWatch(ctx, actor(p), source, def)
	if err != nil {
		return nil, fromStore(err, "/watch", "source", source)
	}
	out.Watch = watchView(w)
	if err := s.record(ctx, tx, entry(p, "create", "watch", w.Source+"/"+w.Name, w.Owner), nil, out.Watch); err != nil {
		return nil, err
	}
	out.Watch.WebhookSecret = secret // shown once, never audited
	return out, nil
}

// createSource checks and creates a source definition owned by p.
func (s *Service) createSource(ctx context.Context, tx pgx.Tx, store *definitions.Store, p Principal, def json.RawMessage, prefix string) (*SourceView, error) {
	if err := s.checkUntrusted(ctx, def, prefix); err != nil {
		return nil, err
	}
	if err := noEnvRefs(def, prefix); err != nil {
		return nil, err
	}
	if err := noWebhooksIn(def, prefix); err != nil {
		return nil, err
	}
	if err := s.checkLimit(ctx, tx, p, "sources", s.conf.Limits.Sources, 1, prefix); err != nil {
		return nil, err
	}
	var probe struct {
		Watches json.RawMessage `json:"watches"`
	}
	_ = json.Unmarshal(def, &probe)
	if n := countArray(probe.Watches); n > 0 {
		if err := s.checkLimit(ctx, tx, p, "watches", s.conf.Limits.Watches, n, prefix+"/watches"); err != nil {
			return nil, err
		}
	}
	if def, err := s.allotSourceWatches(ctx, tx, p, def, prefix); err != nil {
		return nil, err
	} else {
		src, watches, err := store.CreateSource(ctx, actor(p), def)
		return s.auditSource(ctx, tx, p, src, watches, err, prefix)
	}
}

// allotSourceWatches applies allotModelCalls to each watch of a new
// source, one after the other.
func (s *Service) allotSourceWatches(ctx context.Context, tx pgx.Tx, p Principal, def json.RawMessage, prefix string) (json.RawMessage, error) {
	if s.conf.Limits.ModelCallsPerDay <= 0 || p.Admin {
		return def, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(def, &m) != nil {
		return def, nil
	}
	var ws []json.RawMessage
	if json.Unmarshal(m["watches"], &ws) != nil || len(ws) == 0 {
		return def, nil
	}
	// The new watches count against each other.
	pending := 0
	for i := range ws {
		w, n, err := s.allotModelCalls(ctx, tx, p, ws[i], fmt.Sprintf("%s/watches/%d", prefix, i), "", "", pending)
		if err != nil {
			return nil, err
		}
		ws[i], pending = w, pending+n
	}
	m["watches"], _ = json.Marshal(ws)
	return json.Marshal(m)
}

func (s *Service) auditSource(ctx context.Context, tx pgx.Tx, p Principal, src *definitions.Source, watches []definitions.Watch, err error, prefix string) (*SourceView, error) {
	if err != nil {
		return nil, fromStore(err, prefix, "source", "")
	}
	v := sourceView(src)
	if err := s.record(ctx, tx, entry(p, "create", "source", src.Name, src.Owner), nil, v); err != nil {
		return nil, err
	}
	for i := range watches {
		wv := watchView(&watches[i])
		if err := s.record(ctx, tx, entry(p, "create", "watch", wv.Source+"/"+wv.Name, wv.Owner), nil, wv); err != nil {
			return nil, err
		}
	}
	return &v, nil
}

// checkWatchFields checks the fields a watch's when names.
func checkWatchFields(def json.RawMessage, prefix string) error {
	var w struct {
		When any `json:"when"`
	}
	if json.Unmarshal(def, &w) != nil {
		return nil
	}
	if s, ok := w.When.(string); ok {
		return checkWhen(s, prefix+"/when")
	}
	return nil
}

func countArray(raw json.RawMessage) int {
	var a []json.RawMessage
	if json.Unmarshal(raw, &a) != nil {
		return 0
	}
	return len(a)
}

// CreateSource creates a source (with its watches, if any) owned by p, in tx.
func (s *Service) CreateSource(ctx context.Context, tx pgx.Tx, p Principal, def json.RawMessage) (*SourceView, error) {
	if err := s.lockOwner(ctx, tx, p); err != nil {
		return nil, err
	}
	return s.createSource(ctx, tx, s.storeIn(ctx, tx), p, def, "")
}

// lockOwner serializes p's creates, so that a flood of concurrent creates
// cannot pass a limit. Without a limit that applies to p (an admin, or
// no watches, sources or model_calls_per_day limit) there is nothing to
// count and no lock is taken.
func (s *Service) lockOwner(ctx context.Context, tx pgx.Tx, p Principal) error {
	if l := s.conf.Limits; p.Admin || (l.Watches <= 0 && l.Sources <= 0 && l.ModelCallsPerDay <= 0) {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('lookout.owner:' || $1, 0))`, p.Owner); err != nil {
		return fmt.Errorf("lock owner %s: %w", p.Owner, err)
	}
	return nil
}

// checkLimit refuses a create of n more of what (watches, sources) past limit.
func (s *Service) checkLimit(ctx context.Context, tx pgx.Tx, p Principal, what string, limit, n int, pointer string) error {
	if limit <= 0 || p.Admin {
		return nil
	}
	q := `SELECT count(*) FROM watches WHERE owner = $1`
	if what == "sources" {
		q = `SELECT count(*) FROM source_definitions WHERE owner = $1`
	}
	var have int
	if err := tx.QueryRow(ctx, q, p.Owner).Scan(&have); err != nil {
		return fmt.Errorf("count %s of %s: %w", what, p.Owner, err)
	}
	if have+n > limit {
		return &LimitError{What: what, Limit: limit, Pointer: pointer}
	}
	return nil
}

// checkUntrusted refuses what a source created through the API may not
// do: read local files, or fetch loopback, private (unless
// api.allow_private), link-local or metadata addresses.
func (s *Service) checkUntrusted(ctx context.Context, def json.RawMessage, prefix string) error {
	var m map[string]any
	if err := json.Unmarshal(def, &m); err != nil {
		return Invalid(prefix, "must be a JSON object: a source definition as in a source file (name, connector, every, and the connector's block)")
	}
	conn, _ := m["connector"].(string)
	switch conn {
	case "http", "rss", "github", "notion", "web":
	case "file":
		return &InvalidError{Errors: []FieldError{{Pointer: prefix + "/connector", Value: conn,
			Detail: "the file connector reads the server's files; sources created through the API may use http, rss, github, notion or web"}}}
	default:
		return &InvalidError{Errors: []FieldError{{Pointer: prefix + "/connector", Value: m["connector"],
			Detail: "must be one of http, rss, github, notion or web (sources created through the API)"}}}
	}
	block, _ := m[conn].(map[string]any)
	if conn == "web" {
		// A browser render runs the page's scripts in the syncer's one
		// shared Chromium (2 renders at a time, about a thousand times a
		// static check's CPU): an API user's page would take the slots
		// of the operator's sources. Only the operator's files may.
		if r, _ := block["render"].(string); r == "browser" {
			return &InvalidError{Errors: []FieldError{{Pointer: prefix + "/web/render", Value: r,
				Detail: "render: browser is for sources the operator declares in the configuration directory (one shared Chromium, a thousand times a static check's cost); sources created through the API read the page as served: leave render out or set it to static"}}}
		}
	}
	for key, v := range block {
		u, ok := v.(string)
		if !ok || !(key == "url" || strings.HasSuffix(key, "_url")) {
			continue
		}
		if err := CheckURL(ctx, s.resolver, u, prefix+"/"+conn+"/"+key, s.conf.AllowPrivate); err != nil {
			return err
		}
	}
	return nil
}

// Cursors of name-ordered listings: base64url of "v1:<source>\x00<name>".
func encodeNameCursor(source, name string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("v1:" + source + "\x00" + name))
}

func decodeNameCursor(c string) (string, string, error) {
	if c == "" {
		return "", "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if v, ok := strings.CutPrefix(string(b), "v1:"); ok {
			src, name, _ := strings.Cut(v, "\x00")
			return src, name, nil
		}
	}
	return "", "", InvalidParameter("cursor", c, "not a cursor of this API: pass the next_cursor of the previous page unchanged, or leave cursor out to start from the first")
}

// WatchPage is a page of watches, by source and name.
type WatchPage struct {
	Items      []WatchView `json:"items"`
	NextCursor string      `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page."`
}

// ListWatches lists p's watches (every watch for an admin), of source ("" all).
func (s *Service) ListWatches(ctx context.Context, p Principal, source, cursor string, limit int) (*WatchPage, error) {
	afterSrc, after, err := decodeNameCursor(cursor)
	if err != nil {
		return nil, err
	}
	if limit, err = pageLimit(limit); err != nil {
		return nil, err
	}
	ws, err := s.store.ListWatches(ctx, actor(p), source, definitions.ListOptions{AfterSource: afterSrc, After: after, Limit: limit + 1})
	if err != nil {
		return nil, err
	}
	page := &WatchPage{Items: []WatchView{}}
	for i := range ws {
		if i == limit {
			page.NextCursor = encodeNameCursor(ws[i-1].Source, ws[i-1].Name)
			break
		}
		page.Items = append(page.Items, watchView(&ws[i]))
	}
	return page, nil
}

// GetWatch returns p's watch source/name.
func (s *Service) GetWatch(ctx context.Context, p Principal, source, name string) (*WatchView, error) {
	w, err := s.store.GetWatch(ctx, actor(p), source, name)
	if err != nil {
		return nil, fromStore(err, "", "watch", source+"/"+name)
	}
	v := watchView(w)
	return &v, nil
}

// UpdateWatch replaces p's watch with def, audited.
func (s *Service) UpdateWatch(ctx context.Context, p Principal, source, name string, def json.RawMessage) (*WatchView, error) {
	if err := checkWatchFields(def, ""); err != nil {
		return nil, err
	}
	if err := noEnvRefs(def, ""); err != nil {
		return nil, err
	}
	var out *WatchView
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		store := s.store.In(tx)
		before, err := store.GetWatch(ctx, actor(p), source, name)
		if err != nil {
			return fromStore(err, "", "watch", source+"/"+name)
		}
		if err := s.lockOwner(ctx, tx, p); err != nil {
			return err
		}
		def, secret, err := s.prepareWebhook(ctx, source, def, before.Definition, "")
		if err != nil {
			return err
		}
		if def, err = s.prepareChannel(ctx, source, def, before.Definition, ""); err != nil {
			return err
		}
		def, _, err = s.allotModelCalls(ctx, tx, p, def, "", source, name, 0)
		if err != nil {
			return err
		}
		out, err = saveWatch(ctx, tx, store, p, "update", source, name, def, before, secret)
		return err
	})
	return out, err
}

// saveWatch stores def as p's watch name of source in tx, audits action
// against the watch as it was (before), and returns the new view with
// secret, the own webhook's signing secret: shown once, never audited
// ("" when none was made).
func saveWatch(ctx context.Context, tx pgx.Tx, store *definitions.Store, p Principal, action, source, name string,
	def []byte, before *definitions.Watch, secret string) (*WatchView, error) {
	w, err := store.UpdateWatch(ctx, actor(p), source, name, def)
	if err != nil {
		return nil, fromStore(err, "", "watch", source+"/"+name)
	}
	v := watchView(w)
	if err := audit.Record(ctx, tx, entry(p, action, "watch", source+"/"+name, w.Owner), watchView(before), v); err != nil {
		return nil, err
	}
	v.WebhookSecret = secret
	return &v, nil
}

// DeleteWatch deletes p's watch, audited.
func (s *Service) DeleteWatch(ctx context.Context, p Principal, source, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		store := s.store.In(tx)
		before, err := store.GetWatch(ctx, actor(p), source, name)
		if err != nil {
			return fromStore(err, "", "watch", source+"/"+name)
		}
		if err := store.DeleteWatch(ctx, actor(p), source, name); err != nil {
			return fromStore(err, "", "watch", source+"/"+name)
		}
		return audit.Record(ctx, tx, entry(p, "delete", "watch", source+"/"+name, before.Owner), watchView(before), nil)
	})
}

// PauseWatch pauses (paused false: resumes) p's watch, audited.
func (s *Service) PauseWatch(ctx context.Context, p Principal, source, name string, paused bool, reason string) (*WatchView, error) {
	var out *WatchView
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		store := s.store.In(tx)
		before, err := store.GetWatch(ctx, actor(p), source, name)
		if err != nil {
			return fromStore(err, "", "watch", source+"/"+name)
		}
		w, err := store.PauseWatch(ctx, actor(p), source, name, paused, reason)
		if err != nil {
			return fromStore(err, "", "watch", source+"/"+name)
		}
		v := watchView(w)
		out = &v
		action := "resume"
		if paused {
			action = "pause"
		}
		return audit.Record(ctx, tx, entry(p, action, "watch", source+"/"+name, w.Owner), watchView(before), v)
	})
	return out, err
}

// SourcePage is a page of sources, by name.
type SourcePage struct {
	Items      []SourceView `json:"items"`
	NextCursor string       `json:"next_cursor,omitempty" doc:"Pass as cursor to get the next page; absent on the last page."`
}

// ListSources lists the sources p sees: shared ones and its own.
func (s *Service) ListSources(ctx context.Context, p Principal, cursor string, limit int) (*SourcePage, error) {
	_, after, err := decodeNameCursor(cursor)
	if err != nil {
		return nil, err
	}
	if limit, err = pageLimit(limit); err != nil {
		return nil, err
	}
	srcs, err := s.store.ListSources(ctx, actor(p), definitions.ListOptions{After: after, Limit: limit + 1})
	if err != nil {
		return nil, err
	}
	page := &SourcePage{Items: []SourceView{}}
	for i := range srcs {
		if i == limit {
			page.NextCursor = encodeNameCursor("", srcs[i-1].Name)
			break
		}
		page.Items = append(page.Items, sourceView(&srcs[i]))
	}
	return page, nil
}

// GetSource returns a source p sees.
func (s *Service) GetSource(ctx context.Context, p Principal, name string) (*SourceView, error) {
	src, err := s.store.GetSource(ctx, actor(p), name)
	if err != nil {
		return nil, fromStore(err, "", "source", name)
	}
	v := sourceView(src)
	return &v, nil
}

// UpdateSource replaces p's source's keys with def, audited.
func (s *Service) UpdateSource(ctx context.Context, p Principal, name string, def json.RawMessage) (*SourceView, error) {
	if err := s.checkUntrusted(ctx, def, ""); err != nil {
		return nil, err
	}
	if err := noEnvRefs(def, ""); err != nil {
		return nil, err
	}
	var out *SourceView
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		store := s.store.In(tx)
		before, err := store.GetSource(ctx, actor(p), name)
		if err != nil {
			return fromStore(err, "", "source", name)
		}
		src, err := store.UpdateSource(ctx, actor(p), name, def)
		if err != nil {
			return fromStore(err, "", "source", name)
		}
		v := sourceView(src)
		out = &v
		return audit.Record(ctx, tx, entry(p, "update", "source", name, src.Owner), sourceView(before), v)
	})
	return out, err
}

// DeleteSource deletes p's source and its watches, audited.
func (s *Service) DeleteSource(ctx context.Context, p Principal, name string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		store := s.store.In(tx)
		before, err := store.GetSource(ctx, actor(p), name)
		if err != nil {
			return fromStore(err, "", "source", name)
		}
		if err := store.DeleteSource(ctx, actor(p), name); err != nil {
			return fromStore(err, "", "source", name)
		}
		return audit.Record(ctx, tx, entry(p, "delete", "source", name, before.Owner), sourceView(before), nil)
	})
}

// PauseSource pauses (paused false: resumes, the one resume of a source:
// definitions.Store.ResumeSource) p's source, audited.
func (s *Service) PauseSource(ctx context.Context, p Principal, name string, paused bool, reason string) (*SourceView, error) {
	var out *SourceView
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		store := s.store.In(tx)
		before, err := store.GetSource(ctx, actor(p), name)
		if err != nil {
			return fromStore(err, "", "source", name)
		}
		var src *definitions.Source
		if paused {
			src, err = store.PauseSource(ctx, actor(p), name, true, reason)
		} else {
			src, _, err = store.ResumeSource(ctx, actor(p), name, time.Now())
		}
		if err != nil {
			var dp *sources.DefinitionPausedError
			if errors.As(err, &dp) {
				return &ConflictError{Detail: dp.Error()}
			}
			return fromStore(err, "", "source", name)
		}
		v := sourceView(src)
		out = &v
		action := "resume"
		if paused {
			action = "pause"
		}
		return audit.Record(ctx, tx, entry(p, action, "source", name, src.Owner), sourceView(before), v)
	})
	return out, err
}

// RunNow asks for a run of a source p sees at once, audited.
func (s *Service) RunNow(ctx context.Context, p Principal, name string) error {
	src, err := s.store.GetSource(ctx, actor(p), name)
	if err != nil {
		return fromStore(err, "", "source", name)
	}
	if err := s.store.RunNow(ctx, actor(p), name); err != nil {
		return fromStore(err, "", "source", name)
	}
	return audit.Record(ctx, s.pool, entry(p, "run_now", "source", name, src.Owner), nil, nil)
}

var _ Resolver = net.DefaultResolver
