// Package api is the HTTP side of the api deployment: JSON under /v1 with
// huma v2 on net/http, its OpenAPI 3.1 document generated from the
// handlers' Go types (served at /openapi.json, checked in as
// docs/openapi.json), bearer tokens (internal/tokens), RFC 9457
// problem+json errors that name the field, and a Server-Sent Events
// stream of notifications. Handlers are thin: the logic and the owner
// scoping are internal/control's, which the MCP tools share.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/control"
)

// Version is the API's version in the OpenAPI document.
const Version = "1.0.0"

// maxBody bounds a request body (1 MiB); a larger one is a 413 problem.
const maxBody = 1 << 20

// PoolConns is the size of the connection pool the api daemon opens: a
// request holds a connection for its transaction, and pgx's default (the
// larger of 4 and the CPUs) queued concurrent creates behind 4
// connections (measurement (7) of docs/benchmarks.md).
const PoolConns = 16

// API serves the HTTP API.
type API struct {
	huma   huma.API
	mux    *http.ServeMux
	svc    *control.Service
	logger *slog.Logger

	closing   chan struct{}
	closeOnce sync.Once
}

// New builds the API over the control service.
func New(svc *control.Service, logger *slog.Logger) *API {
	a := &API{mux: http.NewServeMux(), svc: svc, logger: logger.With("component", "api"), closing: make(chan struct{})}
	cfg := huma.DefaultConfig("lookout API", Version)
	// No $schema links in bodies, no docs UI (it loads scripts from the
	// internet): the document is at /openapi.json.
	cfg.CreateHooks = nil
	cfg.DocsPath = ""
	cfg.OpenAPI.Info.Description = "Watches, sources and notifications of lookout, for assistants and their users. " +
		"Authenticate with `Authorization: Bearer <token>` (`api token create --owner NAME`). " +
		"Errors are RFC 9457 problem+json; each entry of `errors` names the field (JSON pointer), parameter or header and what to change. See docs/api.md."
	cfg.OpenAPI.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer":       {Type: "http", Scheme: "bearer", Description: "A token from `api token create --owner NAME`; it starts with lk_."},
		"taskRunToken": {Type: "http", Scheme: "bearer", Description: "The report token of one task run's attempt: report.token of the task a webhook executor received (docs/tasks.md)."},
	}
	cfg.OpenAPI.OnAddOperation = append(cfg.OpenAPI.OnAddOperation, func(oapi *huma.OpenAPI, op *huma.Operation) {
		registries.Store(op, oapi.Components.Schemas)
		declareProblems(op)
	})
	a.huma = humago.New(a.mux, cfg)
	a.huma.UseMiddleware(a.requestID, a.authenticate)
	a.routes()
	return a
}

// Handler serves the API: /v1/..., /openapi.json and /openapi.yaml.
func (a *API) Handler() http.Handler { return a.mux }

// Shutdown ends the notification streams, so that the server's graceful
// shutdown is not held up by them. It is idempotent.
func (a *API) Shutdown() { a.closeOnce.Do(func() { close(a.closing) }) }

// OpenAPI returns the OpenAPI 3.1 document as indented JSON.
func (a *API) OpenAPI() ([]byte, error) {
	b, err := json.MarshalIndent(a.huma.OpenAPI(), "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

var bearer = []map[string][]string{{"bearer": {}}}

type ctxKey int

const (
	principalKey ctxKey = iota
	requestIDKey
)

// principal is the caller of an authenticated operation.
func principal(ctx context.Context) control.Principal {
	p, _ := ctx.Value(principalKey).(control.Principal)
	return p
}

func (a *API) requestID(ctx huma.Context, next func(huma.Context)) {
	id := ctx.Header("X-Request-Id")
	if id == "" || len(id) > 64 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	ctx.SetHeader("X-Request-Id", id)
	next(huma.WithValue(ctx, requestIDKey, id))
}

// authenticate checks the bearer token of operations that declare the
// bearer security scheme, and refuses user tokens on admin operations.
func (a *API) authenticate(ctx huma.Context, next func(huma.Context)) {
	op := ctx.Operation()
	if !slices.ContainsFunc(op.Security, func(s map[string][]string) bool { _, ok := s["bearer"]; return ok }) {
		next(ctx) // public, or authenticated otherwise (a task run's report token)
		return
	}
	rid, _ := ctx.Context().Value(requestIDKey).(string)
	admin, _ := op.Metadata["admin"].(bool)
	auth, err := a.svc.Authorize(ctx.Context(), control.Credentials{Header: ctx.Header("Authorization"), Admin: admin, Via: audit.ViaAPI, RequestID: rid})
	if err != nil {
		var p *Problem
		var refused *control.AuthError
		switch {
		case errors.As(err, &refused) && refused.Forbidden:
			p = newProblem(http.StatusForbidden, ProblemForbidden, refused.Error())
		case errors.As(err, &refused):
			p = newProblem(http.StatusUnauthorized, ProblemUnauthorized, refused.Error())
			p.Errors = []ProblemError{{Header: "Authorization", Detail: p.Detail}}
			ctx.SetHeader("WWW-Authenticate", `Bearer realm="lookout"`)
		default:
			a.logger.Error("authenticate", "error", err, "request_id", rid)
			p = newProblem(http.StatusServiceUnavailable, ProblemInternal, control.AuthUnavailable)
			p.Errors = []ProblemError{{Header: "Authorization", Detail: p.Detail}}
			ctx.SetHeader("WWW-Authenticate", `Bearer realm="lookout"`)
		}
		p.Instance = rid
		_ = huma.WriteErr(a.huma, ctx, p.Status, p.Detail, p)
		return
	}
	next(huma.WithValue(ctx, principalKey, auth.Principal))
}

// fail turns a control error into the problem the handler returns; any
// other error is logged and answered with a 500 that names the request.
func (a *API) fail(ctx context.Context, err error) error {
	rid, _ := ctx.Value(requestIDKey).(string)
	if p := problemFrom(err); p != nil {
		p.Instance = rid
		return p
	}
	if ctx.Err() != nil {
		return err
	}
	a.logger.Error("request failed", "error", err, "request_id", rid)
	p := newProblem(http.StatusInternalServerError, ProblemInternal, "an internal error occurred; it was logged with this request id (instance)")
	p.Instance = rid
	return p
}

// Document returns the OpenAPI document of an API over no database: the
// document depends on the handlers' types only (docs/openapi.json).
func Document() ([]byte, error) {
	return New(control.New(nil, nil, nil, control.Config{}, slog.New(slog.DiscardHandler)), slog.New(slog.DiscardHandler)).OpenAPI()
}
