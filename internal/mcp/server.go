// Package mcp is the MCP side of the api deployment: lookout's tools for
// an assistant (describe_source, dry_run, create_watch, list_watches,
// get_watch, update_watch, delete_watch, pause_watch, resume_watch,
// run_now, explain, recent_notifications) served with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) over streamable HTTP at /mcp,
// behind the HTTP API's bearer tokens, and over stdio for a local
// assistant (`api mcp --stdio`). Tools are thin: each calls
// internal/control, the service layer the HTTP handlers share, with the
// caller's Principal, and turns its typed errors into tool errors a model
// can act on. A resource per owner (lookout://notifications/{owner})
// carries the owner's newest notifications; a subscription to it is
// notified (notifications/resources/updated) as new ones are created,
// driven by the control layer's notification stream (one LISTEN per
// process). docs/mcp.md documents every tool.
package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/control"
)

// Version is the server's version in the MCP initialize answer.
const Version = "1.0.0"

// maxBody bounds a request body on /mcp (1 MiB), as on /v1.
const maxBody = 1 << 20

// instructions is what the server tells a client about itself at initialize.
const instructions = `lookout keeps an eye on sources (HTTP JSON APIs, RSS feeds, GitHub repositories, mailboxes, local files) for you and notifies when a watch matches a change.
To keep an eye on something for the user: call describe_source to learn the fields of a source's records, check with dry_run what a watch would have matched, then create_watch with a "when" expression that names them (list_watches, update_watch, pause_watch, resume_watch and delete_watch manage the watches; run_now fetches a source now; explain says why a change was or was not notified).
Read what your watches found with recent_notifications (newest first; pass after_id = the largest id you have seen to get only new ones), or subscribe to the resource lookout://notifications/{owner} (your owner is the feed field of recent_notifications) to be told when new ones arrive.
When the user wants to see or manage their watches themselves, give them the link me_link mints: their own page, once, within minutes.
A tool that fails answers with isError and a text whose lines name the argument (a JSON pointer such as /when) and what to change: correct that argument and call again.`

// Config configures a Server.
type Config struct {
	// Token, when set, authenticates every call with this bearer token:
	// the stdio server of one local assistant. When empty each call
	// carries its own token (streamable HTTP, Handler).
	Token string
	// SessionTimeout closes an HTTP session idle this long. Defaults to 30m.
	SessionTimeout time.Duration
}

// Server is lookout's MCP server over one control service.
type Server struct {
	svc    *control.Service
	srv    *mcpsdk.Server
	conf   Config
	logger *slog.Logger
	feeds  *feeds
}

// New builds the server and registers its tools and resources.
func New(svc *control.Service, conf Config, logger *slog.Logger) *Server {
	if conf.SessionTimeout <= 0 {
		conf.SessionTimeout = 30 * time.Minute
	}
	s := &Server{svc: svc, conf: conf, logger: logger.With("component", "mcp")}
	s.feeds = newFeeds(s)
	s.srv = mcpsdk.NewServer(&mcpsdk.Implementation{Name: "lookout", Title: "lookout", Version: Version}, &mcpsdk.ServerOptions{
		Instructions: instructions,
		// The SDK logs every session at INFO; keep its warnings and errors.
		Logger:             slog.New(atLeast{s.logger.Handler(), slog.LevelWarn}),
		SubscribeHandler:   s.feeds.subscribe,
		UnsubscribeHandler: s.feeds.unsubscribe,
		Capabilities:       &mcpsdk.ServerCapabilities{},
	})
	s.srv.AddReceivingMiddleware(s.authorize)
	s.addTools()
	s.addWatchTools()
	s.addExportTools()
	s.addAccountTools()
	s.addResources()
	return s
}

// SDK returns the SDK server (for tests and in-memory transports).
func (s *Server) SDK() *mcpsdk.Server { return s.srv }

// Handler serves streamable HTTP (mount it at /mcp). Every request must
// carry `Authorization: Bearer <token>` (a token of `api token create`):
// a missing, unknown, revoked or expired token is a 401 whose text says
// which. A session is bound to the token that opened it.
func (s *Server) Handler() http.Handler {
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return s.srv }, &mcpsdk.StreamableHTTPOptions{
		Logger:              slog.New(atLeast{s.logger.Handler(), slog.LevelWarn}),
		SessionTimeout:      s.conf.SessionTimeout,
		MaxRequestBodyBytes: maxBody,
	})
	protect := auth.RequireBearerToken(s.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK's middleware answers a missing header with its own
		// words; say what lookout's tokens are instead.
		if _, err := control.BearerSecret(r.Header.Get("Authorization")); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lookout"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		protect.ServeHTTP(challenge{w}, r)
	})
}

// challenge adds lookout's Bearer challenge (RFC 6750) to a 401 that has
// none: the SDK's middleware sets WWW-Authenticate only with OAuth
// resource metadata, which lookout's tokens do not use.
type challenge struct{ http.ResponseWriter }

func (c challenge) WriteHeader(code int) {
	if code == http.StatusUnauthorized && c.Header().Get("WWW-Authenticate") == "" {
		c.Header().Set("WWW-Authenticate", `Bearer realm="lookout", error="invalid_token"`)
	}
	c.ResponseWriter.WriteHeader(code)
}

// Flush sends what was written (the SDK's event streams assert
// http.Flusher).
func (c challenge) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection (flushes of
// the event streams, deadlines).
func (c challenge) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// tokenError is a token refused by control.Authorize: it is the SDK's
// ErrInvalidToken (a 401) with lookout's message.
type tokenError struct{ err error }

func (e tokenError) Error() string        { return e.err.Error() }
func (e tokenError) Is(target error) bool { return target == auth.ErrInvalidToken }

// verify is the SDK's TokenVerifier over control.Authorize.
func (s *Server) verify(ctx context.Context, secret string, _ *http.Request) (*auth.TokenInfo, error) {
	a, err := s.svc.Authorize(ctx, control.Credentials{Secret: secret, Via: audit.ViaMCP})
	if err != nil {
		var refused *control.AuthError
		if errors.As(err, &refused) {
			return nil, tokenError{refused}
		}
		s.logger.Error("authenticate", "error", err)
		return nil, errors.New(control.AuthUnavailable)
	}
	info := &auth.TokenInfo{
		Scopes: []string{a.Token.Scope},
		// A session is bound to the token that opened it.
		UserID: "token:" + strconv.FormatInt(a.Token.ID, 10),
		Extra:  map[string]any{principalExtra: a.Principal},
	}
	if a.Token.ExpiresAt != nil {
		info.Expiration = *a.Token.ExpiresAt
	}
	return info, nil
}

const principalExtra = "lookout.principal"

// Run serves one local assistant over t (stdio) until it disconnects or
// ctx ends. The configured Token is checked first, so that a wrong one
// fails at once with the reason, and again on every call (a revoked
// token stops working at its next call).
func (s *Server) Run(ctx context.Context, t mcpsdk.Transport) error {
	if s.conf.Token == "" {
		return errors.New("mcp: a local server needs a token (--token or LOOKOUT_TOKEN; an operator creates one with `api token create --owner NAME`)")
	}
	if _, err := s.local(ctx); err != nil {
		return err
	}
	return s.srv.Run(ctx, t)
}

// local authenticates the configured token.
func (s *Server) local(ctx context.Context) (control.Principal, error) {
	a, err := s.svc.Authorize(ctx, control.Credentials{Secret: s.conf.Token, Via: audit.ViaMCP})
	if err != nil {
		return control.Principal{}, fmt.Errorf("authenticate the token: %w", err)
	}
	return a.Principal, nil
}

// Close ends the notification feeds and every open session, so that a
// server's graceful shutdown is not held up by them. It is idempotent.
func (s *Server) Close() {
	s.feeds.close()
	for ss := range s.srv.Sessions() {
		_ = ss.Close()
	}
}

type ctxKey int

const principalKey ctxKey = 0

// principalFrom returns the caller of a request authorized by authorize.
func principalFrom(ctx context.Context) (control.Principal, bool) {
	p, ok := ctx.Value(principalKey).(control.Principal)
	return p, ok
}

// scoped lists the methods that act for an owner: authorize resolves
// their caller before they run.
var scoped = map[string]bool{
	"tools/call":            true,
	"resources/read":        true,
	"resources/subscribe":   true,
	"resources/unsubscribe": true,
	"subscriptions/listen":  true,
}

// authorize puts the caller (Principal) of every scoped request in its
// context: from the bearer token of the HTTP request, or from the local
// token (stdio), checked again so that revocation takes effect at once.
// Each request gets its own id for the logs and the audit log.
func (s *Server) authorize(next mcpsdk.MethodHandler) mcpsdk.MethodHandler {
	return func(ctx context.Context, method string, req mcpsdk.Request) (mcpsdk.Result, error) {
		if !scoped[method] {
			return next(ctx, method, req)
		}
		var p control.Principal
		if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil {
			var ok bool
			if p, ok = ex.TokenInfo.Extra[principalExtra].(control.Principal); !ok {
				return nil, errors.New("the request's token carries no owner")
			}
		} else if s.conf.Token != "" {
			var err error
			if p, err = s.local(ctx); err != nil {
				return nil, err
			}
		} else {
			return nil, errors.New("unauthenticated: send Authorization: Bearer <token>")
		}
		p.RequestID = requestID()
		return next(context.WithValue(ctx, principalKey, p), method, req)
	}
}

func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// feeds drives the subscriptions to the owners' notification feeds: one
// control stream per subscribed feed, shared by its sessions, whose every
// notification becomes notifications/resources/updated for that feed.
type feeds struct {
	s      *Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	byURI    map[string]*feed
	sessions map[*mcpsdk.ServerSession]bool // watched for their end
	closed   bool
}

type feed struct {
	cancel   context.CancelFunc
	sessions map[*mcpsdk.ServerSession]bool
}

func newFeeds(s *Server) *feeds {
	ctx, cancel := context.WithCancel(context.Background())
	return &feeds{s: s, ctx: ctx, cancel: cancel, byURI: map[string]*feed{}, sessions: map[*mcpsdk.ServerSession]bool{}}
}

func (f *feeds) subscribe(ctx context.Context, req *mcpsdk.SubscribeRequest) error {
	p, ok := principalFrom(ctx)
	if !ok {
		return errors.New("unauthenticated")
	}
	uri := req.Params.URI
	view, err := feedViewer(p, uri)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("the server is shutting down")
	}
	fd := f.byURI[uri]
	if fd == nil {
		ctx, cancel := context.WithCancel(f.ctx)
		fd = &feed{cancel: cancel, sessions: map[*mcpsdk.ServerSession]bool{}}
		f.byURI[uri] = fd
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.run(ctx, uri, view)
		}()
	}
	fd.sessions[req.Session] = true
	if !f.sessions[req.Session] {
		f.sessions[req.Session] = true
		ss := req.Session
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			ended := make(chan struct{})
			go func() { _ = ss.Wait(); close(ended) }()
			select {
			case <-ended:
				f.drop(ss, "")
			case <-f.ctx.Done():
			}
		}()
	}
	return nil
}

func (f *feeds) unsubscribe(_ context.Context, req *mcpsdk.UnsubscribeRequest) error {
	f.drop(req.Session, req.Params.URI)
	return nil
}

// drop ends ss's subscription to uri ("" for all of them) and stops the
// feeds nobody listens to any more.
func (f *feeds) drop(ss *mcpsdk.ServerSession, uri string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for u, fd := range f.byURI {
		if uri != "" && u != uri {
			continue
		}
		delete(fd.sessions, ss)
		if len(fd.sessions) == 0 {
			fd.cancel()
			delete(f.byURI, u)
		}
	}
	if uri == "" {
		delete(f.sessions, ss)
	}
}

// run sends notifications/resources/updated for uri after each new
// notification of view's feed, until ctx ends; a failed stream is
// restarted after a backoff from the last notification it saw.
func (f *feeds) run(ctx context.Context, uri string, view control.Principal) {
	var after int64
	failures := 0
	for ctx.Err() == nil {
		err := f.s.svc.Stream(ctx, view, control.StreamQuery{After: after}, func(n control.Notification) error {
			after = max(after, n.ID)
			failures = 0
			return f.s.srv.ResourceUpdated(ctx, &mcpsdk.ResourceUpdatedNotificationParams{URI: uri})
		}, nil)
		if err == nil || ctx.Err() != nil {
			return
		}
		failures++
		f.s.logger.Warn("notification feed failed; retrying", "uri", uri, "error", err, "failures", failures)
		if !sleep(ctx, failures) {
			return
		}
	}
}

func (f *feeds) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// atLeast passes on the records of level or above.
type atLeast struct {
	slog.Handler
	level slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.level}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.level}
}
