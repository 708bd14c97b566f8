package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lookout-dev/lookout/internal/control"
)

// POST /v1/me/link mints a sign-in link of the caller's token (no body
// needed); a bad ttl is a 422 at /ttl; no token, a 401.
func TestMeLink(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var l control.SignInLink
	if resp := f.do(http.MethodPost, "/v1/me/link", "alice", nil, &l); resp.StatusCode != http.StatusCreated {
		t.Fatalf("me_link: %d", resp.StatusCode)
	}
	if !strings.HasPrefix(l.Path, "/me/link?code=lkl_") || l.Owner != "alice" {
		t.Errorf("me_link: %+v", l)
	}
	var l2 control.SignInLink
	if resp := f.do(http.MethodPost, "/v1/me/link", "bob", strings.NewReader(`{"ttl": "5m"}`), &l2); resp.StatusCode != http.StatusCreated || l2.Owner != "bob" || l2.Path == l.Path {
		t.Errorf("me_link with a ttl: %d %+v", resp.StatusCode, l2)
	}
	p := f.problem(http.MethodPost, "/v1/me/link", "alice", strings.NewReader(`{"ttl": "3h"}`), http.StatusUnprocessableEntity)
	if len(p.Errors) != 1 || p.Errors[0].Pointer != "/ttl" {
		t.Errorf("ttl 3h: %+v", p)
	}
	f.problem(http.MethodPost, "/v1/me/link", "", nil, http.StatusUnauthorized)
}
