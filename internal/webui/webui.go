// Package webui holds what the api deployment's server-rendered pages (the
// admin page under /admin, a user's page under /me) share, so that both
// keep one set of rules: the security headers and the Content-Security-
// Policy (the page's own files only, no inline script or style), the
// session cookie (HttpOnly, SameSite=Strict, Secure over TLS), the CSRF
// check of a POST made with a session, the double-submit token of a
// sign-in form, the request ids of logged errors, the parsing and
// rendering of the pages' templates with their layout (Templates), and
// the guard that lets a request in (Guard).
//
// It holds no session logic of its own: a session's value and its CSRF
// token come from control (Authorize, tokens' signed sessions).
package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// CSP is the Content-Security-Policy of every answer: the page's own
// scripts, styles and images only, no inline code, no frames, forms that
// post to the page only.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; " +
	"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Headers sets the security headers of every answer of next.
func Headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// Protect is next behind the security headers, gzip for the clients that
// accept it (Gzipped) and the refusal of cross-origin POSTs
// (http.CrossOriginProtection).
func Protect(next http.Handler) http.Handler {
	return http.NewCrossOriginProtection().Handler(Headers(Gzipped(next)))
}

// StaticCache lets browsers keep the embedded static files for an hour.
func StaticCache(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		next.ServeHTTP(w, r)
	})
}

// RequestID returns a random id naming a request in the log and on the
// error page that asks the reader to quote it.
func RequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// RandomString returns 24 random bytes, base64url: a form's double-submit
// token.
func RandomString() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Secure reports whether r came over TLS (itself or behind a proxy that
// says so): cookies are then marked Secure.
func Secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// SetCookie sets an HttpOnly, SameSite=Strict cookie on path, Secure over
// TLS, that expires at expires.
func SetCookie(w http.ResponseWriter, r *http.Request, name, path, value string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: path, HttpOnly: true, Secure: Secure(r),
		SameSite: http.SameSiteStrictMode, Expires: expires})
}

// ClearCookie removes the cookie name of path.
func ClearCookie(w http.ResponseWriter, r *http.Request, name, path string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: path, MaxAge: -1, HttpOnly: true, Secure: Secure(r),
		SameSite: http.SameSiteStrictMode})
}

// CSRFMessage is what a page answers (403) to a POST without its CSRF
// token or with a wrong one.
const CSRFMessage = "This action needs the page's CSRF token, and the request had none or a wrong one: reload the page and try again."

// CheckCSRF reads r's form and reports whether its csrf field is want (a
// session's CSRF token), in constant time. A form that cannot be read is
// an error.
func CheckCSRF(r *http.Request, want string) (bool, error) {
	if err := r.ParseForm(); err != nil {
		return false, fmt.Errorf("read the form: %w", err)
	}
	got := r.PostFormValue("csrf")
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1, nil
}

// NewFormNonce sets the double-submit cookie of a sign-in form (name, on
// path, for an hour) and returns the value the form carries as csrf.
func NewFormNonce(w http.ResponseWriter, r *http.Request, name, path string) string {
	v := RandomString()
	http.SetCookie(w, &http.Cookie{Name: name, Value: v, Path: path, HttpOnly: true, Secure: Secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	return v
}

// CheckFormNonce reports whether the posted form's csrf field matches the
// double-submit cookie name that NewFormNonce set. r's form must be
// parsed.
func CheckFormNonce(r *http.Request, name string) bool {
	ck, err := r.Cookie(name)
	return err == nil && ck.Value != "" && subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostFormValue("csrf"))) == 1
}

// SafeNext keeps a redirect target under prefix (which ends with "/"): any
// other target, another host's included, is prefix itself.
func SafeNext(next, prefix string) string {
	if !strings.HasPrefix(next, prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return prefix
	}
	return next
}
