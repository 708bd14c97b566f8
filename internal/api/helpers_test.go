package api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lookout-dev/lookout/internal/apitest"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/outbox"
	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/tokens"
)

type fixture struct {
	t      *testing.T
	pool   *pgxpool.Pool
	api    *API
	srv    *httptest.Server
	store  *definitions.Store
	svc    *control.Service
	hub    *control.Hub
	tokens map[string]string // owner -> secret
	// client checks every /v1 exchange against docs/openapi.json
	// (apitest): a handler answering what the document does not say
	// fails the test.
	client *http.Client
}

func setup(t *testing.T) *fixture {
	t.Helper()
	pool := pgtest.Pool(t)
	logger := slog.New(slog.DiscardHandler)
	store := definitions.NewStore(pool, control.NewValidator(&config.Global{Sinks: map[string]*config.Sink{"log": {Type: "log"}}}))
	hub := control.NewHub(pool, logger)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	svc := control.New(pool, store, hub, control.Config{StreamPoll: time.Minute, Limits: control.Limits{Watches: 3, Sources: 2}, AllowPrivate: true}, logger)
	a := New(svc, logger)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(a.Shutdown)
	f := &fixture{t: t, pool: pool, api: a, srv: srv, store: store, svc: svc, hub: hub, tokens: map[string]string{}, client: apitest.Client(t)}
	for owner, scope := range map[string]string{"alice": "user", "bob": "user", "root": "admin"} {
		_, secret, err := tokens.Create(context.Background(), pool, tokens.NewToken{Owner: owner, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		f.tokens[owner] = secret
	}
	return f
}

// do sends a request with owner's token ("" for none) and decodes a JSON answer into out (if not nil).
func (f *fixture) do(method, path, owner string, body io.Reader, out any, headers ...string) *http.Response {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if owner != "" {
		req.Header.Set("Authorization", "Bearer "+f.tokens[owner])
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			f.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp
}

// problem sends a request that must fail with status and returns the problem.
func (f *fixture) problem(method, path, owner string, body io.Reader, status int, headers ...string) Problem {
	f.t.Helper()
	var p Problem
	resp := f.do(method, path, owner, body, &p, headers...)
	if resp.StatusCode != status {
		f.t.Fatalf("%s %s: status %d, want %d: %+v", method, path, resp.StatusCode, status, p)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		f.t.Errorf("%s %s: Content-Type %q, want application/problem+json", method, path, ct)
	}
	if p.Status != status || !strings.HasPrefix(p.Type, ProblemTypeBase) || p.Detail == "" || p.Instance == "" {
		f.t.Errorf("%s %s: incomplete problem %+v", method, path, p)
	}
	return p
}

// shared declares an rss source as the operator's files would (owner "").
func (f *fixture) shared(name string) {
	f.t.Helper()
	if _, err := f.pool.Exec(context.Background(), `INSERT INTO source_definitions (name, owner, managed_by, connector, definition, definition_hash, version)
		VALUES ($1, '', 'file:sources/' || $1 || '.yaml', 'rss',
		        jsonb_build_object('name', $1::text, 'connector', 'rss', 'every', '1h', 'rss', jsonb_build_object('url', 'https://example.com/feed.xml')), 'h', 1)`, name); err != nil {
		f.t.Fatal(err)
	}
}

// enqueue writes a notification of owner's source/watch and wakes the streams.
func (f *fixture) enqueue(owner, source, watch, title string) int64 {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	res, err := outbox.Enqueue(ctx, tx, []outbox.Notification{{DedupeKey: source + "/" + watch + "/" + title, Sink: "log", Source: source,
		RecordID: title, Watch: watch, Owner: owner, Title: title, Payload: []byte(`{"title":"` + title + `"}`)}})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := outbox.Wake(ctx, tx); err != nil {
		f.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		f.t.Fatal(err)
	}
	return res[0].ID
}

// event is one Server-Sent Event.
type event struct {
	ID, Event, Data string
}

// stream opens the notification stream as owner and returns its events.
func (f *fixture) stream(path, owner string, headers ...string) (<-chan event, func()) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+f.tokens[owner])
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := f.client.Do(req)
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		f.t.Fatalf("stream %s: %d %s", path, resp.StatusCode, b)
	}
	ch := make(chan event, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Data != "" && ev.Event != "keepalive" {
					ch <- ev
				}
				ev = event{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch, cancel
}
