package webui

import (
	"net/http"
	"net/url"
)

// Guard is how a page set lets a request in: Authenticate names the caller
// of a request (a bearer header or the set's session cookie), or refuses it
// with a status and a message; Fail answers a refusal with the set's error
// page.
type Guard[C any] struct {
	// Login is the sign-in form's path (/admin/login), where a GET without
	// credentials is sent back with next= (and error= when its session
	// ended, saying why).
	Login string
	// Cookie is the name of the set's session cookie.
	Cookie string
	// Realm is the WWW-Authenticate realm of a refused bearer request.
	Realm string
	// Authenticate returns the caller and, for a session, its CSRF token;
	// a status other than 0 refuses the request with msg.
	Authenticate func(r *http.Request) (c C, csrf string, session bool, status int, msg string)
	// Fail answers with the set's error page.
	Fail func(w http.ResponseWriter, r *http.Request, status int, msg string)
}

// Wrap lets a request reach h when g.Authenticate names its caller and, for
// a POST made with a session, its form carries the session's CSRF token.
func (g Guard[C]) Wrap(h func(w http.ResponseWriter, r *http.Request, c C)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, csrf, session, status, msg := g.Authenticate(r)
		if status != 0 {
			if status == http.StatusUnauthorized && r.Method == http.MethodGet && r.Header.Get("Authorization") == "" {
				target := g.Login + "?next=" + url.QueryEscape(r.URL.RequestURI())
				if ck, err := r.Cookie(g.Cookie); err == nil && ck.Value != "" {
					// A session that ended says why on the sign-in form.
					target += "&error=" + url.QueryEscape(msg)
				}
				http.Redirect(w, r, target, http.StatusSeeOther)
				return
			}
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+g.Realm+`"`)
			}
			g.Fail(w, r, status, msg)
			return
		}
		if r.Method == http.MethodPost && session {
			ok, err := CheckCSRF(r, csrf)
			if err != nil {
				g.Fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
				return
			}
			if !ok {
				g.Fail(w, r, http.StatusForbidden, CSRFMessage)
				return
			}
		}
		h(w, r, c)
	})
}
