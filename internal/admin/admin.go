// Package admin is the admin page of the api deployment, served under
// /admin: server-rendered HTML (html/template) and embedded static files,
// for the person on call who wants to see at a glance what is late,
// failing or expensive and click through to why.
//
// Every page is a view over the report_* views a SQL user queries (and a
// few named queries over the tables' indexes, queries.go): it shows the
// SQL it ran, one click away, so that the page and psql never disagree.
// Actions (pause, resume, run now, retry dead notifications) go through
// internal/control, audited with via 'admin'.
//
// Access needs an admin token: sent as a bearer header, or exchanged on
// the sign-in form for a session cookie (HttpOnly, SameSite=Strict,
// Secure over TLS) that holds a signed session (tokens.NewSession); user
// tokens are refused. Every state-changing request is a POST that carries
// the session's CSRF token (a bearer request needs none: a browser never
// sends the header by itself), and cross-origin POSTs are refused
// (http.CrossOriginProtection). The Content-Security-Policy allows the
// page's own files only: no inline script or style anywhere.
package admin

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/webui"
)

// Prefix is where the admin page is served.
const Prefix = "/admin"

// SessionTTLDefault is how long a sign-in lasts.
const SessionTTLDefault = 12 * time.Hour

// CSP is the Content-Security-Policy of every answer (webui.CSP, shared
// with the user's page).
const CSP = webui.CSP

// Cookie names.
const (
	sessionCookie = "lookout_admin"
	loginCookie   = "lookout_admin_login"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config is the admin page's configuration.
type Config struct {
	// SessionTTL is how long a sign-in lasts. Defaults to 12h.
	SessionTTL time.Duration
	// Config names the configured watches (their when and ask) in the
	// decision trails of the record page; nil shows the recorded
	// decisions only.
	Config *config.Config
	// ListPage is how many rows a list of rows shows a page (the rows
	// behind a number, the report pages, the dead letters), at most 200.
	// Defaults to 200.
	ListPage int
}

// Admin serves the admin page.
type Admin struct {
	svc    *control.Service
	conf   Config
	logger *slog.Logger
	pages  webui.Templates
	now    func() time.Time
}

// New returns the admin page over the control service's database.
func New(svc *control.Service, conf Config, logger *slog.Logger) (*Admin, error) {
	if conf.SessionTTL <= 0 {
		conf.SessionTTL = SessionTTLDefault
	}
	if conf.ListPage <= 0 || conf.ListPage > 200 {
		conf.ListPage = 200
	}
	a := &Admin{svc: svc, conf: conf, logger: logger.With("component", "admin"), now: time.Now}
	if err := a.parseTemplates(); err != nil {
		return nil, err
	}
	return a, nil
}

// Handler serves /admin and everything under it.
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /admin/static/", http.StripPrefix("/admin/static/", webui.StaticCache(http.FileServerFS(static))))
	mux.HandleFunc("GET /admin", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/admin/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /admin/login", a.loginForm)
	mux.HandleFunc("POST /admin/login", a.login)
	mux.Handle("POST /admin/logout", a.authed(a.logout))

	mux.Handle("GET /admin/{$}", a.authed(a.overview))
	mux.Handle("GET /admin/sources", a.authed(a.sources))
	mux.Handle("GET /admin/sources/{name}", a.authed(a.source))
	mux.Handle("POST /admin/sources/{name}/{action}", a.authed(a.sourceAction))
	mux.Handle("GET /admin/record", a.authed(a.record))
	mux.Handle("GET /admin/rows/{what}", a.authed(a.rows))
	mux.Handle("GET /admin/rows/drift", a.authed(a.driftRows))
	mux.Handle("GET /admin/stuck", a.authed(a.reportPage("stuck")))
	mux.Handle("GET /admin/failures", a.authed(a.reportPage("failures")))
	mux.Handle("GET /admin/retry", a.authed(a.reportPage("retry")))
	mux.Handle("GET /admin/disabled", a.authed(a.reportPage("disabled")))
	mux.Handle("GET /admin/dead", a.authed(a.dead))
	mux.Handle("POST /admin/dead/retry", a.authed(a.retryDead))
	mux.Handle("GET /admin/models", a.authed(a.models))
	mux.Handle("GET /admin/model-drift", a.authed(a.modelDrift))
	mux.Handle("GET /admin/tasks", a.authed(a.reportPage("tasks")))
	mux.Handle("GET /admin/search", a.authed(a.search))
	mux.Handle("GET /admin/", a.authed(func(w http.ResponseWriter, r *http.Request, _ *caller) {
		a.fail(w, r, http.StatusNotFound, "There is no admin page at "+r.URL.Path+".")
	}))
	return webui.Protect(mux)
}

// caller is who makes an authenticated request.
type caller struct {
	p control.Principal
	// csrf is the session's CSRF token ("" for a bearer request).
	csrf    string
	session bool
}

type authedHandler func(w http.ResponseWriter, r *http.Request, c *caller)

// authed authenticates a request (bearer header or session cookie, admin
// scope only) and checks the CSRF token of a POST made with a session.
func (a *Admin) authed(h authedHandler) http.Handler {
	return webui.Guard[*caller]{
		Login:  "/admin/login",
		Cookie: sessionCookie,
		Realm:  "lookout admin",
		Authenticate: func(r *http.Request) (*caller, string, bool, int, string) {
			c, status, msg := a.authenticate(r)
			if c == nil {
				return nil, "", false, status, msg
			}
			return c, c.csrf, c.session, 0, ""
		},
		Fail: a.fail,
	}.Wrap(h)
}

// authenticate returns the caller, or the status and message of a refusal.
func (a *Admin) authenticate(r *http.Request) (*caller, int, string) {
	rid := requestID()
	creds := control.Credentials{Header: r.Header.Get("Authorization"), Admin: true, Via: audit.ViaAdmin, RequestID: rid, Now: a.now()}
	if creds.Header == "" {
		ck, err := r.Cookie(sessionCookie)
		if err != nil || ck.Value == "" {
			return nil, http.StatusUnauthorized, "Sign in with an admin token."
		}
		creds.Session = ck.Value
	}
	auth, err := a.svc.Authorize(r.Context(), creds)
	if err != nil {
		st, msg := a.refusal(err, rid)
		return nil, st, msg
	}
	if auth.Session != nil {
		return &caller{p: auth.Principal, csrf: auth.Session.Bind("csrf"), session: true}, 0, ""
	}
	return &caller{p: auth.Principal}, 0, ""
}

// refusal is the status and message of a refusal of control.Authorize.
func (a *Admin) refusal(err error, rid string) (int, string) {
	var refused *control.AuthError
	switch {
	case errors.As(err, &refused) && refused.Forbidden:
		return http.StatusForbidden, refused.Error()
	case errors.As(err, &refused):
		return http.StatusUnauthorized, refused.Error()
	}
	a.logger.Error("authenticate", "error", err, "request_id", rid)
	return http.StatusServiceUnavailable, control.AuthUnavailable
}

// requestID names a request in the log (webui.RequestID).
func requestID() string { return webui.RequestID() }

// loginForm shows the sign-in form with a fresh double-submit token.
func (a *Admin) loginForm(w http.ResponseWriter, r *http.Request) {
	a.showLogin(w, r, http.StatusOK, "")
}

func (a *Admin) showLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	v := webui.NewFormNonce(w, r, loginCookie, "/admin/login")
	next := r.FormValue("next")
	a.render(w, r, status, "login", &page{Title: "Sign in", CSRF: v, Error: msg, Data: map[string]string{"Next": safeNext(next)}})
}

// safeNext keeps a redirect target on the admin page.
func safeNext(next string) string { return webui.SafeNext(next, "/admin/") }

// login exchanges an admin token for a session cookie.
func (a *Admin) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		a.showLogin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if !webui.CheckFormNonce(r, loginCookie) {
		a.showLogin(w, r, http.StatusForbidden, "The sign-in form expired or did not come from this page (CSRF check failed): try again.")
		return
	}
	ctx := r.Context()
	auth, err := a.svc.Authorize(ctx, control.Credentials{Secret: r.PostFormValue("token"), Admin: true, Via: audit.ViaAdmin})
	if err != nil {
		status, msg := a.refusal(err, requestID())
		a.showLogin(w, r, status, msg)
		return
	}
	tok := auth.Token
	expires := a.now().Add(a.conf.SessionTTL)
	if tok.ExpiresAt != nil && tok.ExpiresAt.Before(expires) {
		expires = *tok.ExpiresAt
	}
	value, err := a.svc.NewSession(ctx, tok, expires)
	if err != nil {
		a.logger.Error("new session", "error", err)
		a.showLogin(w, r, http.StatusServiceUnavailable, "The session could not be made (database unavailable); retry shortly.")
		return
	}
	webui.SetCookie(w, r, sessionCookie, Prefix, value, expires)
	webui.ClearCookie(w, r, loginCookie, "/admin/login")
	a.logger.Info("admin signed in", "owner", tok.Owner, "token_id", tok.ID)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (a *Admin) logout(w http.ResponseWriter, r *http.Request, _ *caller) {
	webui.ClearCookie(w, r, sessionCookie, Prefix)
	http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
}

// ctxTimeout bounds the queries of one page.
const ctxTimeout = 10 * time.Second

func pageContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), ctxTimeout)
}
