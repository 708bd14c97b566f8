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
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lookout-dev/lookout/internal/audit"
	"github.com/lookout-dev/lookout/internal/config"
	"github.com/lookout-dev/lookout/internal/control"
)

// Prefix is where the admin page is served.
const Prefix = "/admin"

// SessionTTLDefault is how long a sign-in lasts.
const SessionTTLDefault = 12 * time.Hour

// CSP is the Content-Security-Policy of every answer: the page's own
// scripts, styles and images only, no inline code, no frames, forms that
// post to the page only.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

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
	pages  map[string]*template.Template
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
	mux.Handle("GET /admin/static/", http.StripPrefix("/admin/static/", staticFiles(http.FileServerFS(static))))
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
	return http.NewCrossOriginProtection().Handler(headers(gzipped(mux)))
}

// gzipped compresses the answers of a client that accepts gzip
// (Accept-Encoding), pages and static files alike, and says that the
// answer varies with it (Vary: Accept-Encoding, on every answer, so that
// no cache hands a compressed page to a client that cannot read it).
// Answers without a body (HEAD, 204, 304) and answers already encoded are
// passed through.
func gzipped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if r.Method == http.MethodHead || !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			next.ServeHTTP(w, r)
			return
		}
		gw := &gzipWriter{ResponseWriter: w}
		defer gw.close()
		next.ServeHTTP(gw, r)
	})
}

// acceptsGzip reads an Accept-Encoding header: gzip listed without q=0.
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

// gzipWriter compresses what is written to it once the status says there
// is a body.
type gzipWriter struct {
	http.ResponseWriter
	gz      *gzip.Writer
	decided bool
}

func (g *gzipWriter) WriteHeader(status int) {
	if !g.decided {
		g.decided = true
		h := g.Header()
		if status != http.StatusNoContent && status != http.StatusNotModified && status != http.StatusPartialContent && status >= 200 && h.Get("Content-Encoding") == "" {
			h.Del("Content-Length")
			h.Set("Content-Encoding", "gzip")
			g.gz = gzip.NewWriter(g.ResponseWriter)
		}
	}
	g.ResponseWriter.WriteHeader(status)
}

func (g *gzipWriter) Write(b []byte) (int, error) {
	if !g.decided {
		if g.Header().Get("Content-Type") == "" {
			g.Header().Set("Content-Type", http.DetectContentType(b))
		}
		g.WriteHeader(http.StatusOK)
	}
	if g.gz == nil {
		return g.ResponseWriter.Write(b)
	}
	return g.gz.Write(b)
}

func (g *gzipWriter) close() {
	if g.gz != nil {
		_ = g.gz.Close()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (g *gzipWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// headers sets the security headers of every answer.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

func staticFiles(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, status, msg := a.authenticate(r)
		if c == nil {
			if status == http.StatusUnauthorized && r.Method == http.MethodGet && r.Header.Get("Authorization") == "" {
				target := "/admin/login?next=" + url.QueryEscape(r.URL.RequestURI())
				if ck, err := r.Cookie(sessionCookie); err == nil && ck.Value != "" {
					// A session that ended says why on the sign-in form.
					target += "&error=" + url.QueryEscape(msg)
				}
				http.Redirect(w, r, target, http.StatusSeeOther)
				return
			}
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="lookout admin"`)
			}
			a.fail(w, r, status, msg)
			return
		}
		if r.Method == http.MethodPost && c.session {
			if err := r.ParseForm(); err != nil {
				a.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
				return
			}
			if got := r.PostFormValue("csrf"); got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(c.csrf)) != 1 {
				a.fail(w, r, http.StatusForbidden, "This action needs the page's CSRF token, and the request had none or a wrong one: reload the page and try again.")
				return
			}
		}
		h(w, r, c)
	})
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

func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

func randomString() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// loginForm shows the sign-in form with a fresh double-submit token.
func (a *Admin) loginForm(w http.ResponseWriter, r *http.Request) {
	a.showLogin(w, r, http.StatusOK, "")
}

func (a *Admin) showLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	v := randomString()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: v, Path: "/admin/login", HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	next := r.FormValue("next")
	a.render(w, r, status, "login", &page{Title: "Sign in", CSRF: v, Error: msg, Data: map[string]string{"Next": safeNext(next)}})
}

// safeNext keeps a redirect target on the admin page.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/admin/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/admin/"
	}
	return next
}

// login exchanges an admin token for a session cookie.
func (a *Admin) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		a.showLogin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue("csrf"))) != 1 {
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
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: Prefix, HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode, Expires: expires})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/admin/login", MaxAge: -1, HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode})
	a.logger.Info("admin signed in", "owner", tok.Owner, "token_id", tok.ID)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (a *Admin) logout(w http.ResponseWriter, r *http.Request, _ *caller) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true, Secure: secure(r),
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/admin/login", http.StatusSeeOther)
}

// ctxTimeout bounds the queries of one page.
const ctxTimeout = 10 * time.Second

func pageContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), ctxTimeout)
}
