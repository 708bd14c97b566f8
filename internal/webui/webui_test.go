package webui

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/me/notifications?cursor=x": "/me/notifications?cursor=x",
		"/me/":                       "/me/",
		"":                           "/me/",
		"https://evil.example/me/":   "/me/",
		"//evil.example/me/":         "/me/",
		"/me/\\evil":                 "/me/",
		"/admin/":                    "/me/",
	} {
		if got := SafeNext(next, "/me/"); got != want {
			t.Errorf("SafeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func post(form url.Values, cookies ...*http.Cookie) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/me/x", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range cookies {
		r.AddCookie(c)
	}
	return r
}

func TestCheckCSRF(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sent, want string
		ok         bool
	}{{"tok", "tok", true}, {"", "tok", false}, {"tok2", "tok", false}, {"", "", false}} {
		ok, err := CheckCSRF(post(url.Values{"csrf": {c.sent}}), c.want)
		if err != nil || ok != c.ok {
			t.Errorf("CheckCSRF(sent %q, want %q) = %v, %v", c.sent, c.want, ok, err)
		}
	}
}

func TestFormNonce(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	v := NewFormNonce(rec, httptest.NewRequest(http.MethodGet, "/me/login", nil), "n", "/me")
	ck := rec.Result().Cookies()[0]
	if ck.Value != v || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/me" {
		t.Fatalf("nonce cookie %+v", ck)
	}
	r := post(url.Values{"csrf": {v}}, ck)
	_ = r.ParseForm()
	if !CheckFormNonce(r, "n") {
		t.Error("the form's own nonce is refused")
	}
	r = post(url.Values{"csrf": {"other"}}, ck)
	_ = r.ParseForm()
	if CheckFormNonce(r, "n") {
		t.Error("another nonce is accepted")
	}
	r = post(url.Values{"csrf": {v}})
	_ = r.ParseForm()
	if CheckFormNonce(r, "n") {
		t.Error("a form without its cookie is accepted")
	}
}

func TestProtect(t *testing.T) {
	t.Parallel()
	h := Protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Header().Get("Content-Security-Policy") != CSP || rec.Header().Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers: %v", rec.Header())
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a cross-site POST: %d", rec.Code)
	}
}
