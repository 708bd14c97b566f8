package syncer

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/lookout-dev/lookout/internal/connectors"
)

// maxRedirects is how many redirects one request follows, as Go's client.
const maxRedirects = 10

// keptOnCrossOrigin are the request headers still sent after a redirect to
// another origin under follow_redirects: any; every other header (the
// source's configured headers, Authorization, conditional validators,
// Referer) is dropped.
var keptOnCrossOrigin = map[string]bool{"Accept": true, "Accept-Language": true, "User-Agent": true}

// RedirectError is a redirect the source's follow_redirects refused; the
// run fails with it.
type RedirectError struct {
	// Source is the source's name.
	Source string
	// From and To are the redirecting and the named URL, credentials in
	// their query redacted.
	From, To string
	// Why says which rule refused it.
	Why string
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("source %s: redirect from %s to %s refused: %s", e.Source, e.From, e.To, e.Why)
}

// redirectMode is a source's follow_redirects.
type redirectMode uint8

const (
	redirectSameOrigin redirectMode = iota // same_origin, the default
	redirectAny                            // any
	redirectNone                           // none
)

// redirectModeOf is the mode of a follow_redirects value (validated by
// the configuration: anything else is same_origin).
func redirectModeOf(s string) redirectMode {
	switch s {
	case "any":
		return redirectAny
	case "none":
		return redirectNone
	}
	return redirectSameOrigin
}

// checkRedirect is the CheckRedirect of a source's HTTP client: it applies
// the source's follow_redirects mode (same_origin, any or none). The
// origin is the scheme, host and port of the request the connector made.
func (t *politeTransport) checkRedirect(req *http.Request, via []*http.Request) error {
	source, mode := t.source, t.redirects
	first, prev := via[0].URL, via[len(via)-1].URL
	refuse := func(format string, args ...any) error {
		return &RedirectError{Source: source, From: connectors.Redact(prev.String()), To: connectors.Redact(req.URL.String()),
			Why: fmt.Sprintf(format, args...)}
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return refuse("only http and https redirects are followed")
	}
	if len(via) >= maxRedirects {
		return refuse("stopped after %d redirects", maxRedirects)
	}
	crossed := !sameOrigin(first, req.URL)
	for _, r := range via[1:] {
		crossed = crossed || !sameOrigin(first, r.URL)
	}
	switch mode {
	case redirectNone:
		return refuse("follow_redirects is none")
	case redirectAny:
		if crossed {
			// The client copied the first request's headers: keep
			// the configured ones (and the credentials) at home.
			for k := range req.Header {
				if !keptOnCrossOrigin[k] {
					delete(req.Header, k)
				}
			}
		}
		return nil
	default: // same_origin
		if crossed {
			return refuse("%s is another origin than %s, and follow_redirects is same_origin "+
				"(set follow_redirects: any to follow it without the source's headers)", origin(req.URL), origin(first))
		}
		return nil
	}
}

// sameOrigin reports whether a and b have one scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return origin(a) == origin(b)
}

// origin is scheme://host:port with the scheme's default port made explicit.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}
