// Package me is a user's page of the api deployment, served under /me:
// server-rendered HTML (html/template) over internal/control, for the
// person an assistant acts for — their watches (status, last
// notification, pause, resume, delete), their notifications with the full
// body, delivery state and why each fired (control.Explain), a form that
// previews a new watch over the source's stored history (control.DryRun)
// before saving it, and the channels their watches deliver to.
//
// Sign-in is with the user's token (any scope: the page acts as the
// token's owner, never as an admin) or with a sign-in link an assistant
// minted (control.MintSignInLink: minutes, once). Either becomes a signed
// session cookie of the page (tokens.PageMe: an admin page session is no
// session here, nor the reverse). The rules are the admin page's
// (internal/webui): the CSP allows the page's own files only, every
// state-changing request is a POST carrying the session's CSRF token, and
// cross-origin POSTs are refused. Every action goes through control's one
// function of it, audited with via 'me'.
package me

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/webui"
)

// Prefix is where the page is served.
const Prefix = "/me"

// SessionTTLDefault is how long a sign-in lasts.
const SessionTTLDefault = 12 * time.Hour

// Cookie names.
const (
	sessionCookie = "lookout_me"
	loginCookie   = "lookout_me_login"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config is the page's configuration.
type Config struct {
	// SessionTTL is how long a sign-in lasts (never past its token's
	// expiry). Defaults to 12h.
	SessionTTL time.Duration
}

// Page serves /me.
type Page struct {
	svc    *control.Service
	conf   Config
	logger *slog.Logger
	pages  webui.Templates
	now    func() time.Time
}

// New returns the page over the control service.
func New(svc *control.Service, conf Config, logger *slog.Logger) (*Page, error) {
	if conf.SessionTTL <= 0 {
		conf.SessionTTL = SessionTTLDefault
	}
	m := &Page{svc: svc, conf: conf, logger: logger.With("component", "me"), now: time.Now}
	if err := m.parseTemplates(); err != nil {
		return nil, err
	}
	return m, nil
}

// SetClock replaces the clock that sessions and sign-in links are checked
// by (tests).
func (m *Page) SetClock(now func() time.Time) { m.now = now }

// Handler serves /me and everything under it.
func (m *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /me/static/", http.StripPrefix("/me/static/", webui.StaticCache(http.FileServerFS(static))))
	mux.HandleFunc("GET /me", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/me/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /me/login", m.loginForm)
	mux.HandleFunc("POST /me/login", m.login)
	mux.HandleFunc("GET /me/link", m.linkForm)
	mux.HandleFunc("POST /me/link", m.link)
	mux.Handle("POST /me/logout", m.authed(m.logout))

	mux.Handle("GET /me/{$}", m.authed(m.watches))
	mux.Handle("POST /me/watches/{action}", m.authed(m.watchAction))
	mux.Handle("GET /me/notifications", m.authed(m.notifications))
	mux.Handle("GET /me/notifications/{id}", m.authed(m.notification))
	mux.Handle("GET /me/new", m.authed(m.newForm))
	mux.Handle("POST /me/new", m.authed(m.create))
	mux.Handle("GET /me/channels", m.authed(m.channels))
	mux.Handle("GET /me/", m.authed(func(w http.ResponseWriter, r *http.Request, _ *caller) {
		m.fail(w, r, http.StatusNotFound, "There is no page at "+r.URL.Path+".")
	}))
	return webui.Protect(mux)
}

// caller is who makes an authenticated request: always an owner.
type caller struct {
	p control.Principal
	// csrf is the session's CSRF token ("" for a bearer request).
	csrf    string
	session bool
}

type authedHandler func(w http.ResponseWriter, r *http.Request, c *caller)

// authed authenticates a request (bearer header or the page's session
// cookie, as the token's owner) and checks the CSRF token of a POST made
// with a session.
func (m *Page) authed(h authedHandler) http.Handler {
	return webui.Guard[*caller]{
		Login:  "/me/login",
		Cookie: sessionCookie,
		Realm:  "lookout",
		Authenticate: func(r *http.Request) (*caller, string, bool, int, string) {
			c, status, msg := m.authenticate(r)
			if c == nil {
				return nil, "", false, status, msg
			}
			return c, c.csrf, c.session, 0, ""
		},
		Fail: m.fail,
	}.Wrap(h)
}

// authenticate returns the caller, or the status and message of a refusal.
func (m *Page) authenticate(r *http.Request) (*caller, int, string) {
	rid := webui.RequestID()
	creds := control.Credentials{Header: r.Header.Get("Authorization"), Page: control.PageMe, AsOwner: true, Via: audit.ViaMe,
		RequestID: rid, Now: m.now()}
	if creds.Header == "" {
		ck, err := r.Cookie(sessionCookie)
		if err != nil || ck.Value == "" {
			return nil, http.StatusUnauthorized, "Sign in with your token, or with a sign-in link your assistant gives you."
		}
		creds.Session = ck.Value
	}
	auth, err := m.svc.Authorize(r.Context(), creds)
	if err != nil {
		st, msg := m.refusal(err, rid)
		return nil, st, msg
	}
	if auth.Session != nil {
		return &caller{p: auth.Principal, csrf: auth.Session.Bind("csrf"), session: true}, 0, ""
	}
	return &caller{p: auth.Principal}, 0, ""
}

// refusal is the status and message of a refusal of control.Authorize.
func (m *Page) refusal(err error, rid string) (int, string) {
	var refused *control.AuthError
	switch {
	case errors.As(err, &refused) && refused.Forbidden:
		return http.StatusForbidden, refused.Error()
	case errors.As(err, &refused):
		return http.StatusUnauthorized, refused.Error()
	}
	m.logger.Error("authenticate", "error", err, "request_id", rid)
	return http.StatusServiceUnavailable, control.AuthUnavailable
}

func (m *Page) loginForm(w http.ResponseWriter, r *http.Request) {
	m.showLogin(w, r, http.StatusOK, "")
}

func (m *Page) showLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	v := webui.NewFormNonce(w, r, loginCookie, Prefix)
	m.render(w, r, status, "login", &page{Title: "Sign in", CSRF: v, Error: msg, Data: map[string]string{"Next": webui.SafeNext(r.FormValue("next"), "/me/")}})
}

// login exchanges the user's token for a session cookie.
func (m *Page) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		m.showLogin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if !webui.CheckFormNonce(r, loginCookie) {
		m.showLogin(w, r, http.StatusForbidden, "The sign-in form expired or did not come from this page (CSRF check failed): try again.")
		return
	}
	auth, err := m.svc.Authorize(r.Context(), control.Credentials{Secret: r.PostFormValue("token"), AsOwner: true, Via: audit.ViaMe})
	if err != nil {
		status, msg := m.refusal(err, webui.RequestID())
		m.showLogin(w, r, status, msg)
		return
	}
	m.startSession(w, r, auth, webui.SafeNext(r.PostFormValue("next"), "/me/"))
}

// linkForm shows the button that uses a sign-in link. Opening the link
// uses nothing: a chat app that fetches it for a preview does not spend
// it.
func (m *Page) linkForm(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	if code == "" {
		m.showLogin(w, r, http.StatusBadRequest, "This sign-in link has no code: open the whole link your assistant gave you.")
		return
	}
	v := webui.NewFormNonce(w, r, loginCookie, Prefix)
	m.render(w, r, http.StatusOK, "link", &page{Title: "Sign in with a link", CSRF: v, Data: map[string]string{"Code": code}})
}

// link uses a sign-in link (once) and starts a session of its owner.
func (m *Page) link(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		m.showLogin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if !webui.CheckFormNonce(r, loginCookie) {
		m.showLogin(w, r, http.StatusForbidden, "The sign-in form expired or did not come from this page (CSRF check failed): open the link again.")
		return
	}
	auth, err := m.svc.RedeemSignInLink(r.Context(), r.PostFormValue("code"), m.now(), webui.RequestID())
	if err != nil {
		status, msg := m.refusal(err, webui.RequestID())
		m.showLogin(w, r, status, msg)
		return
	}
	m.startSession(w, r, auth, "/me/")
}

func (m *Page) startSession(w http.ResponseWriter, r *http.Request, auth *control.Auth, next string) {
	tok := auth.Token
	expires := m.now().Add(m.conf.SessionTTL)
	if tok.ExpiresAt != nil && tok.ExpiresAt.Before(expires) {
		expires = *tok.ExpiresAt
	}
	value, err := m.svc.NewPageSession(r.Context(), control.PageMe, tok, expires)
	if err != nil {
		m.logger.Error("new session", "error", err)
		m.showLogin(w, r, http.StatusServiceUnavailable, "The session could not be made (database unavailable); retry shortly.")
		return
	}
	webui.SetCookie(w, r, sessionCookie, Prefix, value, expires)
	webui.ClearCookie(w, r, loginCookie, Prefix)
	m.logger.Info("user signed in", "owner", tok.Owner, "token_id", tok.ID)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (m *Page) logout(w http.ResponseWriter, r *http.Request, _ *caller) {
	webui.ClearCookie(w, r, sessionCookie, Prefix)
	http.Redirect(w, r, "/me/login", http.StatusSeeOther)
}

// ctxTimeout bounds the work of one page.
const ctxTimeout = 30 * time.Second

func pageContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), ctxTimeout)
}
